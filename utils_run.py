"""The run folder: its text logs, its checkpoints (written and read here), its saved replay memory and its lock.

- ``rewards.txt``: one line per evaluation (index, step, mean, std, min, max, episodes, wall seconds).
- ``episodes.csv``: one line per finished training game (step, score, length, epsilon, seconds), with a header.
- ``memory_health.csv`` (prioritized replay): the sum tree checked at each evaluation (``MemoryHealth``).
- ``model_NNN.pt``: the checkpoint of evaluation NNN, carrying that evaluation's rewards.txt line;
  ``model_interrupted.pt``: the checkpoint of a run stopped with Ctrl-C.
- ``config.json``: the run's options, as its checkpoints hold them (a small text copy, for reports), and under
  ``versions`` what its numbers depend on besides (``run_versions``), as each checkpoint holds it too.
- ``memory.pt``: the replay memory at the latest checkpoint (``--save-memory``); ``memory_<step>.pt``: the
  memory of a checkpoint being written (``save_memory``, ``settle_memory``).
- ``.lock``: held by the one process that trains in the folder.

Everything is written atomically (``write_atomically``), under temporary names no one can plant a link
at, and a folder where one of these names is a symbolic link is refused (``refuse_links``): the programs
write only inside their folders. A resume reconciles the logs with the checkpoint it starts from, so no
evaluation or game is ever missing or logged twice.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import importlib.metadata
import io
import json
import math
import os
import platform
import re
import secrets
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import torch

from dqn_atari.utils_types import EvalResult, FinishedGames, GameResult, MemoryHealth, Progress

REWARDS_FILE = "rewards.txt"
EPISODES_FILE = "episodes.csv"
EPISODES_HEADER = "step,score,length,epsilon,seconds\n"
# Runs before the seconds column; read as seconds unknown (nan), and rewritten on resume.
OLD_EPISODES_HEADER = "step,score,length,epsilon\n"
HEALTH_FILE = "memory_health.csv"  # prioritized runs: the memory's health at each evaluation
HEALTH_HEADER = ",".join(("step", *MemoryHealth._fields)) + "\n"
CONFIG_FILE = "config.json"
# `git archive` writes its commit here (.gitattributes: export-subst), so that a frozen copy of the code, the way long
# runs are started, records which commit it is.
ARCHIVED_COMMIT = "$Format:%H$"
MEMORY_FILE = "memory.pt"
NEW_MEMORY_FILE = re.compile(r"memory_(\d+)\.pt")  # the memory of a checkpoint being written (save_memory)
# What a killed run can leave half-written, and nothing else: a user's own `.notes.tmp.md` or
# `eval_old.partial/` in a folder given as --out are theirs (write_atomically's temporary names, with
# their random part, and those of versions before it, without).
LEFTOVER_FILE = re.compile(
    r"\.(model_(\d+|interrupted)|memory(_\d+)?|rewards|episodes|memory_health|config)(\.[0-9a-f]{8})?\.tmp\.(pt|txt|csv|json)"
)
LEFTOVER_FRAMES = re.compile(r"eval_\d{3,}\.partial")
INTERRUPTED_CHECKPOINT = "model_interrupted.pt"
LOCK_FILE = ".lock"
# The names the programs write in a run folder (main.py; sweep.py's main.log) or a sweep folder (its report,
# its stop file, its run folders): a symbolic link at one would have them write, or read, outside the folder.
WRITTEN_NAMES = re.compile(
    r"rewards\.txt|episodes\.csv|memory_health\.csv|config\.json|memory(_\d+)?\.pt|model_(\d+|interrupted)\.pt|main\.log|\.lock"
    r"|eval_\d{3,}(\.partial)?|tensorboard|wandb|\.stop|report\.(md|json)|aggregate\.png|\w+-seed\d+"
)
# rewards.txt's two layouts: the classic three columns of older files, and the eight written since.
REWARDS_COLUMNS = {3: "index, step, score", 8: "index, step, score, std, min, max, episodes, seconds"}


class RunLogError(Exception):
    """A log file that cannot be read; the message names ``path:line``."""


def append_line(path: Path, line: str) -> None:
    existing = path.read_bytes() if path.exists() else b""
    write_atomically(path, existing + line.encode())


def rewards_line(index: int, step: int, result: EvalResult, wall_seconds: float) -> str:
    scores = np.asarray(result.scores)
    return (
        f"{index:3d} {step:8d} {scores.mean():.1f} {scores.std():.1f} {scores.min():.1f} {scores.max():.1f}"
        f" {len(scores)} {wall_seconds:.0f}\n"
    )


def read_rewards(path: Path) -> list[tuple[int, list[float]]]:
    """rewards.txt as (evaluation index, [step, mean, ...]) per line. A line that does not parse,
    has a column count other than 3 or 8, or breaks the order of indices is a RunLogError."""
    try:
        lines = path.read_text().splitlines()
    except UnicodeDecodeError:
        raise RunLogError(f"{path} is not a text file") from None
    rows: list[tuple[int, list[float]]] = []
    for number, line in enumerate(lines, start=1):
        fields = line.split()
        if len(fields) not in REWARDS_COLUMNS:
            expected = " or ".join(f"{count} ({names})" for count, names in REWARDS_COLUMNS.items())
            raise RunLogError(f"{path}:{number}: expected {expected} columns, got {len(fields)}: {line!r}")
        try:
            index, values = int(fields[0]), [int(fields[1]), *map(float, fields[2:])]
        except ValueError:
            raise RunLogError(f"{path}:{number}: not a number where one is expected: {line!r}") from None
        if not all(math.isfinite(value) for value in values):
            raise RunLogError(f"{path}:{number}: a score that is not a finite number: {line!r}")
        if rows and index <= rows[-1][0]:
            raise RunLogError(f"{path}:{number}: evaluation {index} after evaluation {rows[-1][0]}: out of order")
        rows.append((index, values))
    return rows


def reconcile_rewards(run: Path, evaluations: int, saved_line: Callable[[int], str | None]) -> list[str]:
    """Make ``run``'s rewards.txt hold one line for each evaluation 0 .. ``evaluations`` - 1, the
    ones the checkpoint a run resumes from has done, and return a note for each repair.

    Lines past them (evaluations after that checkpoint, whose checkpoints are gone) are dropped,
    after the old file is saved as ``rewards.txt.bak-<time>``; missing lines are restored from
    ``saved_line(index)`` (the line a checkpoint carries) where it has one; a missing final
    newline is added. Lines that do not parse raise RunLogError naming ``path:line``.
    """
    path = run / REWARDS_FILE
    text = path.read_text() if path.exists() else ""
    rows = read_rewards(path) if text else []
    lines = dict(zip((index for index, _ in rows), text.splitlines(), strict=True))
    notes = []
    later = [index for index in lines if index >= evaluations]
    if later:
        backup = path.with_name(f"{REWARDS_FILE}.bak-{time.strftime('%Y%m%d-%H%M%S')}")
        write_atomically(backup, text.encode())
        notes.append(
            f"{path}: dropped evaluations {later[0]}..{later[-1]}, which came after the checkpoint "
            f"(the old file is {backup.name})"
        )
    restored, lost = [], []
    for index in range(evaluations):
        if index not in lines:
            line = saved_line(index)
            if line:
                lines[index] = line.rstrip("\n")
                restored.append(index)
            else:
                lost.append(index)
    if restored:
        notes.append(f"{path}: restored evaluations {', '.join(map(str, restored))} from their checkpoints")
    if lost:
        notes.append(f"{path}: evaluations {', '.join(map(str, lost))} are lost (no file or checkpoint holds them)")
    repaired = "".join(lines[index] + "\n" for index in sorted(lines) if index < evaluations)
    if repaired != text:
        write_atomically(path, repaired.encode())
    return notes


def episode_line(step: int, game: GameResult, epsilon: float, wall_seconds: float) -> str:
    """``step`` is the training step at which the game ended; ``length`` counts agent steps;
    ``wall_seconds`` is the run's wall time then, across resumes, as in rewards.txt."""
    return f"{step},{game.score:g},{game.length},{epsilon:.4f},{wall_seconds:.1f}\n"


