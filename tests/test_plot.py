"""plot.py: learning curves from 8- and 3-column rewards.txt files, several runs, and one-line errors."""

import errno
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from matplotlib.figure import Figure
from PIL import Image

from dqn_atari import plot

ROOT = Path(__file__).resolve().parent.parent


def write_rewards(run: Path, columns: int, evaluations: int = 5) -> Path:
    """A rewards.txt in main.py's format, cut to its first ``columns`` columns."""
    run.mkdir(parents=True)
    lines = []
    for i in range(evaluations):
        mean = -21.0 + 4 * i
        line = f"{i:3d} {i * 250_000:8d} {mean:.1f} {1.5:.1f} {mean - 2:.1f} {mean + 3:.1f} {10} {i * 600:.0f}"
        lines.append(" ".join(line.split()[:columns]) if columns < 8 else line)
    (run / "rewards.txt").write_text("\n".join(lines) + "\n")
    return run


def check_png(path: Path) -> None:
    assert path.stat().st_size > 1000
    with Image.open(path) as image:
        assert image.format == "PNG" and 400 <= image.width <= 2000 and 300 <= image.height <= 2000


def run_error(capsys, *argv: str) -> str:
    assert plot.main(list(argv)) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert captured.out == "" and len(lines) == 1 and lines[0].startswith("plot.py: error: "), captured.err
    return lines[0]


def test_one_run_writes_curve_png_beside_rewards(tmp_path, capsys):
    full = write_rewards(tmp_path / "Pong-seed0", columns=8)
    assert plot.main([str(full)]) == 0
    assert capsys.readouterr().out == f"{full / 'curve.png'}\n"
    check_png(full / "curve.png")

    old = write_rewards(tmp_path / "old", columns=3)
    assert plot.main([str(old / "rewards.txt"), "-o", str(tmp_path / "out" / "old.png"), "--title", "Old"]) == 0
    check_png(tmp_path / "out" / "old.png")
    assert not list(tmp_path.rglob("*.tmp"))


def test_read_curve_columns(tmp_path):
    curve = plot.read_curve(write_rewards(tmp_path / "a", columns=8) / "rewards.txt")
    assert curve.label == "a"
    assert curve.steps.tolist() == [0, 250_000, 500_000, 750_000, 1_000_000]
    assert curve.scores.tolist() == [-21.0, -17.0, -13.0, -9.0, -5.0]
    np.testing.assert_array_equal(curve.low, curve.scores - 2)
    np.testing.assert_array_equal(curve.high, curve.scores + 3)
    assert plot.read_curve(write_rewards(tmp_path / "b", columns=3) / "rewards.txt").low is None
    mixed = write_rewards(tmp_path / "c", columns=3, evaluations=2) / "rewards.txt"  # an old run, resumed
    mixed.write_text(mixed.read_text() + "  2   500000 -13.0 1.5 -15.0 -10.0 10 1200\n")
    curve = plot.read_curve(mixed)
    assert curve.scores.tolist() == [-21.0, -17.0, -13.0] and curve.low is None


def test_two_runs_on_one_figure(tmp_path, capsys, monkeypatch):
    runs = [write_rewards(tmp_path / "Pong-seed0", columns=8), write_rewards(tmp_path / "Pong-seed0-per", columns=3)]
    figure = plot.draw([plot.read_curve(run / "rewards.txt") for run in runs])
    axes = figure.axes[0]
    assert [line.get_label() for line in axes.lines] == ["Pong-seed0", "Pong-seed0-per"]
    assert len(axes.collections) == 1  # the band of the 8-column run only

    monkeypatch.chdir(tmp_path)
    assert plot.main([str(run) for run in runs]) == 0
    assert capsys.readouterr().out == "curves.png\n"
    check_png(tmp_path / "curves.png")


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    run = write_rewards(tmp_path / "run", columns=8)
    path = run / "rewards.txt"
    path.write_text("  0        0 -21.0\n  1   250000 abc\n")
    assert f"{path}:2: not a number" in run_error(capsys, str(run))
    path.write_text("")
    assert "holds no evaluations" in run_error(capsys, str(run))
    assert f"no rewards file {tmp_path / 'missing' / 'rewards.txt'}" in run_error(
        capsys, str(tmp_path / "missing" / "rewards.txt")
    )
    assert "unknown image format" in run_error(capsys, str(write_rewards(tmp_path / "ok", 3)), "-o", "x.bmpx")
    assert not list(tmp_path.rglob("*.png"))


