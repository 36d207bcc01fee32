"""Turn rendered evaluation games into videos: ``python video.py runs/Pong-seed0/eval_003``.

``main.py --render`` saves the first game of evaluation NNN as ``eval_NNN/000000.png, 000001.png, ...``,
one frame per agent step. This writes such folders as H.264 MP4s (the ffmpeg binary that imageio-ffmpeg
bundles) or animated GIFs (pillow).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import functools
import itertools
import math
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from imageio_ffmpeg import get_ffmpeg_exe
from PIL import Image, UnidentifiedImageError
from tqdm import tqdm

from dqn_atari.utils_run import write_atomically

EVAL_FOLDER = re.compile(r"eval_(\d+)")  # not eval_NNN.partial: main.py is still writing that one
FRAME_FILE = re.compile(r"(\d+)\.png", re.IGNORECASE)
VIDEO_SUFFIXES = (".mp4", ".gif")
RUN_MARKERS = ("rewards.txt", "model_*.pt")
FPS_RANGE = (0.1, 1000.0)  # one frame per 10 s to 1000 a second; anything else is a typo, not a video
GAME_SPEED_FPS = 15.0  # a frame is an agent step, 4 emulator frames of the Atari's 60 a second: the game's own speed


class VideoError(Exception):
    """Bad input, reported as one line on stderr with exit status 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=(
            "Turn frame folders written by main.py --render into MP4 (H.264, yuv420p) or GIF videos.\n"
            "H.264 in yuv420p needs an even width and height: a frame with an odd one gets a black column or\n"
            "row added on the right or bottom. Frames are never resized (Atari's 160x210 is already even)."
        ),
        epilog=(
            "examples:\n"
            "  python video.py runs/Pong-seed0/eval_003             # writes runs/Pong-seed0/eval_003.mp4\n"
            "  python video.py runs/Pong-seed0 -o videos            # videos/eval_000.mp4, eval_001.mp4, ...\n"
            "  python video.py runs/Pong-seed0 --concat -o all.mp4  # every evaluation, one after the other\n"
            "  python video.py runs/Pong-seed0/eval_003 -o pong.gif --fps 30  # twice the game's speed"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "folders",
        nargs="+",
        type=Path,
        metavar="FOLDER",
        help="an eval_NNN folder of frames, or a run folder (meaning all its eval_NNN folders, in order)",
    )
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        metavar="PATH",
        help="FILE.mp4 or FILE.gif (for one folder, or with --concat), or else a folder for one video per "
        "frame folder, created if missing (default: beside each frame folder, RUN/eval_NNN.mp4)",
    )
    parser.add_argument(
        "--fps",
        type=frames_per_second,
        default=GAME_SPEED_FPS,
        help=f"frames per second, 0.1 to 1000 (default: {GAME_SPEED_FPS:g}, the game's real speed: one frame is one "
        "agent step of 4 emulator frames at 60 Hz). GIFs store durations in 1/100 s, and browsers slow GIFs above 50 fps",
    )
    parser.add_argument(
        "--concat", action="store_true", help="write all folders, in the order given, into one video: -o FILE"
    )
    return parser


def frames_per_second(text: str) -> float:
    """--fps: a finite number within FPS_RANGE."""
    low, high = FPS_RANGE
    try:
        value = float(text)
    except ValueError:
        value = math.nan  # not a number: the same error as "nan"
    if not low <= value <= high:  # also rejects nan and inf
        raise argparse.ArgumentTypeError(f"must be a number from {low:g} to {high:g}, got {text!r}")
    return value


def frame_folders(path: Path) -> list[Path]:
    """A run folder stands for its eval_NNN folders in evaluation order; any other folder holds frames."""
    if not path.exists():
        raise VideoError(f"no folder {path}")
    if not path.is_dir():
        raise VideoError(f"{path} is not a folder")
    evaluations = [p for p in path.iterdir() if p.is_dir() and EVAL_FOLDER.fullmatch(p.name)]
    if evaluations:
        return sorted(evaluations, key=lambda p: int(EVAL_FOLDER.fullmatch(p.name)[1]))
    if any(any(path.glob(marker)) for marker in RUN_MARKERS):
        raise VideoError(f"{path} is a run folder without eval_NNN folders: main.py saves frames with --render")
    return [path]


def frame_paths(folder: Path) -> list[Path]:
    """The folder's frames in numeric order (2.png before 10.png), refusing anything else in it."""
    entries = list(folder.iterdir())
    if not entries:
        raise VideoError(f"{folder} holds no frames")
    for entry in sorted(entries):
        if not (entry.is_file() and FRAME_FILE.fullmatch(entry.name)):
            raise VideoError(f"{entry} is not a frame: a frame folder holds only numbered PNGs (000000.png, ...)")
    frames = sorted(entries, key=lambda p: int(p.stem))
    for before, after in itertools.pairwise(frames):
        if int(before.stem) == int(after.stem):
            raise VideoError(f"{before} and {after} have the same frame number")
    return frames


def check_frames(frames: list[Path]) -> None:
    """Read every frame's header, so an unreadable or odd-sized frame fails before any video is written."""
    first_size = None
    for path in frames:
        try:
            with Image.open(path) as image:
                size = image.size
        except (UnidentifiedImageError, OSError):
            raise VideoError(f"{path} is not a readable image") from None
        if first_size is None:
            first_size = size
        elif size != first_size:
            raise VideoError(
                f"{path} is {size[0]}x{size[1]} but {frames[0]} is {first_size[0]}x{first_size[1]}: "
                "all frames of a video must be the same size"
            )


