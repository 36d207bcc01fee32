"""sweep.py: runs of games x seeds (parallel on Ray), resuming, retrying, and the report's
statistics against hand-computed values."""

from pathlib import Path

import numpy as np
import pytest

import sweep
from utils_config import options_of

TINY = [
    "--steps", "300", "--learning-starts", "100", "--memory-size", "1000", "--eval-every", "150",
    "--eval-episodes", "1", "--max-episode-frames", "400",
]  # fmt: skip


def write_rewards(folder: Path, scores: list[float], every: int = 100) -> None:
    folder.mkdir(parents=True)
    lines = [f"{index:3d} {index * every:8d} {score:.1f}" for index, score in enumerate(scores)]
    (folder / "rewards.txt").write_text("\n".join(lines) + "\n")


def test_iqm_is_the_mean_of_the_middle_half():
    assert sweep.iqm(np.arange(1, 9)) == 4.5  # 3, 4, 5, 6
    assert sweep.iqm([4, 1, 3, 2]) == 2.5  # 2, 3
    assert sweep.iqm([10, 0, 1, 2, 3]) == 2.0  # 1, 2, 3: int(5 / 4) = 1 cut from each end
    assert sweep.iqm([7]) == 7.0


def test_stratified_bootstrap_resamples_seeds_within_each_game():
    # One game, seeds 0 and 1: the mean of two draws is 0, 0.5 or 1 with probabilities 1/4, 1/2, 1/4.
    low, high = sweep.stratified_bootstrap(np.array([[0.0, 1.0]]), sweep.AGGREGATES["mean"], 4000)
    assert (low, high) == (0.0, 1.0)
    # Games whose seeds agree: resampling within games never changes the table, so no spread
    # (pooling the runs of both games would).
    table = np.array([[0.0, 0.0, 0.0], [10.0, 10.0, 10.0]])
    for statistic in sweep.AGGREGATES.values():
        assert sweep.stratified_bootstrap(table, statistic, 500) == (statistic(table), statistic(table))


def test_report_normalises_by_the_reference_scores_and_aggregates(tmp_path):
    references = sweep.reference_scores()
    assert len(references) == 57 and all(human > random for random, human in references.values())
    write_rewards(tmp_path / "Pong-seed0", [-21.0, -10.0])
    write_rewards(tmp_path / "Pong-seed1", [-21.0, 0.0])
    write_rewards(tmp_path / "Breakout-seed0", [1.0, 30.0])
    write_rewards(tmp_path / "Breakout-seed1", [1.0, 40.0])
    summary = sweep.summarize(tmp_path, samples=200)
    pong_random, pong_human = references["Pong"]
    breakout_random, breakout_human = references["Breakout"]
    expected = {
        "Pong": {
            0: (-10 - pong_random) / (pong_human - pong_random),
            1: (0 - pong_random) / (pong_human - pong_random),
        },
        "Breakout": {
            0: (30 - breakout_random) / (breakout_human - breakout_random),
            1: (40 - breakout_random) / (breakout_human - breakout_random),
        },
    }
    for game, seeds in expected.items():
        assert summary["games"][game]["human_normalised"] == pytest.approx(seeds)
    assert summary["games"]["Breakout"]["mean"] == 35.0
    assert summary["games"]["Breakout"]["std"] == pytest.approx(np.std([30, 40], ddof=1))
    all_four = [value for seeds in expected.values() for value in seeds.values()]
    aggregate = summary["aggregate"]
    assert aggregate["mean"]["value"] == pytest.approx(np.mean(all_four))
    assert aggregate["median"]["value"] == pytest.approx(np.median(all_four))
    assert aggregate["iqm"]["value"] == pytest.approx(np.mean(sorted(all_four)[1:3]))
    low, high = aggregate["iqm"]["interval"]
    assert low <= aggregate["iqm"]["value"] <= high

    text = sweep.report(tmp_path)
    assert "| IQM |" in text and "| **Breakout** | mean ± std | **35.0 ± 7.1** | | |" in text
    assert (tmp_path / "aggregate.png").stat().st_size > 0 and (tmp_path / "report.json").exists()