def reconcile_with_checkpoint(run: Path, checkpoint: dict[str, Any]) -> list[str]:
    """``reconcile_rewards`` for a run resuming from ``checkpoint``: a missing line comes from the
    checkpoint itself (its last evaluation's) or from the ``model_NNN.pt`` of its evaluation."""
    evaluations = checkpoint["run"]["evaluations"]

    def saved_line(index: int) -> str | None:
        if index == evaluations - 1 and checkpoint["rewards_line"]:
            return checkpoint["rewards_line"]
        try:
            return load_checkpoint(run / f"model_{index:03d}.pt").get("rewards_line")
        except CheckpointError:
            return None

    return reconcile_rewards(run, evaluations, saved_line)


def health_line(step: int, health: MemoryHealth) -> str:
    """A memory_health.csv line: floats with all their digits, so a drift of one rounding shows."""
    return ",".join([str(step), *(repr(float(value)) for value in health[:-1]), str(health.sampleable)]) + "\n"


def start_log(path: Path, step: int, header: str = EPISODES_HEADER) -> None:
    """Make the log ``path`` (episodes.csv, or another CSV log of rows that start with a step) ready for a run at
    ``step``: create it with its header, or drop the rows after ``step`` (written after the checkpoint a run
    resumes from), so none appears twice."""
    if not path.exists():
        write_atomically(path, header.encode())
        return
    text = path.read_text()
    rows = read_log(path, header)
    kept = text.splitlines()[1 : 1 + int(np.sum(rows[:, 0] <= step))]
    old = text.startswith(OLD_EPISODES_HEADER) and header == EPISODES_HEADER
    if old:  # the games before this version: wall time unknown
        kept = [f"{line},nan" for line in kept]
    if len(kept) < len(rows) or old or not text.endswith("\n"):
        write_atomically(path, (header + "".join(line + "\n" for line in kept)).encode())