def plan(inputs: list[Path], output: Path | None, concat: bool) -> list[tuple[list[Path], Path]]:
    """Check all the input and decide every video to write: (frames, target file) pairs."""
    folders = []
    for path in inputs:
        if path.name in ("", ".."):  # "." or "..": name the video after the real folder
            path = path.resolve()
        folders.extend(frame_folders(path))
    output_is_file = output is not None and output.suffix.lower() in VIDEO_SUFFIXES
    if output is not None and output.suffix and not output_is_file and not output.is_dir():
        raise VideoError(f"-o {output}: give a .mp4 or .gif file, or a folder")
    if concat:
        if not output_is_file:
            raise VideoError("--concat writes one video: give its file with -o FILE.mp4 or -o FILE.gif")
        jobs = [([frame for folder in folders for frame in frame_paths(folder)], output)]
    elif output_is_file:
        if len(folders) > 1:
            raise VideoError(
                f"{len(folders)} frame folders but one -o file: use --concat, or give -o a folder for one video each"
            )
        jobs = [(frame_paths(folders[0]), output)]
    else:
        jobs = [(frame_paths(f), (output or f.parent) / f"{f.name}.mp4") for f in folders]
        targets = [target.resolve() for _, target in jobs]
        for target in targets:
            if targets.count(target) > 1:
                raise VideoError(f"two frame folders would both be written to {target}: convert them separately")
    for frames, target in jobs:
        if target.is_dir():  # found now, not after encoding the video
            raise VideoError(f"cannot write {target}: {os.strerror(errno.EISDIR)}")
        check_frames(frames)
    return jobs


def read_frames(frames: list[Path], description: str) -> Iterator[Image.Image]:
    for path in tqdm(frames, desc=description, unit="frame", leave=False, disable=None):
        try:
            with Image.open(path) as image:
                yield image.convert("RGB")
        except OSError:  # a truncated PNG passes the header check and fails only here
            raise VideoError(f"{path} is not a readable image") from None


def write_mp4(images: Iterator[Image.Image], path: Path, fps: float) -> None:
    """Pipe raw RGB frames, padded to even sizes, into ffmpeg. Run here rather than through imageio, which
    ignores ffmpeg's exit status: a video ffmpeg could not write (disk full, say) would pass as written."""
    first = next(images)
    padding = ((0, first.height % 2), (0, first.width % 2), (0, 0))
    size = f"{first.width + first.width % 2}x{first.height + first.height % 2}"
    command = [get_ffmpeg_exe(), "-v", "error", "-y"]
    command += ["-f", "rawvideo", "-pix_fmt", "rgb24", "-s", size, "-r", str(fps), "-i", "-"]
    command += ["-an", "-c:v", "libx264", "-pix_fmt", "yuv420p", str(path)]
    with tempfile.TemporaryFile() as log:  # a file, not a pipe: a pipe nobody reads could fill and block ffmpeg
        try:
            with subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=log) as ffmpeg:
                for image in itertools.chain([first], images):
                    ffmpeg.stdin.write(np.pad(np.asarray(image), padding))
        except BrokenPipeError:
            pass  # ffmpeg stopped reading: its exit status and log tell why
        if ffmpeg.returncode != 0:
            log.seek(0)
            raise ffmpeg_error(log.read().decode(errors="replace"), ffmpeg.returncode)


def ffmpeg_error(log: str, status: int) -> OSError | VideoError:
    """The OS error that ffmpeg's log reports first (it prints strerror's text), else its first line."""
    reported = [(log.find(os.strerror(code)), code) for code in errno.errorcode if os.strerror(code) in log]
    if reported:
        code = min(reported)[1]
        return OSError(code, os.strerror(code))
    lines = log.splitlines()
    return VideoError(f"ffmpeg failed: {lines[0] if lines else f'exit status {status}'}")


def gif_durations(frames: int, fps: float) -> list[int]:
    """Each frame's display time in ms. GIFs count in 1/100 s, so at 15 fps (6.67) every frame
    rounded to 7 would play 5% slow and truncated to 6 (pillow's) 11% fast: frame i ends at the
    hundredth nearest to (i + 1) / fps, so the whole plays at ``fps`` and no frame drifts by more
    than half a hundredth."""
    ends = [round((i + 1) * 100 / fps) for i in range(frames)]
    return [10 * (end - start) for start, end in zip([0, *ends[:-1]], ends, strict=True)]


def write_gif(images: Iterator[Image.Image], path: Path, fps: float, frames: int) -> None:
    # pillow merges identical consecutive frames into one longer frame, so the playing time is kept
    first = next(images)
    durations = gif_durations(frames, fps)
    first.save(path, format="GIF", save_all=True, append_images=images, duration=durations, loop=0)


def write_video(frames: list[Path], target: Path, fps: float) -> None:
    write = functools.partial(write_gif, frames=len(frames)) if target.suffix.lower() == ".gif" else write_mp4
    try:
        with contextlib.suppress(FileExistsError):  # a file in the folder's place: the write says "Not a directory"
            target.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(target, lambda temporary: write(read_frames(frames, target.name), temporary, fps))
    except OSError as error:  # reading errors are VideoErrors already: this is the output
        raise VideoError(f"cannot write {target}: {error.strerror or error}") from None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        jobs = plan(args.folders, args.output, args.concat)
        for frames, target in jobs:
            write_video(frames, target, args.fps)
            print(target, flush=True)
    except VideoError as error:
        print(f"video.py: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
