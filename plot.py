"""Plot learning curves: ``python plot.py runs/Pong-seed0 [runs/Pong-seed1 ...]``.

By default the evaluation scores of rewards.txt. Each of its lines is one evaluation: index, training
agent steps, mean score, then (in files written since those columns were added) standard deviation,
minimum, maximum, episodes and wall seconds. With ``--train``, the scores of the training games in
episodes.csv instead, as a moving average over the last ``--window`` games over the raw scores.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure  # a bare Figure renders with Agg and needs no display or pyplot state
from matplotlib.ticker import EngFormatter

from dqn_atari.utils_run import EPISODES_FILE, REWARDS_FILE, RunLogError, read_episodes, read_rewards, write_atomically

RAW_DOT_SIZE = 3.0  # points across: 5 pixels at draw's 120 dpi
RAW_DOT_ALPHA = 0.6


class PlotError(Exception):
    """Bad input, reported as one line on stderr with exit status 2."""


@dataclass
class Curve:
    label: str
    steps: np.ndarray
    scores: np.ndarray
    low: np.ndarray | None  # each evaluation's minimum and maximum score, when every line has them
    high: np.ndarray | None
    raw: np.ndarray | None = None  # with --train: each game's score, under the moving average in ``scores``


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=(
            "Plot the evaluation score (rewards.txt column 3) against training steps (column 2), one line per run, "
            "with a shaded band from each evaluation's minimum to maximum score (columns 5 and 6) when present."
        ),
        epilog="example: python plot.py runs/Pong-seed0 runs/Pong-seed0-per -o pong.png --title Pong",
    )
    parser.add_argument(
        "runs",
        nargs="+",
        type=Path,
        metavar="RUN",
        help="a run folder, or its rewards.txt; each run is labelled by its folder's name",
    )
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        metavar="FILE",
        help="image to write; its suffix picks the format (.png, .svg, .pdf, ...) "
        "(default: RUN/curve.png for one run, curves.png in the current folder for several)",
    )
    parser.add_argument("--title", help="title above the plot (default: none)")
    parser.add_argument("--no-band", action="store_true", help="leave out the minimum..maximum bands")
    parser.add_argument(
        "--train",
        action="store_true",
        help="plot the training games of episodes.csv instead of the evaluations "
        "(default output: RUN/train_curve.png, or train_curves.png)",
    )
    parser.add_argument(
        "--window", type=int, default=100, help="with --train: games in the moving average (default: 100)"
    )
    return parser


def log_path(run: Path, name: str) -> Path:
    """``run``'s log file ``name``, or ``run`` itself when it names a file."""
    path = run / name if run.is_dir() else run
    if not path.is_file():
        raise PlotError(f"no {'rewards' if name == REWARDS_FILE else 'training-game'} file {path}")
    return path


def read_train_curve(path: Path, window: int) -> Curve:
    """episodes.csv: each game's score at the step it ended, and the mean of the last ``window`` games."""
    try:
        games = read_episodes(path)
    except RunLogError as error:
        raise PlotError(str(error)) from None
    if not len(games):
        raise PlotError(f"{path} holds no finished training games")
    scores = games[:, 1]
    totals = np.concatenate([[0.0], np.cumsum(scores)])
    ends = np.arange(1, len(scores) + 1)
    starts = np.maximum(ends - window, 0)
    moving_average = (totals[ends] - totals[starts]) / (ends - starts)
    return Curve(path.resolve().parent.name, games[:, 0], moving_average, None, None, raw=scores)


def read_curve(path: Path) -> Curve:
    """Parse one rewards.txt; any line that does not parse is an error, never skipped."""
    try:
        rows = [values for _, values in read_rewards(path)]
    except RunLogError as error:
        raise PlotError(str(error)) from None
    if not rows:
        raise PlotError(f"{path} holds no evaluations")
    has_band = all(len(row) == 7 for row in rows)  # all 8 columns on every line (a row leaves out the index)
    band = np.array([row[3:5] for row in rows]) if has_band else None
    return Curve(
        label=path.resolve().parent.name,
        steps=np.array([row[0] for row in rows]),
        scores=np.array([row[1] for row in rows]),
        low=band[:, 0] if band is not None else None,
        high=band[:, 1] if band is not None else None,
    )


