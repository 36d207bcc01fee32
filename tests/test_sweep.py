"""sweep.py: runs of games x seeds (parallel on Ray), resuming, retrying, and the report's
statistics against hand-computed values."""

import functools
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from test_failures import wait_until_training

from dqn_atari import sweep, utils_results
from dqn_atari.utils_config import options_of
from dqn_atari.utils_run import RunLock

ROOT = Path(__file__).resolve().parent.parent
TINY = [
    "--steps", "300", "--learning-starts", "100", "--memory-size", "1000", "--eval-every", "150",
    "--eval-episodes", "1", "--max-episode-frames", "400",
]  # fmt: skip


@pytest.fixture(autouse=True)
def few_bootstrap_draws(monkeypatch):
    """Reports made here (sweep.py's, whose calls cannot pass samples=) draw 200 bootstrap samples:
    the committed reports' BOOTSTRAP_SAMPLES (20,000) take minutes each."""
    monkeypatch.setattr(utils_results, "BOOTSTRAP_SAMPLES", 200)


def write_rewards(folder: Path, scores: list[float], every: int = 100, preset: str | None = None) -> None:
    """A finished run: its evaluations every ``every`` steps, and its configuration."""
    folder.mkdir(parents=True)
    lines = [f"{index:3d} {index * every:8d} {score:.1f}" for index, score in enumerate(scores)]
    (folder / "rewards.txt").write_text("\n".join(lines) + "\n")
    config = {"env": folder.name.rpartition("-seed")[0], "steps": (len(scores) - 1) * every, "preset": preset,
              "eval_epsilon": 0.05}  # fmt: skip
    (folder / "config.json").write_text(json.dumps(config))


def test_report_normalises_by_the_reference_scores_and_aggregates(tmp_path):
    references = utils_results.reference_scores()
    assert len(references) == 57 and all(human > random for random, human in references.values())
    write_rewards(tmp_path / "Pong-seed0", [-21.0, -10.0])
    write_rewards(tmp_path / "Pong-seed1", [-21.0, 0.0])
    write_rewards(tmp_path / "Breakout-seed0", [1.0, 30.0])
    write_rewards(tmp_path / "Breakout-seed1", [1.0, 40.0])
    summary = utils_results.summarize(tmp_path, samples=200)
    assert "published_runs" not in summary  # not Atari 100k runs
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
    aggregate = summary["aggregates"]["ours"]
    # rliable's definitions over the (runs, games) matrix: the mean of all, the median of the games' means,
    # the mean of the middle half, and the mean shortfall below a normalised score of 1.
    matrix = np.array([list(expected["Breakout"].values()), list(expected["Pong"].values())]).T
    assert aggregate["mean"]["value"] == pytest.approx(matrix.mean())
    assert aggregate["median"]["value"] == pytest.approx(np.median(matrix.mean(axis=0)))
    assert aggregate["iqm"]["value"] == pytest.approx(np.mean(np.sort(matrix.ravel())[1:3]))
    assert aggregate["optimality_gap"]["value"] == pytest.approx(np.mean(1 - np.minimum(matrix, 1)))
    for entry in aggregate.values():
        low, high = entry["interval"]
        assert low <= entry["value"] <= high
    assert utils_results.summarize(tmp_path, samples=200) == summary  # seeded: the same intervals again
    # Games whose runs agree: resampling runs within each game never changes the matrix, so no spread.
    agreeing = utils_results.aggregates({"x": np.array([[0.2, 3.0], [0.2, 3.0], [0.2, 3.0]])}, 300)["x"]
    assert all(entry["interval"] == pytest.approx((entry["value"],) * 2) for entry in agreeing.values())

    text = utils_results.report(tmp_path)  # BOOTSTRAP_SAMPLES, 200 here
    assert "| ours |" in text and "| **Breakout** | mean ± std | **35.0 ± 7.1** | | | |" in text
    assert "| Breakout | 0 | 30.0 | — | 100 | — |" in text  # no spread nor wall time in a 3-column rewards.txt
    assert (tmp_path / "aggregate.png").stat().st_size > 0 and (tmp_path / "report.json").exists()


def test_an_atari100k_sweep_is_compared_with_the_published_runs(tmp_path):
    """Runs of --preset atari100k on the six games: the published DER, DrQ(eps) and SPR means beside
    each game, their aggregates over the same games, and the probability that ours improves on each."""
    games = ["Alien", "Boxing", "Breakout", "Freeway", "KungFuMaster", "Pong"]
    for game in games:
        for seed in (0, 1):
            write_rewards(
                tmp_path / f"{game}-seed{seed}", [0.0, 1e6], every=100_000, preset="atari100k"
            )  # far above every run
    summary = utils_results.summarize(tmp_path, samples=200)
    assert summary["games"]["Breakout"]["published"]["DrQ_eps"] == pytest.approx(19.76, abs=0.01)
    assert summary["published_runs"] == {"DER": 100, "DrQ_eps": 100, "SPR": 100}
    assert set(summary["aggregates"]) == {"ours", "DER", "DrQ_eps", "SPR"}
    for name in ("DER", "DrQ_eps", "SPR"):
        assert summary["improvement"][name] == {"value": 1.0, "interval": (1.0, 1.0)}
    published = utils_results.published_scores(games)[1]["DrQ_eps"]
    assert published.shape == (100, 6)
    references = utils_results.reference_scores()
    scale = np.array([references[game] for game in games])
    normalised = (published - scale[:, 0]) / (scale[:, 1] - scale[:, 0])
    assert summary["aggregates"]["DrQ_eps"]["iqm"]["value"] == pytest.approx(
        np.mean(np.sort(normalised.ravel())[150:450])
    )
    assert summary["null_check"] == {"DER": 0.0, "DrQ_eps": 0.0, "SPR": 0.0}  # no 2 of their runs come near
    text = utils_results.report(tmp_path, samples=200)
    assert "Probability that ours improves on DrQ_eps: 1.000" in text and "| DrQ_eps |" in text
    iqm = summary["aggregates"]["ours"]["iqm"]["value"]
    assert (
        f"Null check, DrQ_eps: the IQM of 2 runs per game drawn from its own published runs reaches ours ({iqm:.3f}) "
        "in 0.0% of 200 draws" in text
    )


def test_a_der_run_is_placed_among_the_published_runs_of_its_game(tmp_path):
    """--preset der is on the Atari 100k protocol: its runs are set beside the published ones, and each run's
    score is placed among each algorithm's 100 runs on its game (the share it beats, a tie counting half)."""
    published = json.loads((utils_results.PUBLISHED / "runs.json").read_text())
    der_pong = np.array(published["DER"]["Pong"])
    score = float(np.median(der_pong))
    write_rewards(tmp_path / "Pong-seed0", [-21.0, score], every=100_000, preset="der")
    summary = utils_results.summarize(tmp_path, samples=50)
    below, ties = np.sum(der_pong < score), np.sum(der_pong == score)
    expected = 100 * (below + ties / 2) / len(der_pong)
    assert summary["games"]["Pong"]["percentile"]["DER"][0] == pytest.approx(expected)
    assert 25 < expected < 75  # the median run: near the middle, ties and all
    assert summary["games"]["Pong"]["published"]["DER"] == pytest.approx(der_pong.mean(), abs=0.05)
    text = utils_results.report(tmp_path, samples=50)
    assert f"Pong, seed 0: above {expected:.0f}% of DER's 100" in text
    assert utils_results.percentile_among(np.array([1.0, 2.0, 2.0, 3.0]), 2.0) == 50.0