def read_episodes(path: Path) -> np.ndarray:
    """episodes.csv as a float array of shape (games, 5): step, score, length, epsilon, seconds
    (nan in a file written before the seconds column)."""
    if not path.is_file():
        raise RunLogError(f"no training-game log {path}")
    return read_log(path, EPISODES_HEADER)


def read_log(path: Path, header: str) -> np.ndarray:
    """A CSV log of finite numbers under ``header`` as a float array, one row a line; episodes.csv may have
    the header of before its seconds column, whose rows get seconds nan."""
    lines = path.read_text().splitlines()
    found = lines[0] + "\n" if lines else ""
    if found not in (header, OLD_EPISODES_HEADER if header == EPISODES_HEADER else header):
        raise RunLogError(f"{path}:1: expected the header {header.strip()!r}")
    columns, width = found.strip().split(","), header.count(",") + 1
    rows = []
    for number, line in enumerate(lines[1:], start=2):
        try:
            row = [float(field) for field in line.split(",")]
        except ValueError:
            row = []
        if len(row) != len(columns) or not all(math.isfinite(value) for value in row):
            raise RunLogError(
                f"{path}:{number}: expected {len(columns)} finite numbers ({','.join(columns)}), got {line!r}"
            )
        rows.append(row + [math.nan] * (width - len(row)))
    return np.array(rows, dtype=np.float64).reshape(-1, width)


# How config.json holds a float that is not finite (--grad-clip inf): strict JSON has no Infinity or NaN.
NON_FINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


def save_config(run: Path, config: dict[str, Any]) -> None:
    """Write ``config`` as strict JSON, a float that is not finite as its name ("inf"); no option takes those
    names as a string."""
    strict = {name: str(value) if isinstance(value, float) and not math.isfinite(value) else value
              for name, value in config.items()}  # fmt: skip
    write_atomically(run / CONFIG_FILE, (json.dumps(strict, indent=1, sort_keys=True, allow_nan=False) + "\n").encode())


def markdown_table(values: dict[str, Any]) -> str:
    """``values`` as a two-column Markdown table, a row each (TensorBoard's text panel shows it, as CleanRL's
    hyperparameters)."""
    return "|name|value|\n|-|-|\n" + "".join(f"|{cell(name)}|{cell(value)}|\n" for name, value in values.items())


def cell(text: object) -> str:
    """``text`` as a Markdown table's cell: its | escaped and its line breaks spaces, so that it stays one cell."""
    return " ".join(str(text).splitlines()).replace("|", "\\|")


class TrackerError(Exception):
    """Weights & Biases could not start the run's tracking (--track): reported in one line, before any training."""


class Trackers:
    """Where a run's figures go besides its files: TensorBoard (--tensorboard, RUN/tensorboard) and Weights & Biases
    (--track, RUN/wandb), the same names at the same agent steps in both. Either may be off; with both off every call
    does nothing."""

    def __init__(self, args: Any, progress: Progress, config: dict[str, Any], versions: dict[str, str]) -> None:
        out, step = Path(args.out), progress.step
        self.tensorboard = self.wandb = None
        if args.track:
            import wandb  # optional dependency, checked with the flags

            progress.wandb_run_id = progress.wandb_run_id or secrets.token_hex(4)  # checkpoints carry it on
            try:
                self.wandb = wandb.init(
                    project=args.wandb_project_name,
                    entity=args.wandb_entity,
                    id=progress.wandb_run_id,
                    resume="allow",
                    name=out.name,
                    dir=out,
                    reinit="create_new",  # its own run, beside any the Python API's caller has open
                )
                # A resume may change some options and versions: W&B keeps the newest.
                self.wandb.config.update({**config, "versions": versions}, allow_val_change=True)
            except Exception as error:  # W&B's own errors (no login, no network) share no base class
                self.close(1)
                reason = " ".join(str(error).split()) or type(error).__name__
                raise TrackerError(
                    f"--track: Weights & Biases could not start the run ({reason}); log in with `wandb login`, or "
                    "set WANDB_MODE=offline to keep it under RUN/wandb and `wandb sync` it later"
                ) from None
        if args.tensorboard:
            from torch.utils.tensorboard import SummaryWriter  # optional dependency, checked with the flags

            # Events a run logged past the checkpoint it resumes from (it went further, then was killed) are hidden,
            # so that curves never double back.
            self.tensorboard = SummaryWriter(str(out / "tensorboard"), purge_step=step + 1 if step else None)
            # At each start, as a resume may change some options and run on other versions.
            self.tensorboard.add_text("hyperparameters", markdown_table(config), step)
            self.tensorboard.add_text("versions", markdown_table(versions), step)

    @property
    def active(self) -> bool:
        """Whether any tracker is on: figures made only for them (steps/s, averages read from the device) can wait."""
        return bool(self.tensorboard or self.wandb)

    def scalars(self, values: dict[str, float], step: int) -> None:
        if self.tensorboard:
            for name, value in values.items():
                self.tensorboard.add_scalar(name, value, step)
        if self.wandb:
            self.wandb.log(values, step=step)

    def video(self, name: str, frames: Path, step: int) -> None:
        """The frames ``main.py --render`` saved (``frames``: an eval_NNN folder) as a W&B video at ``step``."""
        if not self.wandb:
            return
        import tempfile

        import wandb

        from dqn_atari.video import GAME_SPEED_FPS, VideoError, frame_paths, write_video  # it imports this module

        with tempfile.TemporaryDirectory() as folder:  # W&B copies the file into its run's media
            path = Path(folder) / f"{frames.name}.mp4"
            try:
                write_video(frame_paths(frames), path, GAME_SPEED_FPS)
            except VideoError as error:  # the frames stay, and the run goes on
                print(f"Note: no W&B video of {frames.name}: {error}", flush=True)
                return
            self.wandb.log({name: wandb.Video(str(path), format="mp4")}, step=step)

    def close(self, exit_code: int) -> None:
        """Flush and close both; ``exit_code`` 0 (finished, or stopped to be resumed) or 1 (failed) for W&B."""
        if self.tensorboard:
            self.tensorboard.close()
            self.tensorboard = None
        if self.wandb:
            self.wandb.finish(exit_code=exit_code)
            self.wandb = None