def test_sweep_runs_resumes_retries_and_reports(tmp_path, ray_cluster, capsys):
    out = tmp_path / "S"
    argv = ["--envs", "Pong", "Breakout", "--seeds", "0", "1", *TINY, "--out", str(out)]
    assert sweep.main(argv) == 0
    for game in ("Pong", "Breakout"):
        for seed in (0, 1):
            rows = (out / f"{game}-seed{seed}" / "rewards.txt").read_text().splitlines()
            assert [int(row.split()[1]) for row in rows] == [0, 150, 300]
    printed = capsys.readouterr().out
    assert "| IQM |" in printed and (out / "aggregate.png").exists()

    # Rerunning skips finished runs, and continues an interrupted one from its checkpoint.
    (out / "Pong-seed1" / "model_002.pt").unlink()
    (out / "Pong-seed1" / "rewards.txt").write_text(
        "\n".join((out / "Pong-seed1" / "rewards.txt").read_text().splitlines()[:2]) + "\n"
    )
    finished_log = (out / "Pong-seed0" / "main.log").read_text()
    assert sweep.main(argv) == 0
    assert "3 finished already" in capsys.readouterr().out
    assert (out / "Pong-seed0" / "main.log").read_text() == finished_log
    assert (out / "Pong-seed1" / "main.log").read_text().count("Run folder:") == 2  # started, then resumed
    assert (out / "Pong-seed1" / "model_002.pt").exists()

    # A run that fails is retried once, then reported; the others are not held up.
    argv = ["--envs", "Pong", "--seeds", "0", "1", *TINY, "--out", str(tmp_path / "F")]
    (tmp_path / "F" / "Pong-seed1").mkdir(parents=True)
    (tmp_path / "F" / "Pong-seed1" / "rewards.txt").write_text("not a run\n")  # main.py refuses to overwrite it
    assert sweep.main(argv) == 1
    captured = capsys.readouterr()
    assert "Pong-seed1: failed (exit 2" in captured.out and "retrying" in captured.out
    assert "Pong-seed1: failed again" in captured.out
    assert "1 run(s) failed: Pong-seed1" in captured.err
    assert "Left out Pong-seed1: " in captured.out  # the report goes on without it
    assert (tmp_path / "F" / "Pong-seed0" / "model_002.pt").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--envs", "Pnog", "--out", "x"], "did you mean Pong"),
        (["--envs", "Pong", "--out", "x", "--seed", "3"], "--seed is set by the sweep"),
        (["--envs", "Pong", "--out", "x", "--bogus", "1"], "not a flag of sweep.py or main.py: --bogus 1"),
        (["--envs", "Pong"], "--envs and --out are needed"),
        (["--report", "/nonexistent/sweep"], "/nonexistent/sweep"),
    ],
)
def test_bad_input_is_one_line(argv, message, capsys):
    try:
        code = sweep.main(argv)
    except SystemExit as stopped:
        code = stopped.code
    assert code == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert error[-1].startswith("sweep.py: error: ") and message in error[-1]


def test_game_sets_expand_to_the_atari_5_10_and_100k_games():
    assert sweep.expand_envs(["atari5"]) == ["BattleZone", "DoubleDunk", "NameThisGame", "Phoenix", "Qbert"]
    assert len(sweep.expand_envs(["atari10", "pong"])) == 11
    atari100k = sweep.expand_envs(["atari100k"])
    assert len(atari100k) == 26 and {"Alien", "Boxing", "Breakout", "Freeway", "KungFuMaster", "Pong"} <= set(atari100k)


def test_the_sweep_reads_the_steps_of_a_preset():
    """A run is finished at the preset's --steps (100k), not main.py's default 10M."""
    assert options_of(["--preset", "atari100k", "--threads", "1"]).steps == 100_000
    assert options_of(["--preset", "atari100k", "--steps", "3000"]).steps == 3000
    assert options_of(["--steps", "3000"]).steps == 3000