def draw(curves: list[Curve], title: str | None = None, band: bool = True, window: int = 100) -> Figure:
    figure = Figure(figsize=(8, 4.5), dpi=120, layout="constrained")
    draw_on(figure.add_subplot(), curves, title, band, window)
    return figure


def draw_on(axes: Any, curves: list[Curve], title: str | None = None, band: bool = True, window: int = 100) -> None:
    """Draw ``curves`` on matplotlib ``axes`` (one panel of a larger figure, as sweep.py's)."""
    banded = False
    for curve in curves:
        if curve.raw is not None:
            (line,) = axes.plot(curve.steps, curve.scores, linewidth=2, label=curve.label, zorder=3)
            # Each game as a dot under the line: light enough for thousands to show their density, dark enough
            # for one alone to be seen.
            axes.plot(curve.steps, curve.raw, "o", markersize=RAW_DOT_SIZE, markeredgewidth=0, color=line.get_color(),
                      alpha=RAW_DOT_ALPHA)  # fmt: skip
            continue
        (line,) = axes.plot(curve.steps, curve.scores, marker="o", markersize=3, label=curve.label)
        # One game per evaluation (or games all alike) gives min = max: no band to draw or to announce.
        if band and curve.low is not None and np.any(curve.high > curve.low):
            axes.fill_between(curve.steps, curve.low, curve.high, color=line.get_color(), alpha=0.2, linewidth=0)
            banded = True
    axes.set_xlabel("training steps (agent steps, 4 frames each)")
    # The key in brackets on a line of its own: in one line it outgrew the short panels of a sweep's figure.
    if any(curve.raw is not None for curve in curves):
        axes.set_ylabel(f"training game score\n(line: mean of last {window})")
    else:
        axes.set_ylabel("evaluation score\n" + ("(mean, band: min to max)" if banded else "(mean)"))
    axes.xaxis.set_major_formatter(EngFormatter())  # 2.5 M rather than an offset like 1e7
    axes.grid(alpha=0.3)
    axes.legend()
    if title:
        axes.set_title(title)


def save(figure: Figure, output: Path) -> None:
    """Write to a temporary file beside ``output``, then rename it, so the image is never half-written."""
    if output.is_dir():  # before the suffix check, which would blame a folder's missing suffix
        raise PlotError(f"cannot write {output}: {os.strerror(errno.EISDIR)}")
    image_format = output.suffix[1:].lower()
    if image_format not in figure.canvas.get_supported_filetypes():
        raise PlotError(f"-o {output}: unknown image format {output.suffix or '(no suffix)'}; use .png, .svg or .pdf")
    try:
        with contextlib.suppress(FileExistsError):  # a file in the folder's place: the write says "Not a directory"
            output.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(output, lambda temporary: figure.savefig(temporary, format=image_format))
    except OSError as error:
        raise PlotError(f"cannot write {output}: {error.strerror or error}") from None


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.window <= 0:
        parser.error(f"--window must be positive, got {args.window}")
    try:
        paths = [log_path(run, EPISODES_FILE if args.train else REWARDS_FILE) for run in args.runs]
        curves = [read_train_curve(path, args.window) if args.train else read_curve(path) for path in paths]
        labels = [curve.label for curve in curves]
        if len(set(labels)) < len(labels):  # runs/a/Pong-seed0 and runs/b/Pong-seed0: tell them apart
            for curve, path in zip(curves, paths, strict=True):
                curve.label = str(path.parent)
        prefix = "train_" if args.train else ""
        default = paths[0].parent / f"{prefix}curve.png" if len(paths) == 1 else Path(f"{prefix}curves.png")
        output = args.output or default
        save(draw(curves, args.title, band=not args.no_band, window=args.window), output)
    except PlotError as error:
        print(f"plot.py: error: {error}", file=sys.stderr)
        return 2
    print(output, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