def test_the_null_check_draws_runs_within_each_game_without_replacement():
    """How often the IQM of k runs per game drawn from an algorithm's own runs reaches a given IQM,
    against the exact frequency over every choice of k runs per game: drawing across games, with
    replacement, or counting only what exceeds it (not what reaches it) each gives another number."""
    import itertools

    from rliable import metrics

    published = np.array([[0.0, 10.0], [1.0, 12.0], [2.0, 13.0], [5.0, 20.0]])  # 4 runs of 2 games apart in scale
    target = 7.0  # reached exactly by some choices
    choices = list(itertools.product(itertools.combinations(range(4), 3), repeat=2))
    exact = np.mean(
        [metrics.aggregate_iqm(np.stack([published[list(a), 0], published[list(b), 1]], axis=1)) >= target
         for a, b in choices]
    )  # fmt: skip
    assert exact == 0.8125  # above 7: 0.625; with replacement about 0.64; the 8 runs pooled about 0.68
    frequency = utils_results.null_frequency(published, target, runs=3, draws=20_000)
    assert frequency == pytest.approx(exact, abs=0.01)
    assert utils_results.null_frequency(published, target, runs=3, draws=20_000) == frequency  # seeded
    assert utils_results.null_frequency(published, 100.0, runs=3, draws=500) == 0.0
    with pytest.raises(ValueError, match="cannot draw 5 of 4"):
        utils_results.null_frequency(published, target, runs=5, draws=10)


def test_the_probability_of_improvement_is_rliables_to_the_last_bit():
    """The report's counted probability of improvement equals rliable's (scipy's Mann-Whitney U per
    game), ties and identical columns included, so the committed intervals are rliable's."""
    from rliable import metrics

    rng = np.random.default_rng(1)
    for runs_x, runs_y in ((3, 100), (2, 2), (5, 4)):
        x = rng.integers(0, 4, size=(runs_x, 6)).astype(float)
        y = rng.integers(0, 4, size=(runs_y, 6)).astype(float)
        if runs_x == runs_y:
            y[:, 0] = x[:, 0]  # a game where the two are the same runs: 0.5
        assert utils_results.probability_of_improvement(x, y) == metrics.probability_of_improvement(x, y)


def test_the_report_shows_the_spread_of_each_runs_evaluation_games(tmp_path):
    """Near-identical evaluation games (a deterministic game without no-op starts) show as a tiny
    spread: each run's last evaluation's standard deviation, minimum and maximum over its games."""
    for seed, line in enumerate(
        ["  1   100000 -19.8 0.8 -21.0 -18.0 100 3540", "  1   100000 -9.1 6.3 -21.0 9.0 100 3480"]
    ):
        write_rewards(tmp_path / f"Pong-seed{seed}", [-21.0, -21.0], every=100_000)
        rewards = tmp_path / f"Pong-seed{seed}" / "rewards.txt"
        rewards.write_text(rewards.read_text().splitlines()[0] + "\n" + line + "\n")
    summary = utils_results.summarize(tmp_path, samples=50)
    assert summary["games"]["Pong"]["games_spread"] == {
        0: {"std": 0.8, "min": -21.0, "max": -18.0},
        1: {"std": 6.3, "min": -21.0, "max": 9.0},
    }
    text = utils_results.markdown(summary)
    assert "| Pong | 0 | -19.8 | 0.8 (-21 to -18) | 100,000 | 59 min |" in text
    assert "| Pong | 1 | -9.1 | 6.3 (-21 to 9) | 100,000 | 58 min |" in text


def test_two_sweeps_side_by_side_as_an_ablation(tmp_path):
    """--compare A B: per game both means and their difference; over the games both aggregate, both
    sides' IQM and the rest, and the probability that a run of A beats one of B (ties count half),
    averaged over the games."""
    scores = {
        "A": {"Pong": [-10.0, 0.0], "Boxing": [20.0, 30.0]},
        "B": {"Pong": [-10.0, -20.0], "Boxing": [40.0, 50.0]},
    }
    for sweep_name, games in scores.items():
        for game, finals in games.items():
            for seed, final in enumerate(finals):
                write_rewards(tmp_path / sweep_name / f"{game}-seed{seed}", [0.0, final])
    write_rewards(tmp_path / "A" / "Alien-seed0", [0.0, 500.0])  # not in B: in no comparison
    comparison = utils_results.compare(tmp_path / "A", tmp_path / "B", samples=200)
    assert list(comparison["games"]) == ["Boxing", "Pong"]
    assert comparison["games"]["Pong"] == {
        "mean": -5.0, "other_mean": -15.0, "seeds": 2, "other_seeds": 2, "holds_without_any_one_run": True
    }  # fmt: skip
    assert comparison["aggregate_games"] == ["Boxing", "Pong"]
    # Pong: A's -10 ties B's -10 and beats -20, A's 0 beats both: (0.5 + 1 + 1 + 1) / 4; Boxing: A never wins.
    assert comparison["improvement"]["value"] == pytest.approx((3.5 / 4 + 0.0) / 2)
    low, high = comparison["improvement"]["interval"]
    assert low <= comparison["improvement"]["value"] <= high
    references = utils_results.reference_scores()
    a = np.array([[(x - references[g][0]) / (references[g][1] - references[g][0]) for x in scores["A"][g]]
                  for g in ("Boxing", "Pong")]).T  # fmt: skip
    assert comparison["aggregates"]["A"]["iqm"]["value"] == pytest.approx(np.mean(np.sort(a.ravel())[1:3]))
    assert sweep.main(["--compare", str(tmp_path / "A"), str(tmp_path / "B")]) == 0
    text = (tmp_path / "A" / "versus-B.md").read_text()
    assert "| Pong | -5.0 | 2 | -15.0 | 2 | +10.0 | holds |" in text and "| A | " in text and "| B | " in text
    assert "Probability that a run of A beats one of B: 0.438" in text
    assert json.loads((tmp_path / "A" / "versus-B.json").read_text())["games"]["Boxing"]["other_mean"] == 45.0


def test_a_lead_on_a_game_that_rests_on_one_run_is_named():
    """A lead holds when leaving out any one run of either side keeps its sign; the first pipeline's
    Freeway (0.0, 23.5, 28.5 against 21.9, 22.3, 26.0) is behind only through its seed that never scored."""
    assert utils_results.lead_holds([21.9, 22.3, 26.0], [0.0, 23.5, 28.5]) is False
    assert utils_results.lead_holds([-12.1, -17.1, 19.8], [-19.8, -18.8, -9.9]) is True  # Pong
    assert utils_results.lead_holds([3.0, 4.0], [1.0, 2.0]) is True
    assert utils_results.lead_holds([1.0, 3.0], [2.0, 2.0]) is False  # no lead at all
    assert utils_results.lead_holds([5.0], [1.0, 2.0]) is False  # one run is all it rests on
    row = utils_results.comparison_markdown(
        {"sweep": "A", "other": "B", "games": {
            "Freeway": {"mean": 23.4, "other_mean": 17.3, "seeds": 3, "other_seeds": 3,
                        "holds_without_any_one_run": False}}}
    ).splitlines()[-1]  # fmt: skip
    assert row == "| Freeway | 23.4 | 3 | 17.3 | 3 | +6.1 | rests on one run |"


