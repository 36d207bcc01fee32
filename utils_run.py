"""The run folder's text logs, written atomically and read back by bench.py and plot.py.

- ``rewards.txt``: one line per evaluation (index, step, mean, std, min, max, episodes, wall seconds).
- ``episodes.csv``: one line per finished training game (step, score, length, epsilon), with a header.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from utils_drl import write_atomically
from utils_types import EvalResult, GameResult

REWARDS_FILE = "rewards.txt"
EPISODES_FILE = "episodes.csv"
EPISODES_HEADER = "step,score,length,epsilon\n"


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


def logged_evaluations(path: Path) -> int:
    """How many evaluation lines rewards.txt holds."""
    return len(path.read_text().splitlines()) if path.exists() else 0


def episode_line(step: int, game: GameResult, epsilon: float) -> str:
    """``step`` is the training step at which the game ended; ``length`` counts agent steps."""
    return f"{step},{game.score:g},{game.length},{epsilon:.4f}\n"


def start_episodes(path: Path, step: int) -> None:
    """Make ``path`` ready for a run at ``step``: create it with its header, or drop the games that
    ended after ``step`` (played after the checkpoint a run resumes from), so none appears twice."""
    if not path.exists():
        write_atomically(path, EPISODES_HEADER.encode())
        return
    lines = path.read_text().splitlines(keepends=True)[1:]
    kept = [line for line in lines if int(line.split(",", 1)[0]) <= step]
    if len(kept) < len(lines):
        write_atomically(path, (EPISODES_HEADER + "".join(kept)).encode())


def read_episodes(path: Path) -> np.ndarray:
    """episodes.csv as a float array of shape (games, 4): step, score, length, epsilon."""
    if not path.is_file():
        raise RunLogError(f"no training-game log {path}")
    lines = path.read_text().splitlines()
    if not lines or lines[0] + "\n" != EPISODES_HEADER:
        raise RunLogError(f"{path}:1: expected the header {EPISODES_HEADER.strip()!r}")
    rows = []
    for number, line in enumerate(lines[1:], start=2):
        try:
            row = [float(field) for field in line.split(",")]
        except ValueError:
            row = []
        if len(row) != 4:
            raise RunLogError(f"{path}:{number}: expected 4 numbers (step,score,length,epsilon), got {line!r}")
        rows.append(row)
    return np.array(rows, dtype=np.float64).reshape(-1, 4)