def run_versions(threads: int) -> dict[str, str]:
    """What a run's numbers depend on besides its options: this code (its git commit, ``-dirty`` with uncommitted
    changes, or the installed package's version), Python, torch and its build, numpy, gymnasium, ale-py, numba, the
    CPU and the learner's threads."""
    versions = {
        "code": code_version(),
        "python": platform.python_version(),
        "torch": str(torch.__version__),  # a TorchVersion, which weights_only loading refuses
        "torch_build": f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU",
    }
    for package in ("numpy", "gymnasium", "ale-py", "numba"):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = "not installed"
    return {**versions, "cpu": cpu_model(), "threads": str(threads)}


def code_version() -> str:
    """'commit <hash>[-dirty]' in a git checkout, 'commit <hash> (git archive)' in a copy made by `git archive`,
    else 'dqn-atari <version>' where installed, else 'unknown'."""
    root = Path(__file__).resolve().parent
    if (root / ".git").exists():
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            described = subprocess.run(
                ["git", "-C", str(root), "describe", "--always", "--dirty", "--abbrev=12"],
                capture_output=True, text=True, timeout=30, check=True,
            ).stdout.strip()  # fmt: skip
            return f"commit {described}"
    if not ARCHIVED_COMMIT.startswith("$"):
        return f"commit {ARCHIVED_COMMIT[:12]} (git archive)"
    try:
        return f"dqn-atari {importlib.metadata.version('dqn-atari')}"
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def cpu_model() -> str:
    """The CPU's model name as Linux gives it, with its family, model, stepping and cache: one name ("Intel(R) Xeon(R)
    Processor") covers processors whose float results differ (docs/results.md, issue 67's attempt 5); else what the
    platform says."""
    with contextlib.suppress(OSError):
        first = Path("/proc/cpuinfo").read_text().split("\n\n")[0]  # the first processor's lines
        fields = {key.strip(): value.strip() for key, _, value in (line.partition(":") for line in first.splitlines())}
        if fields.get("model name"):
            names = {"cpu family": "family", "model": "model", "stepping": "stepping", "cache size": "cache"}
            details = ", ".join(f"{shown} {fields[key]}" for key, shown in names.items() if fields.get(key))
            return f"{fields['model name']} ({details})" if details else fields["model name"]
    return platform.processor() or platform.machine() or "unknown"


def versions_note(saved: object, now: dict[str, str]) -> str | None:
    """One line naming how the versions a checkpoint was saved with (``run_versions``') differ from ``now``; None
    where they agree, or where the checkpoint records none (older runs). The thread count is left out: a resume on
    another has a note of its own."""
    if not isinstance(saved, dict):
        return None
    differing = [
        f"{name} {str(saved[name])[:80]}, now {value}"
        for name, value in now.items()
        if name != "threads" and name in saved and saved[name] != value
    ]
    if not differing:
        return None
    more = f"; and {len(differing) - 3} more" if len(differing) > 3 else ""
    return (
        f"the checkpoint was saved with other versions ({'; '.join(differing[:3])}{more}): the run goes on, but a "
        "resume is exact only on the same ones"
    )