def test_games_behind_in_seeds_wait_outside_the_aggregates(tmp_path):
    """A sweep in progress (Breakout at 1 of 2 seeds): the aggregates and the comparison with the
    published runs are those of the games with every seed, as if the other were not there yet."""
    for game, seeds in (("Alien", (0, 1)), ("Boxing", (0, 1)), ("Breakout", (0,))):
        for seed in seeds:
            for folder in [tmp_path / "all", tmp_path / "complete"][: 1 + (game != "Breakout")]:
                write_rewards(
                    folder / f"{game}-seed{seed}", [0.0, 100.0 * seed + len(game)], every=100_000, preset="atari100k"
                )
    summary = utils_results.summarize(tmp_path / "all", samples=200)
    complete = utils_results.summarize(tmp_path / "complete", samples=200)
    assert summary["aggregate_games"] == complete["aggregate_games"] == ["Alien", "Boxing"]
    for key in ("aggregates", "improvement", "published_runs", "runs_per_game"):
        assert summary[key] == complete[key]
    assert "Breakout (1 seed)" in summary["notes"][0]
    text = utils_results.markdown(summary)
    assert "Human-normalised scores over 2 games (Alien, Boxing), 2 runs" in text
    assert summary["games"]["Breakout"]["std"] is None and "| **Breakout** | one seed so far | **8.0** |" in text


def test_the_figure_sets_each_game_beside_the_published_runs_and_aggregates_the_complete_games(tmp_path):
    """The per-game panel whatever the seeds (the published means, and the middle half of their runs
    for the game at that place); the IQM curve and the profiles over the report's aggregate games."""
    from matplotlib.collections import LineCollection

    def atari100k_run(game: str, seed: int, score: float) -> None:
        write_rewards(tmp_path / f"{game}-seed{seed}", [0.0, score], every=100_000, preset="atari100k")

    def panels() -> dict[str, object]:
        drawing = utils_results.figure(tmp_path, utils_results.summarize(tmp_path, samples=20))
        return {panel.get_title().split("\n")[0]: panel for panel in drawing.axes if panel.get_visible()}

    atari100k_run("Alien", 0, 700.0)
    atari100k_run("Alien", 1, 900.0)
    atari100k_run("Boxing", 0, 10.0)
    shown = panels()
    assert list(shown) == [
        "Alien", "Boxing", "each game: ours and published", "IQM over 1 game, 95% interval", "performance profiles"
    ]  # fmt: skip
    random, human = utils_results.reference_scores()["Boxing"]
    boxing_drq = utils_results.published_scores(["Alien", "Boxing"])[1]["DrQ_eps"][:, 1]
    middle_half = (np.percentile(boxing_drq, [25, 75]) - random) / (human - random)
    lines = [line for c in shown["each game: ours and published"].collections if isinstance(c, LineCollection)
             for line in c.get_segments()]  # fmt: skip
    assert any(np.allclose(line[:, 1], middle_half) and line[0, 0] > 1 for line in lines)  # Boxing's place is 1
    atari100k_run("Boxing", 1, 12.0)
    assert list(panels()) == [
        "Alien", "Boxing", "each game: ours and published", "IQM over 2 games, 95% interval", "performance profiles"
    ]  # fmt: skip


