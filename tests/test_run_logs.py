"""The run folder's logs: episodes.csv lines, their reading and their repair on resume; the
training player's game results; plot.py --train; bench.py --learning's report."""

from pathlib import Path

import numpy as np
import pytest

from dqn_atari import plot, utils_results
from dqn_atari.utils_env import Player
from dqn_atari.utils_memory import ReplayMemory
from dqn_atari.utils_run import (
    EPISODES_HEADER,
    OLD_EPISODES_HEADER,
    RunLogError,
    episode_line,
    read_episodes,
    save_checkpoint,
    start_log,
)
from dqn_atari.utils_types import GameResult, StepResult


class Scripted:
    """A game whose steps are given in advance: (reward, life_lost, terminated, truncated)."""

    n_actions = 2

    def __init__(self, steps: list[tuple[float, bool, bool, bool]]) -> None:
        self.steps = iter(steps)

    def reset(self) -> np.ndarray:
        return np.zeros((84, 84), dtype=np.uint8)

    def step(self, action: int) -> StepResult:
        reward, life_lost, terminated, truncated = next(self.steps)
        return StepResult(np.full((84, 84), 7, dtype=np.uint8), reward, life_lost, terminated, truncated)


def test_player_reports_raw_score_and_length_of_whole_games():
    memory = ReplayMemory(100, seed=0)
    script = [(4.0, False, False, False), (7.0, True, False, False), (0.0, False, True, False)]
    script += [(1.0, False, False, False), (5.0, False, False, True)]  # cut by the frame limit
    player = Player(Scripted(script), memory)
    results = [player.step(1) for _ in script]
    assert results == [None, None, GameResult(11.0, 3), None, GameResult(6.0, 2)]
    assert memory.rewards[:5].tolist() == [1.0, 1.0, 0.0, 1.0, 1.0]  # learning sees clipped rewards