def read_config(run: Path) -> dict[str, Any]:
    """The run's options: config.json (as ``save_config`` writes it, or with Infinity as versions before
    it did; its ``versions`` left out), or for runs older than it the newest checkpoint's."""
    path = run / CONFIG_FILE
    if path.is_file():
        try:
            config = json.loads(path.read_text())
        except ValueError as error:
            raise RunLogError(f"{path}: not JSON ({error})") from None
        except RecursionError:  # Python's parser recurses once per level: a file nested 100,000 deep
            raise RunLogError(f"{path}: nested too deeply to be a run's configuration") from None
        if not isinstance(config, dict):
            raise RunLogError(f"{path}: not a run's configuration (a JSON object of its options)")
        return {name: NON_FINITE.get(value, value) if isinstance(value, str) else value
                for name, value in config.items() if name != "versions"}  # fmt: skip
    return load_newest_checkpoint(run)[1]["config"]


def checked_config(run: Path) -> dict[str, Any]:
    """``read_config``'s options with those every report relies on checked (steps a positive whole number, env a
    name, eval_epsilon a probability); one that is not is a RunLogError naming the file."""
    config = read_config(run)
    steps, env, epsilon = (config.get(name) for name in ("steps", "env", "eval_epsilon"))
    wrong = (
        "steps" if not isinstance(steps, int) or isinstance(steps, bool) or steps <= 0
        else "env" if not isinstance(env, str) or not env
        else "eval_epsilon" if not isinstance(epsilon, int | float) or isinstance(epsilon, bool) or not 0 <= epsilon <= 1
        else None
    )  # fmt: skip
    if wrong:
        raise RunLogError(f"{run / CONFIG_FILE}: {wrong} is {repr(config.get(wrong))[:40]}, not a run's {wrong}")
    return config


class RunFolderError(Exception):
    """The run folder cannot be used now; the message is one line for the user."""


def describe_os_error(error: OSError) -> str:
    """One line naming the file and the operating system's reason."""
    if isinstance(error, WriteError) or error.filename is None:
        return str(error)
    return f"{error.filename}: {error.strerror}"


class RunLock:
    """An advisory lock on ``RUN/.lock`` for as long as a run trains in ``RUN``: a second process
    on the same folder is refused. The kernel releases the lock when its process dies, however
    it dies, so a stale lock file never blocks; the file keeps the holder's process id."""

    def __init__(self, run: Path) -> None:
        self.run = run
        self.descriptor: int | None = None

    def __enter__(self) -> RunLock:
        try:
            self.run.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise RunFolderError(f"cannot create the run folder {describe_os_error(error)}") from None
        refuse_links(self.run)
        path = self.run / LOCK_FILE
        try:  # O_NOFOLLOW: never truncate a file elsewhere through a link planted since
            descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as error:
            raise RunFolderError(f"cannot write {path}: {error.strerror}") from None
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(descriptor, 32).decode(errors="replace").strip() or "unknown"
            os.close(descriptor)
            raise RunFolderError(f"{self.run} is in use by process {holder}; wait for it or stop it first") from None
        try:
            os.ftruncate(descriptor, 0)
            os.write(descriptor, f"{os.getpid()}\n".encode())
        except OSError as error:
            os.close(descriptor)
            raise RunFolderError(f"cannot write {path}: {error.strerror}") from None
        self.descriptor = descriptor
        return self

    def __exit__(self, *exception: object) -> None:
        if self.descriptor is not None:
            os.close(self.descriptor)  # releases the lock; the file stays, for the next holder
            self.descriptor = None


def refuse_links(folder: Path) -> None:
    """Raise RunFolderError if one of the names the programs write in ``folder`` (WRITTEN_NAMES) is a
    symbolic link: writing or reading there would reach whatever it points to, outside the folder."""
    paths = folder.iterdir() if folder.is_dir() else []
    names = sorted(path.name for path in paths if WRITTEN_NAMES.fullmatch(path.name) and path.is_symlink())
    if names:
        also = f" (and {', '.join(names[1:])})" if len(names) > 1 else ""
        raise RunFolderError(
            f"{folder / names[0]} is a symbolic link{also}; the programs write only inside their folder: "
            "remove it, or put what it points to in its place"
        )


def remove_leftovers(run: Path) -> None:
    """Delete what a killed process left half-written: temporary files of ``write_atomically`` (or
    a link planted at one of their names) and evaluation frame folders still being filled. Only the
    lock holder may call this."""
    for path in run.iterdir() if run.is_dir() else []:
        if LEFTOVER_FILE.fullmatch(path.name) and (path.is_symlink() or path.is_file()):
            path.unlink(missing_ok=True)
        elif LEFTOVER_FRAMES.fullmatch(path.name) and path.is_dir():
            shutil.rmtree(path, ignore_errors=True)


def check_free_space(run: Path, needed: int) -> None:
    """Refuse to start when the run folder's disk cannot hold a checkpoint of ``needed`` bytes (with
    --save-memory, its replay memory's included)."""
    free = shutil.disk_usage(run).free
    if free < needed:
        raise RunFolderError(
            f"{run}: only {free / 2**20:.0f} MiB free on its disk, and a checkpoint needs {needed / 2**20:.0f} MiB"
            " (with --save-memory, its replay memory too)"
        )