def test_every_label_of_the_figure_is_inside_it(tmp_path):
    """The report's figure of six games (their curves with bands from 8-column rewards.txt files, as the committed
    Atari 100k report's): no panel's title or axis label reaches past the figure's edge (the first panel's y label
    was cut at the top)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    for game in ("Alien", "Boxing", "Breakout", "Freeway", "KungFuMaster", "Pong"):
        folder = tmp_path / f"{game}-seed0"
        write_rewards(folder, [0.0, 0.0], every=100_000, preset="atari100k")
        (folder / "rewards.txt").write_text(
            "  0        0 1.0 1.0 0.0 5.0 100 60\n  1   100000 9.0 3.0 2.0 20.0 100 9000\n"
        )
    drawing = utils_results.figure(tmp_path, utils_results.summarize(tmp_path, samples=20))
    canvas = FigureCanvasAgg(drawing)
    canvas.draw()
    edge = drawing.bbox
    for panel in (panel for panel in drawing.axes if panel.get_visible()):
        for label in (label for label in (panel.title, panel.xaxis.label, panel.yaxis.label) if label.get_text()):
            extent = label.get_window_extent(canvas.get_renderer())
            assert edge.x0 <= extent.x0 and extent.x1 <= edge.x1 and edge.y0 <= extent.y0 and extent.y1 <= edge.y1, (
                label.get_text()
            )


def test_sweep_runs_resumes_retries_and_reports(tmp_path, ray_cluster, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a relative --out is the caller's folder, not main.py's (the project)
    out = tmp_path / "S"
    argv = ["--envs", "Pong", "Breakout", "--seeds", "0", *TINY, "--out", "S"]
    assert sweep.main(argv) == 0
    for game in ("Pong", "Breakout"):
        rows = (out / f"{game}-seed0" / "rewards.txt").read_text().splitlines()
        assert [int(row.split()[1]) for row in rows] == [0, 150, 300]
    printed = capsys.readouterr().out
    assert "| ours |" in printed and (out / "aggregate.png").exists()
    # main.py runs in the sweep's folder and records its --out as the sweep was given it: no path of this machine.
    assert json.loads((out / "Pong-seed0" / "config.json").read_text())["out"] == "S/Pong-seed0"

    # Rerunning skips finished runs, and continues an interrupted one from its checkpoint.
    (out / "Breakout-seed0" / "model_002.pt").unlink()
    (out / "Breakout-seed0" / "rewards.txt").write_text(
        "\n".join((out / "Breakout-seed0" / "rewards.txt").read_text().splitlines()[:2]) + "\n"
    )
    finished_log = (out / "Pong-seed0" / "main.log").read_text()
    assert sweep.main(argv) == 0
    printed = capsys.readouterr()
    assert "1 finished already" in printed.out
    # Without its replay memory the resume is not the straight run: the sweep and the run's log say so.
    assert (
        "Breakout-seed0: resumes at step 150, no longer exactly the run it was: its replay memory was not saved "
        "(--save-memory), so main.py refills it"
    ) in printed.out + printed.err
    assert (out / "Pong-seed0" / "main.log").read_text() == finished_log
    log = (out / "Breakout-seed0" / "main.log").read_text()
    assert log.count("Run folder:") == 2  # started, then resumed
    assert "Note: the replay memory was not saved with the checkpoint (--save-memory saves it); refilling" in log
    assert (out / "Breakout-seed0" / "model_002.pt").exists()
    assert json.loads((out / "Breakout-seed0" / "config.json").read_text())["out"] == "S/Breakout-seed0"

    # Rerun with other learning flags: refused in one line, not the old runs reported as the new ones.
    before = {path: path.read_bytes() for path in out.rglob("*") if path.is_file()}
    assert sweep.main([*argv, "--lr", "0.005", "--double"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"sweep.py: error: {out / 'Pong-seed0'} holds a run with other settings than this command's "
        "(--double False, not True; --lr 0.0001, not 0.005): give its own flags, or choose another --out"
    )
    assert {path: path.read_bytes() for path in out.rglob("*") if path.is_file()} == before

    # A run that fails is retried once, then reported; the report goes on with the others.
    (out / "Pong-seed1").mkdir()
    (out / "Pong-seed1" / "rewards.txt").write_text("not a run\n")  # main.py refuses to overwrite it
    assert sweep.main(["--envs", "Pong", "--seeds", "0", "1", *TINY, "--out", "S"]) == 1
    captured = capsys.readouterr()
    assert "Pong-seed1: failed (exit 2" in captured.out and "retrying" in captured.out
    assert "Pong-seed1: failed again" in captured.out
    assert "1 run(s) did not reach --steps 300: Pong-seed1" in captured.err
    assert "Left out Pong-seed1: " in captured.out and "| ours |" in captured.out  # the report, without it


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--envs", "Pnog", "--out", "x"], "did you mean Pong"),
        (["--envs", "Pong", "--out", "x", "--seed", "3"], "--seed is set by the sweep"),
        (
            ["--envs", "Pong", "--out", "x", "--bogus", "1"],
            "not a flag of sweep.py or main.py (spell flags out in full): --bogus 1",
        ),
        # main.py takes unique prefixes: these would train another game, or one seed in every seed folder.
        (["--envs", "Pong", "--out", "x", "--en", "Breakout"], "spell flags out in full): --en Breakout"),
        (["--envs", "Pong", "--out", "x", "--see", "7"], "spell flags out in full): --see 7"),
        (["--envs", "Pong", "--out", "x", "--seed=7"], "--seed=7 is set by the sweep"),
        # main.py's own checks, once, before any run starts
        (["--envs", "Pong", "--out", "x", "--lr", "-1"], "--lr must be positive and finite, got -1.0"),
        (
            ["--envs", "Pong", "--out", "x", "--steps", "100", "--learning-starts", "200"],
            "--learning-starts 200 must be below --steps 100",
        ),
        (["--envs", "Pong"], "--envs and --out are needed"),
        (["--report", "/nonexistent/sweep"], "/nonexistent/sweep"),
    ],
)
def test_bad_input_is_one_line(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    try:
        code = sweep.main(argv)
    except SystemExit as stopped:
        code = stopped.code
    assert code == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert error[-1].startswith("sweep.py: error: ") and message in error[-1]
    assert not (tmp_path / "x").exists()  # refused before anything was written


def fake_runs(monkeypatch, outcomes: dict[str, list[str]]) -> list[str]:
    """Runs without Ray or training: each call of a run takes the next of its outcomes, ``finish``
    (rewards.txt at --steps 300, exit 0), ``stopped`` (stopped from outside: exit 130, as main.py
    after SIGTERM) or ``short`` (exit 0 with the last evaluation at step 150). Returns the calls."""
    calls: list[str] = []

    def run_main(argv, log, stop_file, cwd):
        folder = cwd / argv[argv.index("--out" if "--out" in argv else "--resume") + 1]  # as main.py sees it
        calls.append(folder.name)
        outcome = outcomes.get(folder.name, ["finish"]).pop(0) if outcomes.get(folder.name) else "finish"
        if outcome == "stopped":
            return 130
        folder.mkdir(parents=True, exist_ok=True)
        if "--out" in argv:  # a new run: its options, as main.py writes them
            (folder / "config.json").write_text(json.dumps(vars(options_of(argv))))
        write_rewards_lines(folder, [(0, -21.0), (150 if outcome == "short" else 300, -20.0)])
        return 0

    monkeypatch.setattr(sweep, "import_ray_or_note", lambda address: False)
    monkeypatch.setattr(sweep, "run_main", run_main)
    return calls


def write_rewards_lines(folder: Path, evaluations: list[tuple[int, float]]) -> None:
    lines = [f"{index:3d} {step:8d} {score:.1f}" for index, (step, score) in enumerate(evaluations)]
    (folder / "rewards.txt").write_text("\n".join(lines) + "\n")


def test_a_run_stopped_from_outside_is_resumed_and_an_unfinished_one_never_reported(tmp_path, monkeypatch, capsys):
    """A run's main.py stopped by SIGTERM (a scheduler's preemption, an admin's kill) exits 130 with a
    checkpoint: the sweep did not ask for that, so it retries the run, rather than dropping it and
    reporting its untrained evaluation. A run that never reaches --steps makes the sweep fail."""
    out = tmp_path / "S"
    argv = ["--envs", "Pong", "--seeds", "0", "1", *TINY, "--out", str(out)]
    calls = fake_runs(monkeypatch, {"Pong-seed1": ["stopped", "finish"]})
    assert sweep.main(argv) == 0
    assert calls == ["Pong-seed0", "Pong-seed1", "Pong-seed1"]
    printed = capsys.readouterr().out
    assert "Pong-seed1: failed (exit 130: stopped from outside the sweep, with a checkpoint); retrying" in printed

    out = tmp_path / "U"
    argv = ["--envs", "Pong", "--seeds", "0", "1", *TINY, "--out", str(out)]
    calls = fake_runs(monkeypatch, {"Pong-seed1": ["stopped", "short"]})
    assert sweep.main(argv) == 1
    captured = capsys.readouterr()
    assert "Pong-seed1: failed again (exit 0: ended before --steps 300)" in captured.out
    assert "1 run(s) did not reach --steps 300: Pong-seed1" in captured.err
    assert "Left out Pong-seed1: unfinished: evaluated at step 150 of its --steps 300" in captured.out
    summary = utils_results.summarize(out, samples=100)
    assert list(summary["games"]["Pong"]["last_score"]) == [0]  # only the finished run is a result
    assert "one run per game" in " ".join(summary["notes"])

    # Rerunning finishes it; a run kept without its checkpoints (committed results) counts as done.
    fake_runs(monkeypatch, {})
    assert sweep.main(argv) == 0
    assert "1 finished already" in capsys.readouterr().out
    assert sweep.run_state(sweep.Run("Pong", 0, out / "Pong-seed0"), 300) == "done"


def test_a_relative_out_gives_runs_relative_folders(tmp_path, monkeypatch):
    """main.py records its --out in config.json, and run folders get committed (results/): with a relative
    --out, each run is given its folder relative to where the sweep runs, and runs there."""
    monkeypatch.chdir(tmp_path)
    fake_runs(monkeypatch, {})
    assert sweep.main(["--envs", "Pong", "--seeds", "0", *TINY, "--out", "sweeps/S"]) == 0
    assert json.loads((tmp_path / "sweeps" / "S" / "Pong-seed0" / "config.json").read_text())["out"] == (
        "sweeps/S/Pong-seed0"
    )


def test_a_sweep_checks_the_memory_of_the_runs_that_go_at_once(tmp_path, monkeypatch, capsys):
    """main.py checks one run's replay memory; two at once need twice that."""
    monkeypatch.setattr(sweep, "available_memory", lambda: 3 * 2**30)
    monkeypatch.setattr(sweep, "available_cpus", lambda: 2)
    calls = fake_runs(monkeypatch, {})
    argv = [
        "--envs",
        "Pong",
        "Breakout",
        "--seeds",
        "0",
        *TINY,
        "--memory-size",
        "200000",
        "--out",
        str(tmp_path / "S"),
    ]
    assert sweep.main(argv) == 0  # one needs 1.3 GiB, two at once 2.6 GiB: room for both
    monkeypatch.setattr(sweep, "available_memory", lambda: 2 * 2**30)
    assert sweep.main([*argv[:-1], str(tmp_path / "T")]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "sweep.py: error: 2 runs at once with --memory-size 200,000 need 2.6 GiB of RAM, 2.0 GiB is available here; "
        "choose a smaller --memory-size, or more --threads per run"
    )
    assert calls == ["Pong-seed0", "Breakout-seed0"] and not (tmp_path / "T").exists()