def write_episodes(path: Path, steps: list[int]) -> None:
    """Games ending at ``steps``, scoring steps / 10, lasting steps // 2, at wall time steps / 100 s."""
    lines = (episode_line(s, GameResult(s / 10, s // 2), 0.5, s / 100) for s in steps)
    path.write_text(EPISODES_HEADER + "".join(lines))


def test_episode_lines_and_reading_them(tmp_path):
    assert episode_line(1234, GameResult(17.0, 456), 0.123456, 98.76) == "1234,17,456,0.1235,98.8\n"
    path = tmp_path / "episodes.csv"
    write_episodes(path, [10, 30])
    np.testing.assert_array_equal(read_episodes(path), [[10, 1.0, 5, 0.5, 0.1], [30, 3.0, 15, 0.5, 0.3]])
    path.write_text(EPISODES_HEADER)
    assert read_episodes(path).shape == (0, 5)
    path.write_text(EPISODES_HEADER + "10,1,5,0.5\n")
    with pytest.raises(RunLogError, match=f"{path}:2: expected 5 finite numbers"):
        read_episodes(path)
    path.write_text(EPISODES_HEADER + "inf,1,5,0.5,3.0\n")  # would crash a sweep's progress bar
    with pytest.raises(RunLogError, match=f"{path}:2: expected 5 finite numbers"):
        read_episodes(path)
    path.write_text(OLD_EPISODES_HEADER + "10,1,5,0.5\n")  # a run from before the seconds column
    np.testing.assert_array_equal(read_episodes(path), [[10, 1.0, 5, 0.5, np.nan]])
    path.write_text("10,1,5,0.5\n")
    with pytest.raises(RunLogError, match=f"{path}:1: expected the header"):
        read_episodes(path)


def test_start_episodes_creates_the_header_and_drops_games_after_the_checkpoint(tmp_path):
    path = tmp_path / "episodes.csv"
    start_log(path, 0)
    assert path.read_text() == EPISODES_HEADER
    write_episodes(path, [10, 30, 50, 70])
    start_log(path, 50)  # games ending at or before the checkpoint's step stay
    assert read_episodes(path)[:, 0].tolist() == [10, 30, 50]
    before = path.stat().st_mtime_ns
    start_log(path, 50)
    assert path.stat().st_mtime_ns == before  # nothing to drop: not rewritten
    assert not list(tmp_path.glob(".*tmp*"))
    path.write_text(OLD_EPISODES_HEADER + "10,1,5,0.5\n30,3,15,0.5\n")  # resuming a run of an older version
    start_log(path, 10)
    assert path.read_text() == EPISODES_HEADER + "10,1,5,0.5,nan\n"


def test_plot_train_draws_a_moving_average_over_the_games(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    write_episodes(run / "episodes.csv", [10, 20, 30, 40])  # scores 1, 2, 3, 4
    curve = plot.read_train_curve(run / "episodes.csv", window=2)
    np.testing.assert_allclose(curve.scores, [1.0, 1.5, 2.5, 3.5])
    np.testing.assert_allclose(curve.raw, [1.0, 2.0, 3.0, 4.0])
    assert plot.main(["--train", str(run), "--window", "2"]) == 0
    assert capsys.readouterr().out == f"{run / 'train_curve.png'}\n"
    assert (run / "train_curve.png").stat().st_size > 1000

    (run / "episodes.csv").write_text(EPISODES_HEADER)
    assert plot.main(["--train", str(run)]) == 2
    assert "holds no finished training games" in capsys.readouterr().err
    assert plot.main(["--train", str(tmp_path / "missing")]) == 2
    assert "no training-game file" in capsys.readouterr().err


def fake_benchmark_run(run: Path, game_steps: list[int], evaluations: list[tuple[int, float]]) -> Path:
    """A run folder with the files the learning report reads, as main.py writes them."""
    run.mkdir()
    write_episodes(run / "episodes.csv", game_steps)
    lines = [
        f"{i:3d} {step:8d} {score:.1f} 0.0 {score:.1f} {score:.1f} 10 0" for i, (step, score) in enumerate(evaluations)
    ]
    (run / "rewards.txt").write_text("\n".join(lines) + "\n")
    config = {"env": "ALE/Breakout-v5", "seed": 1, "lr": 1e-4, "adam_eps": 1e-8, "prioritized": False}
    last = len(evaluations) - 1
    save_checkpoint(run / f"model_{last:03d}.pt", {"config": config, "run": {"step": evaluations[-1][0]}, "agent": {}})
    return run


def test_learning_report_groups_games_by_step_range(tmp_path):
    steps = [5_000, 20_000, 60_000, 99_000, 100_001, 120_000]  # scores: steps / 10
    run = fake_benchmark_run(tmp_path / "uniform", steps, [(0, 1.0), (50_000, 2.0), (100_000, 8.0), (120_000, 9.5)])
    report = utils_results.learning_report(run)
    assert report["steps"] == 120_000 and report["seed"] == 1 and report["settings"]["adam_eps"] == 1e-8
    ranges = {tuple(r["steps"]): (r["games"], r["mean_score"], r["cleanrl"]) for r in report["ranges"]}
    cleanrl = utils_results.cleanrl_scores(1)  # CleanRL's committed seed-1 run, beside our seed 1
    assert ranges == {
        (0, 20_000): (2, 1250.0, cleanrl[(0, 20_000)]),
        (20_000, 50_000): (0, None, cleanrl[(20_000, 50_000)]),
        (50_000, 100_000): (2, 7950.0, cleanrl[(50_000, 100_000)]),
        (100_000, 120_000): (2, 11000.05, None),  # a partial range has no reference
    }
    assert [e["step"] for e in report["evaluations"]] == [0, 50_000, 100_000, 120_000]
    other = fake_benchmark_run(tmp_path / "short", [10_000], [(0, 1.0), (30_000, 2.0)])
    table = utils_results.learning_table([report, utils_results.learning_report(other)])
    rows = {line.split()[0]: line.split()[1:] for line in table.splitlines() if line[:1].isdigit()}
    shown = {(low, high): f"{score:.2f}" for (low, high), score in cleanrl.items()}
    assert rows == {
        "0k-20k": ["1250.00", "(2)", "1000.00", "(1)", shown[(0, 20_000)]],
        "20k-50k": ["—", "(0)", "—*", "(0)", shown[(20_000, 50_000)]],
        "50k-100k": ["7950.00", "(2)", shown[(50_000, 100_000)]],
        "100k-150k": ["11000.05*", "(2)", shown[(100_000, 150_000)]],
    }
    assert "uniform: 0k: 1.0, 50k: 2.0, 100k: 8.0, 120k: 9.5" in table
    # Time to score 23.3 (the default): the mean of 100 games; these runs have too few games.
    assert report["time_to_score"]["step"] is None and report["wall_seconds"] == 1200.0
    assert "uniform: not reached in 120,000 steps" in table
    # Games ending every 1,000 steps score step / 10: the first 100 average 5,050, at step 100,000 (1,000 s).
    long = fake_benchmark_run(tmp_path / "long", list(range(1_000, 121_000, 1_000)), [(0, 1.0), (120_000, 5.0)])
    report = utils_results.learning_report(long, threshold=5050.0)
    assert report["time_to_score"] == {"threshold": 5050.0, "window": 100, "step": 100_000, "seconds": 1000.0}
    assert "long: step 100,000 (16.7 min)" in utils_results.learning_table([report])


def test_time_to_score_is_the_first_game_where_the_moving_mean_reaches_the_threshold(tmp_path):
    path = tmp_path / "episodes.csv"
    write_episodes(path, [10, 20, 30, 40, 50])  # scores 1..5, wall times 0.1..0.5 s
    games = read_episodes(path)
    # Means of the last 3 games: 2 (after game 3), 3 (game 4), 4 (game 5).
    assert utils_results.time_to_score(games, 3.0, window=3) == {
        "threshold": 3.0,
        "window": 3,
        "step": 40,
        "seconds": 0.4,
    }
    assert utils_results.time_to_score(games, 2.0, window=3)["step"] == 30  # reached by the first full window
    assert utils_results.time_to_score(games, 4.5, window=3)["step"] is None  # never reached
    assert utils_results.time_to_score(games, 0.0, window=6)["step"] is None  # fewer games than the window
    path.write_text(OLD_EPISODES_HEADER + "10,1,5,0.5\n20,9,5,0.5\n")
    assert utils_results.time_to_score(read_episodes(path), 5.0, window=2) == {
        "threshold": 5.0, "window": 2, "step": 20, "seconds": None,  # older runs kept no wall time
    }  # fmt: skip


def test_cleanrls_column_is_the_mean_score_of_its_committed_games_per_range(tmp_path):
    """CleanRL's side of the Breakout table comes from a committed run's episodes.csv: per range of
    steps its games' mean raw score, only for ranges its --total-timesteps covers whole; a seed
    without a committed run has none."""
    folder = tmp_path / "cleanrl-seed4"
    folder.mkdir()
    (folder / "run.json").write_text('{"command": "python cleanrl/dqn_atari.py --seed 4 --total-timesteps 60000"}')
    (folder / "episodes.csv").write_text("step,return,frames\n100,1,800\n20000,3,900\n20001,2,700\n49000,4,600\n")
    scores = utils_results.cleanrl_scores(4, tmp_path)
    assert scores == {(0, 20_000): 2.0, (20_000, 50_000): 3.0}  # 50-100k is not covered whole
    assert utils_results.cleanrl_scores(5, tmp_path) == {}