def load_newest_checkpoint(run: Path) -> tuple[Path, dict[str, Any], list[str]]:
    """The readable checkpoint with the highest step: the newest evaluation checkpoint that loads,
    or the interrupted one if it is newer. Also a note for each newer checkpoint that does not load."""
    if not run.is_dir():
        raise CheckpointError(f"no run folder {run}")
    numbered = evaluation_checkpoints(run)
    interrupted = run / INTERRUPTED_CHECKPOINT
    if not numbered and not interrupted.exists():
        raise CheckpointError(f"{run} holds no checkpoint (model_NNN.pt)")
    found: list[tuple[Path, dict[str, Any]]] = []
    unreadable: list[str] = []
    for path in numbered + [interrupted] * interrupted.exists():
        if found and path != interrupted:
            continue  # an older evaluation checkpoint than one already found
        try:
            found.append((path, load_checkpoint(path)))
        except CheckpointError as error:
            unreadable.append(str(error))
    if not found:
        raise CheckpointError("; ".join(unreadable))
    path, checkpoint = max(found, key=lambda item: item[1]["run"]["step"])
    return path, checkpoint, [f"skipped {error}" for error in unreadable]


def playable_checkpoint(path: Path) -> tuple[Path, dict[str, Any], list[str]]:
    """What ``--evaluate`` and ``dqn.load_agent`` play from ``path``: a checkpoint file; a run folder's newest
    checkpoint; or the one agent file (``TrainedAgent.save``'s) of a folder that holds no run, whichever its
    name. Notes as ``load_newest_checkpoint``'s; CheckpointError names the files to choose from where there are
    several."""
    if not path.is_dir():
        return path, load_checkpoint(path), []
    if evaluation_checkpoints(path) or (path / INTERRUPTED_CHECKPOINT).exists():
        return load_newest_checkpoint(path)
    agents = sorted(
        file for file in path.glob("*.pt") if not NEW_MEMORY_FILE.fullmatch(file.name) and file.name != MEMORY_FILE
    )
    if len(agents) == 1:
        return agents[0], load_checkpoint(agents[0]), []
    if agents:
        names = ", ".join(file.name for file in agents[:5]) + (
            f" and {len(agents) - 5} more" if len(agents) > 5 else ""
        )
        raise CheckpointError(f"{path} holds no run but {len(agents)} agent files; give one of them: {names}")
    raise CheckpointError(f"{path} holds no checkpoint (model_NNN.pt)")


def evaluation_checkpoints(run: Path) -> list[Path]:
    """The run's evaluation checkpoints (model_NNN.pt), newest first."""
    numbered = [p for p in run.glob("model_*.pt") if p.stem.removeprefix("model_").isdigit()]
    return sorted(numbered, key=lambda p: int(p.stem.removeprefix("model_")), reverse=True)


def prune_checkpoints(run: Path, keep: int) -> list[Path]:
    """Delete all but the ``keep`` newest evaluation checkpoints (model_NNN.pt) of ``run``; return
    what was deleted. The newest, which a resume starts from, is always kept, and so is
    model_interrupted.pt."""
    older = evaluation_checkpoints(run)[max(keep, 1) :]
    for path in older:
        path.unlink(missing_ok=True)
    return older


def save_memory(run: Path, memory_state: dict[str, Any], step: int, config: dict[str, Any]) -> None:
    """Save the replay memory of the checkpoint at ``step`` being written, with the step and learning
    configuration it belongs to, as ``memory_<step>.pt``: memory.pt stays the previous checkpoint's
    until ``settle_memory`` after the checkpoint, so a crash between the two leaves every checkpoint's
    memory on disk. The disk holds both memories for that time, as it holds the old file and the new
    one while any file is replaced atomically."""
    save_torch(run / f"memory_{step}.pt", {"step": step, "config": config, "memory": memory_state})


def settle_memory(run: Path, step: int) -> None:
    """Once the checkpoint at ``step`` is written (or a run resumes from it), make its memory
    ``memory.pt`` if ``save_memory`` left it under its step's name, and delete the others, which
    belong to no checkpoint (a crash came before theirs was written)."""
    for path in run.iterdir():
        match = NEW_MEMORY_FILE.fullmatch(path.name)
        if match and int(match[1]) == step:
            os.replace(path, run / MEMORY_FILE)
        elif match:
            path.unlink(missing_ok=True)


def memory_of(run: Path, step: int) -> Path:
    """The file holding the memory saved with the checkpoint at ``step``: memory.pt, or
    ``memory_<step>.pt`` if a crash came after the checkpoint but before ``settle_memory``."""
    new = run / f"memory_{step}.pt"
    return new if new.is_file() else run / MEMORY_FILE