def test_a_second_sweep_on_a_folder_in_use_is_refused(tmp_path, monkeypatch, capsys):
    """Two sweeps on one folder would share its stop file: Ctrl-C to one stopped the other's runs.
    The second is refused in one line, exit 1, and starts nothing."""
    out = tmp_path / "S"
    calls = fake_runs(monkeypatch, {})
    with RunLock(out):  # the first sweep, still going
        assert sweep.main(["--envs", "Pong", "--seeds", "0", *TINY, "--out", str(out)]) == 1
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error == f"sweep.py: error: {out} is in use by process {os.getpid()}; wait for it or stop it first"
    assert calls == []
    assert sweep.main(["--envs", "Pong", "--seeds", "0", *TINY, "--out", str(out)]) == 0  # once it is gone


def test_a_sweep_with_no_finished_run_names_its_unfinished_runs(tmp_path, monkeypatch, capsys):
    """Every run short of --steps: no report to write, and the runs named, exit 1 (it used to be
    exit 2, 'holds no run folders with evaluations')."""
    out = tmp_path / "S"
    fake_runs(monkeypatch, {"Pong-seed0": ["short", "short"], "Pong-seed1": ["short", "short"]})
    assert sweep.main(["--envs", "Pong", "--seeds", "0", "1", *TINY, "--out", str(out)]) == 1
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("sweep.py: error: 2 run(s) did not reach --steps 300: Pong-seed0, Pong-seed1")


def test_the_report_takes_each_runs_game_and_steps_from_its_configuration(tmp_path):
    """A run whose config.json is cut short, holds NaN or infinite steps, or is missing (nor a
    checkpoint to read), or whose game is not its folder's, is left out with the reason: it is never
    counted as finished, nor scored as another game."""
    write_rewards(tmp_path / "Pong-seed0", [-21.0, -5.0], every=2000)
    broken = {1: '{"env": "Pong", "steps": 40', 2: '{"env": "Pong", "steps": NaN}', 3: None,
              4: '{"env": "Pong", "steps": Infinity}', 5: '{"env": "ALE/Breakout-v5", "steps": 2000, "eval_epsilon": 0.05}'}  # fmt: skip
    for seed, text in broken.items():
        write_rewards(tmp_path / f"Pong-seed{seed}", [-21.0, 3.0], every=2000)
        if text is None:
            (tmp_path / f"Pong-seed{seed}" / "config.json").unlink()
        else:
            (tmp_path / f"Pong-seed{seed}" / "config.json").write_text(text)
    summary = utils_results.summarize(tmp_path, samples=50)
    assert summary["games"]["Pong"]["last_score"] == {0: -5.0}
    left_out = summary["left_out"]
    assert sorted(left_out) == [f"Pong-seed{seed}" for seed in range(1, 6)]
    assert all(
        left_out[f"Pong-seed{seed}"].startswith("its configuration (config.json) cannot be read")
        for seed in (1, 2, 3, 4)
    )
    assert left_out["Pong-seed5"] == "the folder is named for Pong, but its run played Breakout"
    assert "Left out Pong-seed2: its configuration (config.json) cannot be read" in utils_results.markdown(summary)


def test_the_report_leaves_out_what_it_cannot_trust_and_keeps_its_files_together(tmp_path, monkeypatch):
    """A score that is not finite, and a second folder for one seed (Pong-seed001 beside Pong-seed1),
    are left out with the reason (they gave NaN aggregates, or one run silently replaced the other); a
    figure that cannot be written leaves the report of before as it was (report.md was replaced first)."""
    write_rewards(tmp_path / "Pong-seed0", [-21.0, -5.0], every=1000)
    write_rewards(tmp_path / "Pong-seed1", [-21.0, -7.0], every=1000)
    write_rewards(tmp_path / "Pong-seed001", [-21.0, 21.0], every=1000)
    write_rewards(tmp_path / "Pong-seed2", [-21.0, 0.0], every=1000)
    (tmp_path / "Pong-seed2" / "rewards.txt").write_text("  0        0 -21.0\n  1     1000 nan\n")
    summary = utils_results.summarize(tmp_path, samples=50)
    assert summary["games"]["Pong"]["last_score"] == {0: -5.0, 1: -7.0}
    assert summary["left_out"]["Pong-seed001"] == "not a sweep's folder name (a sweep names seed 1's Pong-seed1)"
    assert "a score that is not a finite number" in summary["left_out"]["Pong-seed2"]
    utils_results.report(tmp_path, samples=50)
    before = {name: (tmp_path / name).read_bytes() for name in ("report.md", "report.json", "aggregate.png")}
    write_rewards(tmp_path / "Pong-seed3", [-21.0, 3.0], every=1000)

    def failing_save(figure, path):
        raise utils_results.plot.PlotError(f"cannot write {path}: No space left on device")

    monkeypatch.setattr(utils_results.plot, "save", failing_save)
    with pytest.raises(utils_results.ReportError, match="No space left on device"):
        utils_results.report(tmp_path, samples=50)
    assert {name: (tmp_path / name).read_bytes() for name in before} == before


def test_a_failed_runs_reason_is_never_a_progress_bar_line(tmp_path):
    log = tmp_path / "main.log"
    log.write_text("Run folder: R\nmain.py: error: cannot write R/model_001.pt: No space left on device\n"
                   " 12%|█▏        | 1200/10000 [00:40<04:53, 30.0step/s, loss=0.01]\r\n")  # fmt: skip
    assert sweep.last_error(log) == "main.py: error: cannot write R/model_001.pt: No space left on device"


