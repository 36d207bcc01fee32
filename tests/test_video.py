"""video.py: frame folders to MP4 and GIF, frame order, run folders, --concat, and one-line errors."""

import errno
import os
import subprocess
import sys
from pathlib import Path

import imageio.v3 as iio
import pytest
from PIL import Image

from dqn_atari import utils_run, video

ROOT = Path(__file__).resolve().parent.parent


def colour(i: int) -> tuple[int, int, int]:
    return (i * 20 % 256, 255 - i * 20 % 256, i * 67 % 256)


def make_frames(folder: Path, count: int, size=(160, 210), first: int = 0, name="{:06d}.png") -> Path:
    """``count`` frames of one flat colour each, colour(first), colour(first + 1), ..."""
    folder.mkdir(parents=True)
    for i in range(count):
        Image.new("RGB", size, colour(first + i)).save(folder / name.format(i))
    return folder


def gif_colours(path: Path) -> list[tuple[int, int, int]]:
    with Image.open(path) as gif:
        colours = []
        for index in range(gif.n_frames):
            gif.seek(index)
            colours.append(gif.convert("RGB").getpixel((gif.width // 2, gif.height // 2)))
    return colours


def listing(folder: Path) -> list[str]:
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*"))


def run_error(capsys, *argv: str) -> str:
    """Run video.py expecting its one-line error; ``capsys`` may be ``capfd``, to see ffmpeg's output too."""
    assert video.main(list(argv)) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("video.py: error: "), captured.err
    return lines[0]


def test_mp4_and_gif_hold_every_frame_in_order(tmp_path, capsys):
    frames = make_frames(tmp_path / "eval_003", 12)
    assert video.main([str(frames)]) == 0
    mp4 = tmp_path / "eval_003.mp4"  # beside the folder by default
    assert capsys.readouterr().out.splitlines() == [str(mp4)]
    pixels = iio.imread(mp4, plugin="FFMPEG")
    assert pixels.shape == (12, 210, 160, 3)
    # H.264 is lossy: colours only come back close, but close enough to tell the frames apart
    for i, frame in enumerate(pixels):
        assert abs(frame[105, 80].astype(int) - colour(i)).max() < 12

    assert video.main([str(frames), "-o", str(tmp_path / "clip.gif"), "--fps", "20"]) == 0
    assert gif_colours(tmp_path / "clip.gif") == [colour(i) for i in range(12)]
    with Image.open(tmp_path / "clip.gif") as gif:
        assert gif.size == (160, 210) and gif.info["duration"] == 50
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clip.gif", "eval_003", "eval_003.mp4"]  # no temp files


def test_a_gif_plays_at_its_fps(tmp_path):
    """GIFs count time in hundredths: at 15 fps (6.67 each) 30 frames must last 2 s, not 1.8 (every
    frame truncated to 6, 11% fast) or 2.1 (rounded to 7)."""
    frames = make_frames(tmp_path / "eval_000", 30)
    assert video.main([str(frames), "-o", str(tmp_path / "clip.gif"), "--fps", "15"]) == 0
    durations = gif_durations(tmp_path / "clip.gif")
    assert sum(durations) == 2000 and set(durations) == {60, 70}
    assert video.gif_durations(3, 20) == [50, 50, 50] and sum(video.gif_durations(7, 30)) == 230


def gif_durations(path: Path) -> list[int]:
    """Each frame's display time in ms, as the GIF stores it."""
    with Image.open(path) as gif:
        durations = []
        for index in range(gif.n_frames):
            gif.seek(index)
            durations.append(gif.info["duration"])
    return durations


def test_a_video_plays_at_the_games_own_speed_unless_told(tmp_path):
    """One frame is one agent step, 4 emulator frames at 60 Hz: 15 frames a second is the game's speed (the
    default was 30, twice it). 30 agent steps last 2 s."""
    frames = make_frames(tmp_path / "eval_000", 30)
    assert video.main([str(frames), "-o", str(tmp_path / "clip.gif")]) == 0
    assert sum(gif_durations(tmp_path / "clip.gif")) == 2000


def test_frames_are_in_numeric_order(tmp_path):
    folder = tmp_path / "frames"
    folder.mkdir()
    for number in (10, 2, 3):  # by name, 000003.png < 10.png < 2.png
        name = f"{number:06d}.png" if number == 3 else f"{number}.png"
        Image.new("RGB", (8, 6), colour(number)).save(folder / name)
    assert [p.name for p in video.frame_paths(folder)] == ["2.png", "000003.png", "10.png"]
    assert video.main([str(folder), "-o", str(tmp_path / "out.gif")]) == 0
    assert gif_colours(tmp_path / "out.gif") == [colour(2), colour(3), colour(10)]


def test_odd_sizes_are_padded_to_even(tmp_path):
    frames = make_frames(tmp_path / "odd", 3, size=(15, 11))
    assert video.main([str(frames), "-o", str(tmp_path / "odd.mp4")]) == 0
    assert iio.imread(tmp_path / "odd.mp4", plugin="FFMPEG").shape == (3, 12, 16, 3)


def test_run_folder_and_concat(tmp_path, capsys):
    run = tmp_path / "run"
    make_frames(run / "eval_010", 2, first=0)
    make_frames(run / "eval_002", 3, first=2)
    make_frames(run / "eval_011.partial", 1)  # still being written by main.py: ignored
    (run / "rewards.txt").write_text("  0        0 1.0\n")

    assert video.main([str(run), "-o", str(tmp_path / "videos")]) == 0
    written = [tmp_path / "videos" / "eval_002.mp4", tmp_path / "videos" / "eval_010.mp4"]  # evaluation order
    assert capsys.readouterr().out.splitlines() == [str(path) for path in written]
    assert [len(iio.imread(path, plugin="FFMPEG")) for path in written] == [3, 2]

    assert video.main([str(run)]) == 0
    assert capsys.readouterr().out.splitlines() == [str(run / "eval_002.mp4"), str(run / "eval_010.mp4")]

    other = make_frames(tmp_path / "other", 12, first=5)
    assert video.main([str(run / "eval_002"), str(other), "--concat", "-o", str(tmp_path / "all.mp4")]) == 0
    assert len(iio.imread(tmp_path / "all.mp4", plugin="FFMPEG")) == 15
    assert video.main([str(run), "--concat", "-o", str(tmp_path / "all.gif")]) == 0
    assert gif_colours(tmp_path / "all.gif") == [colour(i) for i in (2, 3, 4, 0, 1)]


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert "holds no frames" in run_error(capsys, str(tmp_path / "empty"))
    assert f"no folder {tmp_path / 'missing'}" in run_error(capsys, str(tmp_path / "missing"))

    stray = make_frames(tmp_path / "stray", 2)
    (stray / "notes.txt").write_text("hello")
    assert f"{stray / 'notes.txt'} is not a frame" in run_error(capsys, str(stray))

    twice = make_frames(tmp_path / "twice", 3)
    Image.new("RGB", (160, 210)).save(twice / "2.png")
    assert "have the same frame number" in run_error(capsys, str(twice))

    broken = make_frames(tmp_path / "broken", 2)
    (broken / "000002.png").write_text("not an image")
    assert f"{broken / '000002.png'} is not a readable image" in run_error(capsys, str(broken))

    sizes = make_frames(tmp_path / "sizes", 3)
    Image.new("RGB", (160, 200)).save(sizes / "000010.png")
    Image.new("RGB", (160, 200)).save(sizes / "000011.png")
    message = run_error(capsys, str(sizes))
    assert f"{sizes / '000010.png'} is 160x200 but {sizes / '000000.png'} is 160x210" in message

    run = tmp_path / "run"
    run.mkdir()
    (run / "rewards.txt").write_text("  0        0 1.0\n")
    assert "without eval_NNN folders" in run_error(capsys, str(run))

    good = make_frames(tmp_path / "good", 2)
    assert "use --concat" in run_error(capsys, str(good), str(good), "-o", str(tmp_path / "x.mp4"))
    assert "-o FILE.mp4" in run_error(capsys, str(good), "--concat")
    assert "give a .mp4 or .gif file, or a folder" in run_error(capsys, str(good), "-o", str(tmp_path / "x.avi"))
    assert "both be written" in run_error(capsys, str(good), str(good))
    assert not list(tmp_path.rglob("*.mp4")) and not list(tmp_path.rglob("*.gif"))


def test_command_line(tmp_path):
    frames = make_frames(tmp_path / "eval_000", 3)
    done = subprocess.run(
        [sys.executable, str(ROOT / "video.py"), str(frames), "-o", str(tmp_path / "a.gif")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{tmp_path / 'a.gif'}\n"
    assert gif_colours(tmp_path / "a.gif") == [colour(i) for i in range(3)]


@pytest.mark.parametrize("fps", ["nan", "inf", "-inf", "0", "-15", "0.09", "1000.5", "5000", "1e309", "fast", ""])
def test_fps_out_of_range_is_an_argparse_error(tmp_path, capsys, fps):
    frames = make_frames(tmp_path / "eval_000", 2, size=(8, 6))
    with pytest.raises(SystemExit) as stop:
        video.main([str(frames), f"--fps={fps}"])
    assert stop.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines()[-1].endswith(
        f"error: argument --fps: must be a number from 0.1 to 1000, got {fps!r}"
    )
    assert "Traceback" not in captured.err


def test_fps_range_ends_are_accepted(tmp_path):
    assert [video.frames_per_second(text) for text in ("0.1", "1000", "1e3", " 15 ")] == [0.1, 1000.0, 1000.0, 15.0]
    frames = make_frames(tmp_path / "eval_000", 2, size=(8, 6))
    assert video.main([str(frames), "-o", str(tmp_path / "slow.gif"), "--fps", "0.1"]) == 0
    with Image.open(tmp_path / "slow.gif") as gif:
        assert gif.info["duration"] == 10_000
    assert video.main([str(frames), "-o", str(tmp_path / "fast.mp4"), "--fps", "1000"]) == 0
    assert len(iio.imread(tmp_path / "fast.mp4", plugin="FFMPEG")) == 2


def no_space(images, path: Path, fps: float, **options) -> None:
    """A writer that runs out of disk space half-way through the file."""
    path.write_bytes(b"GIF89a")
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def no_permission(images, path: Path, fps: float, **options) -> None:
    raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))


@pytest.mark.parametrize(
    ("output", "writer", "reason"),
    [
        ("file/clip.mp4", None, "Not a directory"),  # ffmpeg's own open fails
        ("file/clip.gif", None, "Not a directory"),
        ("file/videos", None, "Not a directory"),  # -o a folder for the videos, which cannot be made
        ("file/sub/clip.mp4", None, "Not a directory"),  # the missing folder cannot be made
        ("folder.mp4", None, "Is a directory"),
        ("clip.gif", no_space, "No space left on device"),
        ("clip.gif", no_permission, "Permission denied"),
    ],
)
def test_unwritable_output_is_one_line_and_exit_2(tmp_path, capfd, monkeypatch, output, writer, reason):
    frames = make_frames(tmp_path / "eval_000", 2, size=(8, 6))
    (tmp_path / "file").write_text("a regular file")
    (tmp_path / "folder.mp4").mkdir()
    (tmp_path / "clip.gif").write_bytes(b"an earlier video")
    if writer:
        monkeypatch.setattr(video, "write_gif", writer)
    before = listing(tmp_path)
    target = tmp_path / output / "eval_000.mp4" if output == "file/videos" else tmp_path / output
    message = run_error(capfd, str(frames), "-o", str(tmp_path / output))
    assert message == f"video.py: error: cannot write {target}: {reason}"
    assert listing(tmp_path) == before  # nothing new, not even a temporary file
    assert (tmp_path / "clip.gif").read_bytes() == b"an earlier video"


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_ffmpeg_failing_to_write_is_one_line_and_exit_2(tmp_path, capfd, monkeypatch):
    frames = make_frames(tmp_path / "eval_000", 2, size=(8, 6))
    before = listing(tmp_path)
    real_create = utils_run.create_temporary

    def onto_a_full_device(path):
        """write_atomically's temporary file, made a device where every write fails with ENOSPC, like a full disk."""
        temporary, descriptor = real_create(path)
        temporary.unlink()
        temporary.symlink_to("/dev/full")
        return temporary, descriptor

    monkeypatch.setattr(utils_run, "create_temporary", onto_a_full_device)
    message = run_error(capfd, str(frames))  # capfd: ffmpeg's own messages would show there too
    assert message == f"video.py: error: cannot write {tmp_path / 'eval_000.mp4'}: No space left on device"
    assert listing(tmp_path) == before


def test_ffmpeg_error_keeps_the_os_reason():
    log = (
        "[out#0/mp4 @ 0x5] Could not write header (incorrect codec parameters ?): No space left on device\n"
        "[vf#0:0 @ 0x6] Error sending frames to consumers: Invalid argument\n"
    )
    error = video.ffmpeg_error(log, 228)
    assert isinstance(error, OSError) and (error.errno, error.strerror) == (errno.ENOSPC, "No space left on device")
    assert str(video.ffmpeg_error("[libx264 @ 0x7] broken\nmore\n", 1)) == "ffmpeg failed: [libx264 @ 0x7] broken"
    assert str(video.ffmpeg_error("", -9)) == "ffmpeg failed: exit status -9"