def test_command_line(tmp_path):
    run = write_rewards(tmp_path / "run", columns=8)
    done = subprocess.run([sys.executable, str(ROOT / "plot.py"), str(run)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{run / 'curve.png'}\n"
    check_png(run / "curve.png")


@pytest.mark.parametrize("columns", [0, 1, 2, 4, 5, 6, 7, 9, 12])
def test_a_line_with_other_than_3_or_8_columns_is_an_error(tmp_path, capsys, columns):
    run = write_rewards(tmp_path / "run", columns=8, evaluations=3)
    path = run / "rewards.txt"
    fields = ["5", "1250000", "-1.0", "1.5", "-3.0", "2.0", "10", "3000", "7", "7", "7", "7"][:columns]
    path.write_text(path.read_text() + " ".join(fields) + "\n")
    message = run_error(capsys, str(run))
    assert message == (
        f"plot.py: error: {path}:4: expected 3 (index, step, score) or 8 (index, step, score, std, min, max, "
        f"episodes, seconds) columns, got {columns}: {' '.join(fields)!r}"
    )
    assert not (run / "curve.png").exists()


def listing(folder: Path) -> list[str]:
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*"))


def no_space(figure, path, **options) -> None:
    """savefig running out of disk space half-way through the file."""
    Path(path).write_bytes(b"\x89PNG")
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def no_permission(figure, path, **options) -> None:
    raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))


@pytest.mark.parametrize(
    ("output", "savefig", "reason"),
    [
        ("file/curve.png", None, "Not a directory"),
        ("file/sub/curve.png", None, "Not a directory"),  # the missing folder cannot be made
        ("folder.png", None, "Is a directory"),
        ("folder", None, "Is a directory"),  # not "unknown image format": it is a folder
        ("run/curve.png", no_space, "No space left on device"),
        ("run/curve.png", no_permission, "Permission denied"),
    ],
)
def test_unwritable_output_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch, output, savefig, reason):
    run = write_rewards(tmp_path / "run", columns=8)
    (run / "curve.png").write_bytes(b"an earlier curve")
    (tmp_path / "file").write_text("a regular file")
    (tmp_path / "folder.png").mkdir()
    (tmp_path / "folder").mkdir()
    if savefig:
        monkeypatch.setattr(Figure, "savefig", savefig)
    before = listing(tmp_path)
    message = run_error(capsys, str(run), "-o", str(tmp_path / output))
    assert message == f"plot.py: error: cannot write {tmp_path / output}: {reason}"
    assert listing(tmp_path) == before  # nothing new, not even a temporary file
    assert (run / "curve.png").read_bytes() == b"an earlier curve"


def test_no_band_is_announced_where_every_minimum_equals_its_maximum(tmp_path):
    """One game per evaluation: the minimum and maximum are the mean, so there is no band."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "rewards.txt").write_text("  0        0 -21.0 0.0 -21.0 -21.0 1 5\n  1   250000 -15.0 0.0 -15.0 -15.0 1 9\n")
    axes = plot.draw([plot.read_curve(run / "rewards.txt")]).axes[0]
    assert axes.get_ylabel() == "evaluation score\n(mean)" and not axes.collections
    axes = plot.draw([plot.read_curve(write_rewards(tmp_path / "banded", 8) / "rewards.txt")]).axes[0]
    assert axes.get_ylabel() == "evaluation score\n(mean, band: min to max)" and len(axes.collections) == 1


def test_each_training_game_shows_as_a_dot(tmp_path):
    """plot.py --train: a game alone, away from the line, is a dot drawn at least half as strong as its run's colour
    and a few pixels across (they were 30% strong and about 2 pixels: nearly invisible)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import to_rgb

    games = np.array([[step, 100.0 * (i % 2)] for i, step in enumerate(range(1000, 21000, 1000))])
    curve = plot.Curve("run", games[:, 0], np.full(len(games), 50.0), None, None, raw=games[:, 1])
    figure = plot.draw([curve], window=100)
    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    pixels = np.asarray(canvas.buffer_rgba())[..., :3] / 255.0
    axes = figure.axes[0]
    colour = np.array(to_rgb(axes.get_lines()[0].get_color()))
    strength = ((1 - pixels) / (1 - colour)).min(axis=2)  # 0 on white, 1 in the colour itself, channel by channel
    for x, y in axes.transData.transform(games[:, :2]):
        row, column = round(figure.bbox.height - y), round(x)
        around = strength[row - 4 : row + 5, column - 4 : column + 5]
        assert (around >= 0.5).sum() >= 9  # at least 3 pixels by 3