def test_the_progress_bar_names_the_runs_under_way_not_the_queued_ones(tmp_path):
    """A resumable run still queued has an old log and steps of its own: it is not shown until its
    main.py writes to its log again."""
    runs = sweep.plan(tmp_path, ["Pong", "Breakout"], [0])
    for run, step in zip(runs, (1600, 64684), strict=True):
        run.folder.mkdir()
        (run.folder / "episodes.csv").write_text(f"step,score,length,epsilon,seconds\n{step},-21,855,1.0,169.1\n")
        (run.folder / "main.log").write_text("Run folder\n")
    submitted = time.time()
    os.utime(runs[1].folder / "main.log", (submitted - 60, submitted - 60))  # from an earlier sweep
    assert sweep.progress_text(runs, submitted - 1) == "Pong-seed0 1,600"
    assert sweep.progress_text(runs, submitted - 120) == "Pong-seed0 1,600, Breakout-seed0 64,684"


def test_a_report_never_averages_runs_of_other_settings_as_seeds(tmp_path, capsys):
    """Runs of another preset, --steps or environment flag than the most runs' are no more seeds of the same
    experiment: --report and --compare leave them out, named with the settings that differ (those a rerun of the
    sweep compares: utils_config.learning_config, and --steps)."""

    def run(sweep_name: str, name: str, scores: list[float], *flags: str) -> None:
        write_rewards(tmp_path / sweep_name / name, scores, every=100)
        options = options_of(["--env", name.rpartition("-seed")[0], "--steps", str(100 * (len(scores) - 1)), *flags])
        (tmp_path / sweep_name / name / "config.json").write_text(json.dumps(vars(options)))

    for sweep_name in ("A", "B"):
        for seed in (0, 1, 2):
            run(sweep_name, f"Pong-seed{seed}", [-21.0, -10.0 - seed])
        run(sweep_name, "Breakout-seed0", [0.0, 9.0])
    run("A", "Pong-seed3", [-21.0, 20.0], "--preset", "atari100k")
    run("A", "Pong-seed4", [-21.0, -21.0, 20.0])
    run("A", "Breakout-seed1", [0.0, 90.0], "--sticky-actions", "0.25")
    run("A", "Pong-seed5", [-21.0, -9.0])  # the settings of the others under a preset's name: the same experiment
    config = json.loads((tmp_path / "A" / "Pong-seed5" / "config.json").read_text())
    (tmp_path / "A" / "Pong-seed5" / "config.json").write_text(json.dumps({**config, "preset": "my-recipe"}))
    summary = utils_results.summarize(tmp_path / "A", samples=50)
    assert summary["games"]["Pong"]["last_score"] == {0: -10.0, 1: -11.0, 2: -12.0, 5: -9.0}
    assert summary["games"]["Breakout"]["last_score"] == {0: 9.0}
    left_out = summary["left_out"]
    assert sorted(left_out) == ["Breakout-seed1", "Pong-seed3", "Pong-seed4"]
    assert left_out["Breakout-seed1"] == "other settings than the 5 runs reported (--sticky-actions 0.25, not 0.0)"
    assert left_out["Pong-seed4"] == "other settings than the 5 runs reported (--steps 200, not 100)"
    assert left_out["Pong-seed3"].startswith("other settings than the 5 runs reported (--adam-eps 0.00015, not ")
    assert left_out["Pong-seed3"].endswith(" more)")

    assert sweep.main(["--compare", str(tmp_path / "A"), str(tmp_path / "B")]) == 0
    printed = capsys.readouterr().out
    assert "| Pong | -10.5 | 4 | -11.0 | 3 | +0.5 |" in printed and "| Breakout | 9.0 | 1 | 9.0 | 1 | +0.0 |" in printed
    assert "Left out A/Pong-seed4: other settings than the 5 runs reported (--steps 200, not 100)" in printed


def test_a_report_imports_nothing_a_results_folder_names(tmp_path, monkeypatch, capsys):
    """A run's saved env may be a 'module:Class', and sweep.py has the project folder on sys.path, where a
    results folder can ship that module: --report, --compare and a rerun of the sweep name the run's game from
    its config.json without importing anything."""
    monkeypatch.syspath_prepend(str(tmp_path))  # as the project folder is for sweep.py
    marker = tmp_path / "imported"
    (tmp_path / "evilmod.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).touch()\nthing = 1\n")

    def evil_run(folder: Path) -> None:
        write_rewards(folder, [-21.0, -3.0], every=300)
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, "env": "evilmod:thing"}))

    for sweep_name in ("A", "B"):
        write_rewards(tmp_path / sweep_name / "Pong-seed0", [-21.0, -5.0], every=300)
        evil_run(tmp_path / sweep_name / "Pong-seed1")
    assert sweep.main(["--report", str(tmp_path / "A")]) == 0
    assert not marker.exists()
    assert "Left out Pong-seed1: its run played 'evilmod:thing', not an Atari game" in capsys.readouterr().out
    assert sweep.main(["--compare", str(tmp_path / "A"), str(tmp_path / "B")]) == 0
    assert not marker.exists()
    evil_run(tmp_path / "C" / "Pong-seed0")  # finished: a rerun compares its settings with the command's
    fake_runs(monkeypatch, {})
    assert sweep.main(["--envs", "Pong", "--seeds", "0", *TINY, "--out", str(tmp_path / "C")]) == 2
    assert not marker.exists()
    assert "(--env 'evilmod:thing', not 'ALE/Pong-v5'; " in capsys.readouterr().err


def test_a_report_leaves_out_a_run_whose_files_cannot_be_read(tmp_path):
    """A config.json nested 100,000 deep (Python's JSON parser recurses per level) and a rewards.txt that is a
    folder cost their own runs, with the reason, not the whole report."""
    write_rewards(tmp_path / "Pong-seed0", [-21.0, -5.0])
    write_rewards(tmp_path / "Pong-seed1", [-21.0, -3.0])
    config = tmp_path / "Pong-seed1" / "config.json"
    config.write_text('{"env": "Pong", "steps": 100, "preset": ' + "[" * 100_000 + "]" * 100_000 + "}")
    (tmp_path / "Pong-seed2" / "rewards.txt").mkdir(parents=True)
    summary = utils_results.summarize(tmp_path, samples=50)
    assert summary["games"]["Pong"]["last_score"] == {0: -5.0}
    assert summary["left_out"] == {
        "Pong-seed1": f"its configuration (config.json) cannot be read: {config}: nested too deeply to be a run's "
        "configuration",
        "Pong-seed2": f"cannot read {tmp_path / 'Pong-seed2' / 'rewards.txt'}: Is a directory",
    }
    assert sweep.main(["--report", str(tmp_path)]) == 0


def test_a_run_queued_when_the_sweep_stops_never_starts(tmp_path):
    """After Ctrl-C, Ray starts the queued runs as the stopped ones free their slots: each must end
    at once as stopped (130), without starting main.py (whose log would then exist)."""
    stop_file = tmp_path / sweep.STOP_FILE
    stop_file.touch()
    log = tmp_path / "Pong-seed0" / sweep.LOG_FILE
    assert sweep.run_main(["--env", "Pong"], log, stop_file, tmp_path) == 130
    assert not log.exists()