def load_memory(
    path: Path, step: int, config: dict[str, Any], defaults: dict[str, Any]
) -> tuple[dict[str, Any] | None, str]:
    """The saved replay memory's state if it belongs to the checkpoint at ``step`` of a run with
    ``config`` (a memory saved with more options, which a resume may now change, belongs to it when those
    of ``config`` agree); otherwise None and why not (empty when there is no saved memory). An option newer
    than the saved memory counts as its value in ``defaults``, which plays as the program did before it."""
    if not path.exists():
        return None, ""
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as error:  # torch raises many types for truncated or foreign files
        return None, f"{path} is not readable ({type(error).__name__}); it may be truncated"
    if not isinstance(saved, dict) or not {"step", "memory"} <= saved.keys():
        return None, f"{path} is not a replay memory of this program"
    if saved["step"] != step:
        return None, f"{path} was saved at step {saved['step']}, not at the checkpoint's step {step}"
    stored = saved.get("config")
    saved_config = {**defaults, **stored} if isinstance(stored, dict) else None
    if saved_config is None or any(saved_config.get(name) != value for name, value in config.items()):
        return None, f"{path} belongs to a run with other settings"
    return saved["memory"], ""


class OutputWithoutReader:
    """A text stream (stdout, stderr) that goes quiet once its reader is gone (``main.py ... | head``, a
    dead ``tee``) instead of raising BrokenPipeError: what a run prints is for reading, and must
    never stop it saving its checkpoint on the way out."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._silence()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._silence()

    def _silence(self) -> None:
        """Point the stream's file descriptor at /dev/null: the buffered text, later writes and the
        interpreter's last flush at exit go there."""
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, self._stream.fileno())
        os.close(devnull)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


# Files written atomically, and the checkpoints.

CHECKPOINT_FORMAT = 1


class CheckpointError(Exception):
    """A checkpoint is missing, unreadable or not one of ours; the message says which."""


class WriteError(OSError):
    """A file that could not be written, named by its real path (not the temporary one)."""

    def __str__(self) -> str:
        return f"cannot write {self.filename}: {self.strerror}"


def write_atomically(path: Path, data: bytes | Callable[[Path], None]) -> None:
    """Write ``data`` (bytes, or a function writing a given path) to a new temporary file in the
    same folder, then rename it over ``path`` (a link there is replaced, never followed), so
    readers never see a half-written file. The temporary name is new and unpredictable, so no
    link planted in the folder can take the write elsewhere; it keeps the suffix, for writers
    that choose a format by it. A failure of the disk raises WriteError with the operating
    system's reason."""
    temporary: Path | None = None
    try:
        temporary, descriptor = create_temporary(path)
        if callable(data):
            os.close(descriptor)
            data(temporary)
        else:
            with open(descriptor, "wb") as file:
                file.write(data)
        os.replace(temporary, path)
    except BaseException as error:
        with contextlib.suppress(OSError):  # a failed cleanup must not hide why the write failed
            if temporary is not None:
                temporary.unlink(missing_ok=True)
        if isinstance(error, OSError) and not isinstance(error, WriteError):
            raise WriteError(error.errno, error.strerror or str(error), str(path)) from error
        raise


def create_temporary(path: Path) -> tuple[Path, int]:
    """A new empty file beside ``path``, ``.<stem>.<8 random hex digits>.tmp<suffix>``, and a descriptor
    open on it for writing. O_EXCL: made here, never reached through a link; mode 0o666 less the umask,
    as any file the program writes."""
    for _ in range(100):  # a name already there (one chance in four billion per file) draws another
        temporary = path.with_name(f".{path.stem}.{secrets.token_hex(4)}.tmp{path.suffix}")
        with contextlib.suppress(FileExistsError):
            return temporary, os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(path))


class _RecordingWriter(io.RawIOBase):
    """A file that remembers the operating system's error of a failed write: torch.save reports
    only a RuntimeError of its own when the disk is full."""

    def __init__(self, file: io.FileIO) -> None:
        self.file = file
        self.error: OSError | None = None

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        # One write(2) moves at most about 2 GiB on Linux, and torch.save ignores a short count: without this loop
        # a memory past 2 GiB was written cut short and read back as truncated (the main job's, from 2026-11-27).
        view = memoryview(data).cast("B")
        written = 0
        try:
            while written < len(view):
                written += self.file.write(view[written:])
        except OSError as error:
            self.error = error
            raise
        return written


def save_torch(path: Path, payload: Any) -> None:
    """``torch.save`` atomically; a failure of the disk raises WriteError with its reason."""

    def write(temporary: Path) -> None:
        with open(temporary, "wb", buffering=0) as file:
            writer = _RecordingWriter(file)
            try:
                torch.save(payload, writer)
            except RuntimeError:
                if writer.error is None:
                    raise
                error, writer.error = writer.error, None  # no cycle through this frame keeps it alive
                try:
                    raise error from None
                finally:
                    del error

    write_atomically(path, write)