def test_a_run_is_stopped_with_a_checkpoint_when_the_sweep_dies(tmp_path):
    """Even by SIGKILL: the kernel sends the run SIGTERM (main.py: a checkpoint, then exit), so no
    run trains on orphaned and holds its folder's lock."""
    child = (
        "import signal, sys, time, pathlib\n"
        "signal.signal(signal.SIGTERM, lambda *a: (pathlib.Path(sys.argv[1]).write_text('stopped'), sys.exit(0)))\n"
        "pathlib.Path(sys.argv[1] + '.ready').write_text('')\n"
        "time.sleep(60)\n"
    )
    parent = (
        "import subprocess, sys, time\n"
        f"sys.path.insert(0, {str(Path(sweep.__file__).parent)!r})\n"
        "import sweep\n"
        f"subprocess.Popen([sys.executable, '-c', {child!r}, sys.argv[1]], preexec_fn=sweep.stop_with_parent)\n"
        "time.sleep(60)\n"
    )
    marker = tmp_path / "child"
    process = subprocess.Popen([sys.executable, "-c", parent, str(marker)])
    deadline = time.monotonic() + 60
    while not Path(f"{marker}.ready").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    process.kill()
    process.wait()
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert marker.read_text() == "stopped"


def test_game_sets_expand_to_the_atari_5_10_and_100k_games():
    assert sweep.expand_envs(["atari5"]) == ["BattleZone", "DoubleDunk", "NameThisGame", "Phoenix", "Qbert"]
    assert len(sweep.expand_envs(["atari10", "pong"])) == 11
    atari100k = sweep.expand_envs(["atari100k"])
    assert len(atari100k) == 26 and {"Alien", "Boxing", "Breakout", "Freeway", "KungFuMaster", "Pong"} <= set(atari100k)
    assert sweep.expand_envs(["BreakoutNoFrameskip-v4"]) == ["Breakout"]
    with pytest.raises(sweep.SweepError, match="a sweep plays Atari games; MinAtar/Breakout-v1 is another gymnasium"):
        sweep.expand_envs(["MinAtar/Breakout-v1"])


def test_the_sweep_reads_the_steps_of_a_preset():
    """A run is finished at the preset's --steps (100k), not main.py's default 10M."""
    assert options_of(["--preset", "atari100k", "--threads", "1"]).steps == 100_000
    assert options_of(["--preset", "atari100k", "--steps", "3000"]).steps == 3000
    assert options_of(["--steps", "3000"]).steps == 3000


@pytest.mark.slow
def test_sigterm_stops_a_sweep_on_ray_and_its_runs_with_checkpoints(tmp_path):
    """SIGTERM to sweep.py (Slurm, Kubernetes, `timeout`), which starts Ray itself: like Ctrl-C, each
    running main.py saves a checkpoint, the sweep says how to continue, and no process is left."""
    pytest.importorskip("ray")
    out = tmp_path / "S"
    argv = [*TINY, "--steps", "50000", "--eval-every", "50000", "--envs", "Pong", "--seeds", "0", "--out", str(out)]
    process = subprocess.Popen(
        [sys.executable, "sweep.py", *argv], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    wait_until_training(process, out / "Pong-seed0")
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=180)
    assert process.returncode == 130, stderr
    assert "SIGTERM received" not in stderr and "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1] == f"Interrupted; run the same command again to continue the sweep in {out}"
    assert (out / "Pong-seed0" / "model_interrupted.pt").exists()
    assert not [cmdline for cmdline in process_command_lines() if str(out) in cmdline]  # no run left training


@pytest.mark.slow
def test_a_sweep_killed_by_sigkill_on_ray_leaves_each_run_with_a_checkpoint(tmp_path):
    """kill -9 of sweep.py, which starts Ray itself: Ray's worker would SIGKILL the main.py it
    started on its way out; the run must instead get SIGTERM (its parent died) and save a
    checkpoint at its current step."""
    pytest.importorskip("ray")
    out = tmp_path / "S"
    argv = [*TINY, "--steps", "50000", "--eval-every", "50000", "--envs", "Pong", "--seeds", "0", "--out", str(out)]
    process = subprocess.Popen(
        [sys.executable, "sweep.py", *argv], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    run = out / "Pong-seed0"
    wait_until_training(process, run)
    (session,) = Path("/tmp/ray").glob(f"session_*_{process.pid}")  # Ray names its session after its driver
    process.kill()
    process.wait()
    killed = time.monotonic()
    while [line for line in process_command_lines() if str(run) in line] and time.monotonic() < killed + 120:
        time.sleep(0.2)
    played = len((run / "episodes.csv").read_text().splitlines()) - 1
    checkpoint = torch.load(run / "model_interrupted.pt", weights_only=True)
    assert checkpoint["run"]["step"] > 0 and checkpoint["run"]["episodes"] == played
    assert "Interrupted at step" in (run / "main.log").read_text()
    # No process of the sweep's own Ray outlives it by more than a few seconds (its agents used to
    # live on for a minute).
    while session_processes(session) and time.monotonic() < killed + 15:
        time.sleep(0.2)
    assert not session_processes(session)


def session_processes(session: Path) -> list[int]:
    """The processes that name Ray's session folder in their command line or hold a file in it open."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if str(session).encode() in (entry / "cmdline").read_bytes() or any(
                os.readlink(fd).startswith(str(session)) for fd in (entry / "fd").iterdir()
            ):
                found.append(int(entry.name))
        except (OSError, ValueError):  # not a process, gone, or not ours to look at
            continue
    return found


def process_command_lines() -> list[str]:
    lines = []
    for entry in Path("/proc").iterdir():
        try:
            lines.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:  # not a process, or gone
            continue
    return lines


@pytest.mark.slow
def test_ctrl_c_while_ray_starts_and_an_address_with_no_ray_are_one_line(tmp_path):
    pytest.importorskip("ray")
    argv = [sys.executable, "sweep.py", "--envs", "Pong", "--seeds", "0", *TINY, "--out", str(tmp_path / "S")]
    process = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout.readline().startswith("Sweep ")
    time.sleep(1.0)  # Ray is starting (several seconds)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130 and "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1].startswith("Interrupted; run the same command again")

    result = subprocess.run([*argv, "--ray-address", "127.0.0.1:1"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "sweep.py: error: cannot join the Ray cluster at 127.0.0.1:1: Connection refused; "
        "is `ray start --head` running there?"
    )


def test_the_readme_shows_the_committed_atari100k_reports():
    """Each results table docs/results.md shows between markers is that committed file (the first
    pipeline's report always), and each report is that of the committed runs (their scores, spreads,
    steps and wall times; the intervals are resampled here with fewer draws). The committed reports
    draw 20,000 bootstrap samples; every interval and null-check frequency the prose quotes is one of
    theirs, and the claims they once contradicted are gone."""
    reports = "\n".join(
        path.read_text() for path in sorted((ROOT / "results").glob("atari100k*/*.md")) if path.name != "README.md"
    )
    for path in sorted((ROOT / "results").glob("atari100k*/report.json")):
        assert json.loads(path.read_text())["bootstrap_samples"] == 20_000, path
    prose = {name: (ROOT / name).read_text() for name in ("README.md", "docs/results.md", "docs/atari100k-v1.md")}
    for name, text in prose.items():
        for figure in re.findall(r"\d\.\d{3}\s\[\d\.\d{3},\s\d\.\d{3}\]", text):
            figure = " ".join(figure.split())  # as the report writes it, where the prose breaks its line
            assert figure in reports, f"{name}: {figure} is in no committed report"
        for frequency in re.findall(r"in (\d+\.\d)% of draws", text):
            assert f"in {frequency}% of 20,000 draws" in reports, f"{name}: {frequency}% is in no null check"
        for wrong in (
            "level with SPR",  # SPR's mean is far above ours
            "100 different games",  # at most 30 starts
            "matches DrQ",  # an interval holding 0.5 shows no difference, not a match
            "we follow its current code",  # the replay memory follows the 2021 code
            "made with the DrQ authors' code",  # no source says so
            "is never learned from",  # a terminal step's frame starts the next life's stack
        ):
            assert wrong not in text, f"{name}: {wrong}"
    readme = (ROOT / "docs" / "results.md").read_text()
    files = re.findall(r"<!-- (results/[\w/-]+\.md) -->\n", readme)
    assert "results/atari100k-v1/report.md" in files
    for file in files:
        start, end = f"<!-- {file} -->\n", f"\n<!-- end of {file} -->"
        shown = readme.split(start, 1)[1].split(end, 1)[0]
        assert shown.strip() == (ROOT / file).read_text().strip()
        if file.endswith("/report.md"):
            games_table = committed_report_rebuilt((ROOT / file).parent.name).split("\n\n")[0]
            assert games_table in shown


def test_no_committed_file_holds_a_path_of_the_machine_it_was_made_on():
    """Run folders record their --out (config.json), and committed ones held /work/main/results/...; a script fetched
    CleanRL from a mirror of one machine unless told otherwise. Nothing under results/ or scripts/ names an absolute
    path of a machine (/tmp, every machine's scratch, aside): the GPU check's captured logs (*.log) name installed
    files by their site-packages path. A binary file is read too: the released weights (results/breakout-10m) keep
    their run's settings, --out among them, as plain text in torch's uncompressed zip."""
    machine_path = re.compile(r"(?<![\w.~/])/(?:work|root|home|Users|opt|mnt|scratch|srv|data)/")
    found = [
        f"{path.relative_to(ROOT)}: {match.group()}"
        for folder in ("results", "scripts")
        for path in sorted((ROOT / folder).rglob("*"))
        if path.is_file() and path.suffix != ".png"
        for match in machine_path.finditer(path.read_text(errors="replace"))
    ]
    assert not found


def test_a_sweep_refuses_links_planted_in_its_folders_and_never_appends_through_one(tmp_path, monkeypatch, capsys):
    """A run's main.log was appended to through a link, and a run folder that is a link sent a whole
    run elsewhere: a link at a name the sweep or its runs write is refused in one line, exit 1, before
    any run starts; and run_main itself never opens its log through one."""
    outside = tmp_path / "outside"
    outside.write_text("precious")
    out = tmp_path / "S"
    real_run_main = sweep.run_main
    calls = fake_runs(monkeypatch, {})
    for planted in (out / "Pong-seed0" / "main.log", out / "Pong-seed1"):
        planted.parent.mkdir(parents=True, exist_ok=True)
        planted.symlink_to(outside)
        assert sweep.main(["--envs", "Pong", "--seeds", "0", "1", *TINY, "--out", str(out)]) == 1
        assert capsys.readouterr().err.strip().splitlines()[-1] == (
            f"sweep.py: error: {planted} is a symbolic link; the programs write only inside their folder: "
            "remove it, or put what it points to in its place"
        )
        planted.unlink()
    assert calls == [] and outside.read_text() == "precious"

    log = out / "Pong-seed0" / sweep.LOG_FILE
    log.symlink_to(outside)
    with pytest.raises(OSError, match="symbolic links"):
        real_run_main(["--help"], log, out / sweep.STOP_FILE, out)
    assert outside.read_text() == "precious"


def test_a_folder_name_is_never_written_into_a_report_as_it_is(tmp_path):
    """A run folder's name carried a newline into report.md: with a link at the report's temporary name
    aimed at a site-packages .pth file, a line of it became code that every Python start ran. Names, and
    reasons quoting them, are written with their control characters as escapes and Markdown's behind a
    backslash."""
    write_rewards(tmp_path / "Pong-seed0", [-21.0, -5.0])
    write_rewards(tmp_path / "Pong-seed1", [-21.0, -7.0])
    name = "x\nimport os; os.system('touch pwned') #|<b>*-seed01"
    write_rewards(tmp_path / name, [-21.0, 21.0])
    utils_results.report(tmp_path, samples=50)
    written = (tmp_path / "report.md").read_text()
    assert not any(line.startswith("import") for line in written.splitlines())
    shown = "x\\\\nimport os; os.system('touch pwned') #\\|\\<b\\>\\*-seed01"
    assert f"Left out {shown}: not a sweep's folder name" in written
    comparison = {"sweep": "A\u2028B", "other": "C_D", "games": {"Pong": {"mean": 1.0, "other_mean": 2.0, "seeds": 1,
                                                                          "other_seeds": 1,
                                                                          "holds_without_any_one_run": False}}}  # fmt: skip
    assert utils_results.comparison_markdown(comparison).startswith(
        "| game | A\\\\u2028B: mean | seeds | C\\_D: mean |"
    )


COMMITTED_REPORTS = ("atari100k", "atari100k-v1", "der")


@functools.cache
def committed_report_rebuilt(sweep: str) -> str:
    """results/SWEEP's report as its command writes it, but with 20 bootstrap draws: made once per test process."""
    return utils_results.markdown(utils_results.summarize(ROOT / "results" / sweep, samples=20))


@pytest.mark.parametrize("sweep", COMMITTED_REPORTS)
def test_each_committed_reports_draw_free_parts_are_what_its_command_writes_now(sweep):
    """`sweep.py --report results/SWEEP` wrote a per-run section the committed reports lacked (138 lines each), so
    running it dirtied the checkout: every part of the report that does not depend on the bootstrap's draws (rebuilt
    here with 20 of them) is in the committed report.md, and in its order."""
    committed = (ROOT / "results" / sweep / "report.md").read_text()
    rebuilt = committed_report_rebuilt(sweep)
    drawn = re.compile(r"\[-?\d+\.\d+, -?\d+\.\d+\]|\b20 draws\b|bootstrap")
    parts = [part for part in rebuilt.split("\n\n") if not drawn.search(part)]
    assert len(parts) >= 3  # the games table and a line per run at least
    positions = [committed.find(part) for part in parts]
    assert -1 not in positions, parts[positions.index(-1)]
    assert positions == sorted(positions)


@pytest.mark.slow
@pytest.mark.parametrize("sweep", COMMITTED_REPORTS)
def test_each_committed_report_is_what_its_command_rebuilds(sweep):
    """The whole report.md and report.json, 20,000 draws and all, as `sweep.py --report results/SWEEP` writes them."""
    folder = ROOT / "results" / sweep
    summary = utils_results.summarize(folder, samples=20_000)  # the command's default, not the suite's fewer
    assert utils_results.markdown(summary) + "\n" == (folder / "report.md").read_text()
    assert json.dumps(summary, indent=2) + "\n" == (folder / "report.json").read_text()