def save_checkpoint(path: Path, payload: dict[str, Any]) -> None:
    save_torch(path, {"format": CHECKPOINT_FORMAT, **payload})


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Load a checkpoint written by ``save_checkpoint``, or raise CheckpointError."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {path}")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises many types for truncated or foreign files
        raise CheckpointError(
            f"{path} is not a readable checkpoint ({type(error).__name__}); it may be truncated"
        ) from None
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{path} is not a checkpoint of this program (format {CHECKPOINT_FORMAT})")
    if "player" in payload:  # before --envs: the one training game's state
        player = payload.pop("player")
        payload["players"] = None if player is None else [player]
    parts = {"config": dict, "run": dict, "agent": dict}
    broken = sorted(name for name, kind in parts.items() if not isinstance(payload.get(name), kind))
    if not broken and not is_count(payload["run"].get("step")):
        broken = ["run step"]
    broken = broken or damaged_parts(payload)
    if broken:
        raise CheckpointError(f"{path} is not a whole checkpoint (its {', '.join(broken)} missing or damaged)")
    return payload


def damaged_parts(payload: dict[str, Any]) -> list[str]:
    """The parts of a loaded checkpoint that a run could not use, checked before any of it is (a resume
    renames nothing for a checkpoint it refuses): the configuration's values (flags' values, none nested), the
    run's counters, a stopped evaluation's games and generator state, the training games' states, the agent's
    generator and torch's RNG state, where the checkpoint has them (a playback needs only the network). The
    network's tensors are checked when loaded into the run's network."""
    config, run, players = payload["config"], payload["run"], payload.get("players")
    broken = [f"config's {name!r}" for name, value in config.items() if not isinstance(name, str) or not is_flag(value)]
    counters = {field.name: field.default for field in dataclasses.fields(Progress)}
    for name, value in run.items():
        default = counters.get(name, ...)
        if name == "evaluation_games":
            whole = value is None or finished_games_whole(value)
        elif name == "wandb_run_id":  # a W&B run's name in its URL: W&B's own ids are 8 of these
            whole = isinstance(value, str) and re.fullmatch(r"[A-Za-z0-9_-]{0,64}", value) is not None
        elif isinstance(default, bool):
            whole = isinstance(value, bool)
        elif isinstance(default, int):
            whole = is_count(value)
        else:  # a float; or a field no version of this program writes
            whole = isinstance(default, float) and is_real(value)
        if not whole:
            broken.append(f"run's {name!r}")
    if players is not None and not (isinstance(players, list) and all(map(player_whole, players))):
        broken.append("players")
    if "rng" in payload["agent"] and not generator_state_whole(payload["agent"]["rng"]):
        broken.append("agent's generator")
    rng = payload.get("torch_rng", torch.get_rng_state())
    if not (isinstance(rng, torch.Tensor) and rng.dtype == torch.uint8 and rng.shape == torch.get_rng_state().shape):
        broken.append("torch RNG state")
    line = payload.get("rewards_line")
    if line is not None and not (isinstance(line, str) and len(line.splitlines()) == 1):
        broken.append("rewards line")
    return broken


def player_whole(player: Any) -> bool:
    """Whether ``player`` is a training game's ``Player.state_dict()`` as a checkpoint holds it."""
    return (
        isinstance(player, dict)
        and isinstance(player.get("env"), dict)
        and isinstance(player.get("stack"), torch.Tensor)
        and player["stack"].dtype == torch.uint8
        and isinstance(player.get("first"), bool)
        and is_real(player.get("episode_return"))
        and is_count(player.get("episode_length", 0))
    )


def finished_games_whole(games: Any) -> bool:
    """Whether ``games`` is a ``FinishedGames`` as a checkpoint holds it (a dict of its fields; ``numbers``
    absent from older checkpoints): a serial evaluation's with the game's state, a seeded one's with the numbers
    of the games it finished."""
    if not (
        isinstance(games, dict) and set(FinishedGames._fields) - {"numbers"} <= set(games) <= set(FinishedGames._fields)
    ):
        return False
    numbers = games.get("numbers")
    if numbers is None:
        where = isinstance(games["env"], dict) and (games["act_rng"] is None or generator_state_whole(games["act_rng"]))
    else:
        where = (
            isinstance(numbers, list)
            and all(is_count(number) for number in numbers)
            and len(set(numbers)) == len(numbers) == len(games["scores"])
        )
    return (
        where
        and isinstance(games["scores"], list)
        and all(is_real(score) for score in games["scores"])
        and is_count(games["steps"])
        and is_real(games["seconds"])
    )


def generator_state_whole(state: Any) -> bool:
    """Whether ``state`` is a numpy generator's ``bit_generator.state`` that a generator takes."""
    try:
        np.random.default_rng().bit_generator.state = state
    except Exception:  # numpy raises TypeError, ValueError or KeyError for a state it cannot take
        return False
    return True


def is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def is_real(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_flag(value: Any) -> bool:
    """Whether ``value`` is what a flag holds: a number, a string, a switch or None (nothing nested)."""
    return value is None or isinstance(value, bool | int | float | str)
