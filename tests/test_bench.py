"""Smoke test of bench.py: every figure is there and positive (no wall-time assertions)."""

import csv
import itertools
import json
import math
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dqn_atari import bench, dqn, main, utils_results
from dqn_atari.utils_run import HEALTH_FILE, HEALTH_HEADER, read_episodes, read_log, read_rewards

ROOT = Path(__file__).resolve().parent.parent
KEYS = [
    "train_step_ms", "act_ms", "env_step_ms", "bound_isolated_sps", "work_in_loop_order_uniform_ms", "bound_uniform_sps",
    "work_in_loop_order_prioritized_ms", "bound_prioritized_sps",
    "sps_uniform", "sps_prioritized", "efficiency_uniform", "efficiency_prioritized", "bytes_per_transition_uniform",
    "bytes_per_transition_prioritized", "memory_push_us", "memory_sample_us", "memory_sample_3step_us", "priority_update_us",
    "priority_cycle_us", "sps_alone", "sps_beside_busy_core", "sps_two_runs_total", "busy_core_over_alone",
    "two_runs_over_alone",
]  # fmt: skip


@pytest.mark.slow
def test_quick_benchmark_reports_every_figure(monkeypatch, capsys):
    # The shared-machine part times four loops, each in a fresh process: the first runs for real (bench.py --loop
    # prints its steps/s), the other three print a stand-in figure. Beside a busy core and two at once, they would
    # time nothing on a suite worker pinned to one CPU, and each fresh process costs several seconds.
    real_loop_process, started = bench.loop_process, []

    def loop_process(*args):
        started.append(args)
        if len(started) == 1:
            return real_loop_process(*args)
        return subprocess.Popen([sys.executable, "-c", "print(50.0)"], stdout=subprocess.PIPE, text=True)

    monkeypatch.setattr(bench, "loop_process", loop_process)
    figures = bench.run("Breakout", quick=True, train_every=4)
    assert "Note:" not in capsys.readouterr().out  # its runs name the game as a user does: no ALE id note (six were)
    assert len(started) == 4 and figures["sps_alone"] != 50.0 and figures["sps_two_runs_total"] == 100.0
    for key in KEYS:
        assert math.isfinite(figures[key]) and figures[key] > 0, key
    assert figures["bytes_per_transition_uniform"] <= 7_100
    # The sum tree (16 bytes) and the TD error a transition arrived with (4).
    assert figures["bytes_per_transition_prioritized"] - figures["bytes_per_transition_uniform"] <= 20
    settings = figures["settings"]
    assert settings["game"] == "ALE/Breakout-v5" and settings["train_every"] == 4 and settings["torch"]
    assert json.loads(json.dumps(figures)) == figures
    rendered = bench.table(figures)
    assert "priority cycle" in rendered and "ale-py" in rendered


def test_the_breakout_table_by_seed_is_built_from_the_committed_runs():
    """The Breakout table by seed: each seed's mean training score per range of steps and their
    mean, beside CleanRL's same seeds, from the run folders in results/breakout/."""
    runs = ROOT / "results" / "breakout"
    reports = [
        utils_results.learning_report(runs / name) for name in ("learning-breakout-seed1", "learning-breakout-seed2")
    ]
    table = utils_results.seeds_table(reports, 150_000)
    assert "| 100-150k | 12.23 / 14.28 (13.26) | 13.78 / 14.44 (14.11) |" in table
    assert "| 0-20k | 1.69 / 1.06 (1.37) | 1.95 / 1.28 (1.62) |" in table
    assert "150-200k" not in table and "ours, uniform: seed 1 / 2 (mean)" in table
    # The evaluations at 150k in the runs' rewards.txt: 13.6 and 17.5.
    assert "| evaluation at 150k (10 games, epsilon 0.05) | 13.60 / 17.50 (15.55) | |" in table


def test_the_readme_shows_the_breakout_table_of_the_committed_runs(monkeypatch):
    """The three-seed table of docs/results.md is what its command prints from results/breakout/ today."""
    monkeypatch.chdir(ROOT)  # the table names the runs by the paths its command was given
    readme = (ROOT / "docs" / "results.md").read_text()
    start, end = "<!-- results/breakout: bench.py --learning --by-seed -->\n", "\n<!-- end of results/breakout -->"
    shown = readme.split(start, 1)[1].split(end, 1)[0]
    names = [f"learning-breakout-seed{seed}" for seed in (1, 2, 3)]
    names += ["learning-breakout-seed1-per150k", "learning-breakout-seed2-per", "learning-breakout-seed3-per"]
    names += [f"learning-breakout-seed{seed}-envs8" for seed in (1, 2, 3)]
    reports = [utils_results.learning_report(Path("results") / "breakout" / name) for name in names]
    assert shown.strip() == utils_results.seeds_table(reports, 150_000).strip()
    assert "| 100-150k | 12.23 / 14.28 / 12.88 (13.13) | 17.34 / 19.97 / 16.44 (17.92) |" in shown


def test_the_readme_shows_the_committed_gpu_check():
    """The GPU table of docs/results.md is bench.py --gpu-report of the committed GPU check, and its figures of
    the alternating uniform and prioritized loops are those of the committed rounds."""
    readme = (ROOT / "docs" / "results.md").read_text()
    figures = json.loads((ROOT / "results/gpu/h100-run3/gpu_check.json").read_text())["bench"]
    assert utils_results.gpu_table(figures) in readme
    ours, cleanrl = figures["sps_uniform_device"], figures["sps_cleanrl"]
    assert (
        f"**{ours / cleanrl:.2f}\N{MULTIPLICATION SIGN}** CleanRL's steps/s on the same H100 ({ours:.0f} against {cleanrl:.0f})"
        in readme
    )
    rounds = json.loads((ROOT / "results/gpu/h100-run3/uniform_prioritized_alternating.json").read_text())
    for values in rounds.values():
        assert f"{statistics.mean(values):.1f} ({', '.join(f'{value:.1f}' for value in values)})" in readme
    ratio = statistics.mean(rounds["prioritized"]) / statistics.mean(rounds["uniform"])
    assert f"**{ratio:.2f}\N{MULTIPLICATION SIGN}** the uniform one" in readme


def test_the_readme_summarises_the_committed_gpu_check():
    """The GPU figures the README summarises (docs/gpu.md, in short) are those of the committed GPU check and alternating rounds."""
    readme = " ".join((ROOT / "docs" / "gpu.md").read_text().split())  # moved from the README  # lines wrapped anywhere
    figures = json.loads((ROOT / "results/gpu/h100-run3/gpu_check.json").read_text())["bench"]
    rounds = json.loads((ROOT / "results/gpu/h100-run3/uniform_prioritized_alternating.json").read_text())
    prioritized, uniform = statistics.mean(rounds["prioritized"]), statistics.mean(rounds["uniform"])
    ours, cleanrl = figures["sps_uniform_device"], figures["sps_cleanrl"]
    for shown in (
        f"our default loop **{ours:.0f}** against CleanRL's **{cleanrl:.0f}**, alternating, **{ours / cleanrl:.2f}\N{MULTIPLICATION SIGN}**",
        f"frames in host RAM {figures['sps_uniform_host']:.0f} (timed once)",
        f"prioritized replay {prioritized / uniform:.2f}\N{MULTIPLICATION SIGN} the uniform loop ({prioritized:.0f} against {uniform:.0f}",
        f"{figures['train_step_graphed_ms']:.3f} ms as a CUDA graph ({figures['train_step_ms']:.3f} eager)",
        f"peak at {figures['gpu_memory_peak_gib']:.2f} GiB",
        f"about {figures['hours_per_10m_steps']:.2f} hours",
    ):
        assert shown in readme, shown


def test_the_docs_show_the_committed_atari100k_gpu_figures():
    """The Atari 100k preset's GPU table in docs/results.md is bench.py --gpu-report of run 4, and the README's
    figures are its."""
    figures = json.loads((ROOT / "results/gpu/h100-run4/gpu_check.json").read_text())["bench"]
    assert utils_results.gpu_tables(figures) in (ROOT / "docs" / "results.md").read_text()
    preset = figures["atari100k"]
    readme = " ".join((ROOT / "docs" / "gpu.md").read_text().split())  # moved from the README
    assert (
        f"its loop at **{preset['sps_graphed']:.0f}** steps/s with the augmented learning step graphed, "
        f"{preset['graphs_over_eager']:.2f}\N{MULTIPLICATION SIGN} eager ({preset['sps_eager']:.0f}), so 100k steps "
        f"train in about {preset['minutes_per_100k_steps']:.1f} minutes"
    ) in readme


def test_the_docs_show_the_committed_games_at_once_gpu_figures():
    """The games-at-once GPU table in docs/results.md is bench.py --gpu-report of run 6, it was made from that run's
    log, and the README's figures are its."""
    run = ROOT / "results/gpu/h100-run6"
    figures = json.loads((run / "gpu_check.json").read_text())["bench"]
    assert utils_results.gpu_tables(figures) in (ROOT / "docs" / "results.md").read_text()
    envs = figures["envs"]
    logged = [line.split() for line in (run / "envs.log").read_text().splitlines()]
    assert {f"{games} games, {workers} workers": [float(sps)] for _, _, games, _, workers, _, sps in logged} == envs[
        "sps_rounds"
    ]
    readme = " ".join((ROOT / "docs" / "usage.md").read_text().split())  # moved from the README
    assert envs["fastest"] == "32 games, 8 workers"
    assert f"32 games over 8 workers gave {envs['sps'][envs['fastest']]:,.0f} (run 6)" in readme


def test_the_docs_show_the_committed_h200_games_at_once_figures():
    """Run 8's games-at-once table in docs/results.md is bench.py --gpu-report of its JSON, each round's figure is
    the one its log printed as the round ended, and the README's figures, hours with evaluations, are its."""
    run = ROOT / "results/gpu/h200-run8"
    check = json.loads((run / "gpu_check.json").read_text())
    assert check["host"]["gpu"].startswith("NVIDIA H200") and check["host"]["commit"] == "b6258c9"
    figures = check["bench"]
    assert utils_results.gpu_tables(figures) in (ROOT / "docs" / "results.md").read_text()
    envs, evaluation = figures["envs"], figures["evaluation"]
    logged = [line for line in (run / "gpu_check.log").read_text().splitlines() if line.endswith(" steps/s")]
    rounds = envs["sps_rounds"]
    assert logged == [f"{name}: {values[i]:.1f} steps/s" for i in range(5) for name, values in rounds.items()]
    one, plain = envs["sps"]["1 games, 0 workers"], envs["sps"]["128 games, 15 workers"]
    assert envs["fastest"] == "128 games, 15 workers, learning while playing"
    fastest, evaluations = envs["sps"][envs["fastest"]], evaluation["10 workers"]["hours_per_40"]
    readme = " ".join((ROOT / "docs" / "usage.md").read_text().split())  # moved from the README
    assert (
        f"the loop ran at {one:.0f} steps/s with one game, {plain:,.0f} with 128 games over 15 workers and "
        f"**{fastest:,.0f}** with `--learn-while-playing` too: 10M steps in {envs['hours_per_10m_steps']:.2f} hours, "
        f"and **{envs['hours_per_10m_steps'] + evaluations:.2f} hours** with 40 evaluations of 10 games "
        f"({evaluation['10 workers']['seconds']:.1f} s each, their machines in 10 workers; "
        f"{10_000_000 / plain / 3600 + evaluations:.2f} hours without `--learn-while-playing`)"
    ) in readme


def test_the_docs_show_the_committed_h200_rounds_beside_cleanrl():
    """Run 9's table of our loop beside CleanRL's in docs/results.md is bench.py --gpu-report of its JSON, each
    round's figure the one its log printed as the round ended, and the ratios docs/gpu.md and the README quote,
    with run 8's one round for the five, are the rounds'."""
    run = ROOT / "results/gpu/h200-run9"
    check = json.loads((run / "gpu_check.json").read_text())
    assert check["host"]["gpu"].startswith("NVIDIA H200") and check["host"]["commit"].startswith("86e332c")
    figures = check["bench"]
    assert utils_results.gpu_tables(figures) in (ROOT / "docs" / "results.md").read_text()
    cleanrl = figures["cleanrl"]  # bench.run_gpu_cleanrl's rounds and its ratios of them
    rounds, times = cleanrl["sps_rounds"], "\N{MULTIPLICATION SIGN}"
    logged = [line for line in (run / "gpu_check.log").read_text().splitlines() if line.endswith(" steps/s")]
    assert logged == [f"{name}: {values[i]:.1f} steps/s" for i in range(4) for name, values in rounds.items()]
    ratio = {name: f"{value:.2f}{times}" for name, value in cleanrl["ours_over"].items()}
    spread = {name: f"{min(each):.2f} to {max(each):.2f}" for name, each in cleanrl["ours_over_rounds"].items()}
    gpu = " ".join((ROOT / "docs" / "gpu.md").read_text().split())
    assert f"**{ratio['CleanRL']}** (each round {spread['CleanRL']})" in gpu
    plain = "CleanRL, --no-torch-deterministic"
    assert f"and {ratio[plain]} ({spread[plain]}) without `--torch-deterministic`" in gpu
    run8 = [line.split(": ") for line in (ROOT / "results/gpu/h200-run8/cleanrl.log").read_text().splitlines()]
    five = {name: statistics.mean([*rounds[name], float(figure.split()[0])]) for name, figure in run8}
    ours = five["ours, 1 game"]
    assert f"five rounds: {ours / five['CleanRL']:.2f}{times} and {ours / five[plain]:.2f}{times}" in gpu
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert f"{ratio['CleanRL']} on an H200 (four rounds, {spread['CleanRL']})" in readme


def test_a_rounds_parts_are_the_loops_own_calls_timed_in_place():
    """round_parts times the loop's batched action, its rounds of play and its learning steps where main.py calls
    them, from the first learning step to the last call; what is left is the rest of the round. The GPU check's
    table shows them, and an evaluation's time with the hours of 10M steps and 40 evaluations at the fastest."""
    parts = bench.round_parts(envs=2, workers=0, steps=64, learning_starts=32, memory_size=10_000)
    assert set(parts) == {"action", "play", "learning", "rest"}
    assert all(value > 0 for value in parts.values()), parts
    envs = {"sps": {"1 games, 0 workers": 1.0}, "sps_rounds": {"1 games, 0 workers": [1.0]},
            "fastest": "1 games, 0 workers", "hours_per_10m_steps": 1.0, "settings": {"device": "cpu"},
            "round_parts_ms": {"envs": 2, "workers": 0, **parts}}  # fmt: skip
    evaluation = {"agent_step": 1_250_000, "0 workers": {"seconds": 90.0, "steps": 30_000, "scores": [1.0] * 10,
                  "hours_per_40": 1.0}, "10 workers": {"seconds": 36.0, "steps": 30_000, "scores": [1.0] * 10,
                  "hours_per_40": 0.4}}  # fmt: skip
    table = utils_results.gpu_tables({"envs": envs, "evaluation": evaluation})
    assert f"| a round of 2 games over 0 workers: learning (ms) | {parts['learning']:.2f} |" in table
    assert (
        "| an evaluation of the agent of step 1,250,000 (10 games, 30,000 steps), 10 workers: seconds | 36.0 |" in table
    )
    assert table.endswith("| 10M steps with 40 such evaluations, hours | 1.40 |")


def test_cleanrl_steps_per_second_are_dated_from_its_sps_lines(tmp_path):
    """CleanRL prints global_step / seconds since its start every 100 steps once learning: a stand-in
    that runs 1,000 steps/s before learning and 250 after gives 250 between its first and last line."""
    script = tmp_path / "dqn_atari.py"
    script.write_text(
        "import sys\n"
        "steps = int(sys.argv[sys.argv.index('--total-timesteps') + 1])\n"
        "start = int(sys.argv[sys.argv.index('--learning-starts') + 1])\n"
        "for step in range(start + 100, steps, 100):\n"
        "    print('SPS:', int(step / (start / 1000 + (step - start) / 250)))\n"
    )
    assert bench.cleanrl_sps(script, None, 20_000, 4_000, 1000) == pytest.approx(250, rel=0.01)
    script.write_text("raise SystemExit('no such env')\n")
    with pytest.raises(RuntimeError, match="no such env"):
        bench.cleanrl_sps(script, None, 20_000, 4_000, 1000)


def test_the_cleanrl_part_alternates_both_of_cleanrls_loops_with_ours_and_tables_them(tmp_path, monkeypatch):
    """The GPU check's cleanrl part times CleanRL's loop as it runs by default and with --no-torch-deterministic (a
    stand-in at 250 and 300 steps/s once learning) beside our loop at one game (a stand-in at 600): each round's
    steps/s, ours over each of theirs, the table's rows of them, and as many rounds as asked."""
    script = tmp_path / "dqn_atari.py"
    script.write_text(
        "import sys\n"
        "steps = int(sys.argv[sys.argv.index('--total-timesteps') + 1])\n"
        "start = int(sys.argv[sys.argv.index('--learning-starts') + 1])\n"
        "rate = 300 if '--no-torch-deterministic' in sys.argv else 250\n"
        "for step in range(start + 100, steps, 100):\n"
        "    print('SPS:', int(step / (start / 1000 + (step - start) / rate)))\n"
    )
    loops = []
    monkeypatch.setattr(bench, "bench_loop", lambda *args: loops.append(args) or main.TrainSummary(0, 12_000, 600.0))
    figures = bench.run_gpu_cleanrl(script, None, quick=True)
    assert len(loops) == 1 and "--envs" not in loops[0][-1]  # one game, as main.py plays by default
    assert figures["sps"]["ours, 1 game"] == 600.0
    assert figures["sps"]["CleanRL"] == pytest.approx(250, rel=0.02)
    assert figures["sps"]["CleanRL, --no-torch-deterministic"] == pytest.approx(300, rel=0.02)
    assert figures["ours_over"]["CleanRL"] == pytest.approx(2.4, rel=0.02)
    table = utils_results.gpu_tables({"cleanrl": figures})
    assert "| ours, 1 game | 600 (600) |" in table
    ratio = figures["ours_over"]["CleanRL, --no-torch-deterministic"]
    assert table.endswith(f"| ours over CleanRL, --no-torch-deterministic | {ratio:.2f} ({ratio:.2f}) |")
    figures = bench.run_gpu_cleanrl(script, None, quick=False, rounds=2)  # --cleanrl-rounds 2
    assert len(loops) == 3 and all(len(values) == 2 for values in figures["sps_rounds"].values())


def test_the_docs_show_the_main_jobs_tables_as_its_committed_files_give_them():
    """docs/results.md's tables of the 10M-step Breakout run are `bench.py --main-job`'s, from the committed files,
    and the table beside the references is their first."""
    report = utils_results.main_job_report()
    text = (ROOT / "docs" / "results.md").read_text()
    shown = text.split("<!-- bench.py --main-job -->\n", 1)[1].split("\n<!-- end of bench.py --main-job -->", 1)[0]
    assert shown == utils_results.main_job_markdown(report)
    assert "(main_job_curve.png)" in text and (ROOT / "docs" / "main_job_curve.png").exists()  # --plot's figure
    readme = (ROOT / "README.md").read_text()
    assert utils_results.main_job_scores_markdown(report) in shown  # the table beside the references
    assert "(docs/main_job_curve.png)" in readme
    assert "(docs/main_job_game.gif)" in readme and (ROOT / "docs" / "main_job_game.gif").exists()  # a released game


# Each released agent (a network alone) and the run folder that trained it, which holds its evaluations.
RELEASED_AGENTS = [("results/breakout-10m/breakout-agent.pt", "results/breakout-10m/attempt-2/Breakout-seed0")]


@pytest.mark.parametrize(("released", "run"), RELEASED_AGENTS)
def test_each_released_agent_loads_as_plain_weights_and_plays_its_evaluations_first_game(released, run):
    """A released agent is plain tensors (torch.load with weights_only=True) of its run's last step and settings,
    evaluated in 30 whole games and in the same 30 cut at Nature's 5 minutes, and is the network those evaluations
    played: its first game (its own seed) scores the same again."""
    checkpoint = torch.load(ROOT / released, weights_only=True)
    config = json.loads((ROOT / run / "config.json").read_text())
    assert set(checkpoint["agent"]) == {"online"} and checkpoint["run"]["step"] == config["steps"]
    assert all(checkpoint["config"][name] == config[name] for name in ("env", "seed", "prioritized", "out"))
    whole, capped = (utils_results.read_playback(ROOT / run / name) for name in utils_results.AGENT_EVALUATIONS)
    for played, frames in ((whole, None), (capped, utils_results.NATURE_GAME_FRAMES)):
        assert (played["step"], played["epsilon"], played["frames"], len(played["scores"])) == (
            config["steps"], 0.05, frames, 30
        )  # fmt: skip
    agent = dqn.load_agent(ROOT / released, device="cpu")
    assert agent.evaluate(episodes=1, epsilon=0.05) == whole["scores"][:1]


def write_attempt(folder, attempt, rewards, games):
    """An attempt's hand-made run folder under the main job's ``folder``: rewards.txt's lines, episodes.csv of
    ``games`` (step, score, length, epsilon, seconds), and config.json of 1,000 steps."""
    return write_run(
        folder / f"attempt-{attempt}" / "Breakout-seed0",
        rewards,
        games,
        steps=1000,
        env="ALE/Breakout-v5",
        eval_epsilon=0.05,
    )


def write_run(run, rewards, games, **config):
    """A hand-made run folder ``run``: its rewards.txt, episodes.csv of ``games`` and config.json of ``config``."""
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps(config))
    (run / "rewards.txt").write_text(rewards)
    (run / "episodes.csv").write_text(
        "step,score,length,epsilon,seconds\n" + "".join(",".join(map(str, game)) + "\n" for game in games)
    )
    return run


def test_the_main_job_report_takes_its_figures_from_the_files(tmp_path):
    """Hand-made files of two attempts: each evaluation beside the mean of the 100 training games before it, the
    wall time of each stretch between stops (from its own attempt's episodes.csv), the attempts side by side, and
    the references as the file gives them."""
    folder = tmp_path / "job"
    games = [(step, step / 100, 50, 0.5, step * 0.5) for step in range(100, 1001, 100)]  # 2 steps a second
    write_attempt(folder, 1, "  0        0 1.5 0.5 1.0 2.0 10 5\n  1      500 8.0 2.0 4.0 12.0 10 300\n", games)
    second = [(step, 1.0, 50, 0.9, step * 0.25) for step in (100, 200)]  # 4 steps a second
    write_attempt(folder, 2, "  0        0 3.0 1.0 2.0 4.0 10 5\n", second)
    (folder / "stops.csv").write_text(
        "# comment\nattempt,start_step,stop_step,threads,commit,date,note\n1,0,400,1,abc,d1,first\n"
        "1,400,1000,2,def,d2,\n2,0,250,2,ghi,d3,fresh machine\n"
    )
    (folder / "references.csv").write_text(
        "# c\nname,game,score,spread,runs,frames,optimizer,evaluation,sticky_actions,source\n"
        "Paper,Breakout,10,1,3 seeds,40M,o,e,none,s\n"
    )
    report = utils_results.main_job_report(folder)
    first, latest = report["attempts"]
    assert (first["attempt"], first["step"], first["wall_seconds"]) == (1, 1000, 500.0)
    before, after = first["evaluations"]
    assert before["training_games"] == 0 and math.isnan(before["training_mean"])  # no game ended before step 0
    assert (after["step"], after["training_games"], after["training_mean"]) == (500, 5, 3.0)
    assert [(s["seconds"], s["steps_per_second"]) for s in first["stops"]] == [(200.0, 2.0), (300.0, 2.0)]
    assert first["training_mean"] == 5.5 and report["references"][0]["score"] == 10.0
    assert (latest["attempt"], latest["step"], latest["training_mean"]) == (2, 250, 1.0)  # its stop after its games
    assert [(s["seconds"], s["steps_per_second"]) for s in latest["stops"]] == [(50.0, 5.0)]
    text = utils_results.main_job_markdown(report)
    assert text.startswith(
        "Attempt 1: step 1,000 of 1,000 (0.1 hours of wall time, 138.9 hours per million steps on this machine).\n"
        "Attempt 2: step 250 of 1,000 (0.0 hours of wall time, 69.4 hours per million steps on this machine).\n"
    )
    assert "| 0 | 1.5 ± 0.5 [1, 2] (10 games) | - | 3.0 ± 1.0 [2, 4] (10 games) | - |" in text
    assert "| 500 | 8.0 ± 2.0 [4, 12] (10 games) | 3.0 (5 games) | - | - |" in text
    assert "| attempt 2, evaluation at step 0 | 3.0 ± 1.0 (over its 10 games) |" in text
    assert "| 2 | 0 | 250 | 2 | 0.0 | 5 | ghi | d3 | fresh machine |" in text
    assert "| Paper | 10.0 ± 1.0 | 3 seeds | 40M | o | e | none |" in text
    assert report["agents"] == [] and "released agent" not in text
    figure = utils_results.main_job_figure(folder)  # bench.py --main-job --plot FILE
    for panel in figure.axes:
        assert panel.get_xlim() == (0, 1000)  # the run's whole length, so that the curve shows how far it is
        assert [line.get_ydata()[0] for line in panel.lines if line.get_linestyle() == "--"] == [10.0]
    (legend,) = figure.legends  # one for both panels
    assert [text.get_text() for text in legend.get_texts()] == ["attempt 1", "attempt 2", "Paper, 40M frames"]
    evaluations, training = ([line.get_ydata() for line in panel.lines if line.get_label().startswith("attempt")]
                             for panel in figure.axes)  # fmt: skip
    assert [list(curve) for curve in evaluations] == [[1.5, 8.0], [3.0]]
    assert training[0][-1] == 5.5 and training[1][-1] == 1.0  # the mean of the last 100 games
    # Once released, the agent's 30 games as main.py --evaluate printed them (here 3), kept in the last attempt's
    # folder: whole games (a header from before the cap was printed), then Nature's 5-minute games.
    released = folder / "attempt-2" / "Breakout-seed0"
    (released / "agent_evaluation.txt").write_text(
        "Playing ALE/Breakout-v5 with agent.pt (trained 1000 steps): 3 games, epsilon 0.05\n"
        "Episode #0: reward: 2.0\nEpisode #1: reward: 4.0\nEpisode #2: reward: 6.0\nMean reward over 3 episodes: 4.0\n"
    )
    (released / "agent_evaluation_5min.txt").write_text(
        "Playing ALE/Breakout-v5 with agent.pt (trained 1000 steps): 3 games of up to 18,000 frames, epsilon 0.05\n"
        "Episode #0: reward: 2.0\nEpisode #1: reward: 1.0\nEpisode #2: reward: 6.0\nMean reward over 3 episodes: 3.0\n"
    )
    report = utils_results.main_job_report(folder)
    assert report["agents"] == [
        {"step": 1000, "epsilon": 0.05, "frames": None, "scores": [2.0, 4.0, 6.0]},
        {"step": 1000, "epsilon": 0.05, "frames": 18000, "scores": [2.0, 1.0, 6.0]},
    ]
    text = utils_results.main_job_markdown(report)
    assert (
        "| the released agent (step 1,000), whole games | 4.0 ± 1.6 (over its 3 games) | 1 seed | 0.0M |"
        " Adam 1e-4, Huber | 3 whole games, epsilon 0.05, up to 30 no-op frames | none |"
    ) in text
    assert (
        "| the released agent (step 1,000), Nature's protocol | 3.0 ± 2.2 (over its 3 games) | 1 seed | 0.0M |"
        " Adam 1e-4, Huber | 3 games of up to 5 minutes, epsilon 0.05, up to 30 no-op frames | none |"
    ) in text


def test_the_main_job_report_refuses_an_incomplete_folder_in_one_line(tmp_path, capsys):
    """bench.py --main-job on a folder without stops.csv, with a column missing, or without an attempt: bench.py's
    one-line error and exit status 2, not a traceback; once the folder is whole, the tables."""
    folder = tmp_path / "job"
    folder.mkdir()

    def refused(message: str) -> bool:
        status = bench.main_job_main(folder, None)
        out, err = capsys.readouterr()
        return (status, out, err) == (2, "", f"bench.py: error: {message}\n")

    assert refused(f"cannot read {folder / 'stops.csv'}: No such file or directory")
    (folder / "stops.csv").write_text("attempt,start_step,stop_step\n1,0,100\n")
    assert refused(f"{folder / 'stops.csv'} has no column threads, commit, date, note")
    (folder / "stops.csv").write_text("attempt,start_step,stop_step,threads,commit,date,note\n1,0,100,1,abc,d1,\n")
    assert refused(f"{folder} holds no attempt-K/Breakout-seed0 folder")
    write_attempt(folder, 1, "  0        0 1.5 0.5 1.0 2.0 10 5\n", [(100, 1.0, 50, 0.9, 50.0)])
    assert refused(f"cannot read {folder / 'references.csv'}: No such file or directory")
    (folder / "references.csv").write_text((utils_results.MAIN_JOB / "references.csv").read_text())
    assert bench.main_job_main(folder, None) == 0
    assert capsys.readouterr().out.startswith("Attempt 1: step 100 of 1,000")


def beside_blocks() -> dict[str, tuple[dict, str]]:
    """docs/results.md's tables of runs side by side: for the first run's folder under results/, the report
    `bench.py` makes of the committed files with the flags the block's marker names, and the table the docs show."""
    text = (ROOT / "docs" / "results.md").read_text()
    blocks = {}
    for command, shown in re.findall(
        r"<!-- bench.py (--beside .+?) -->\n(.*?)<!-- end of bench.py --beside -->", text, re.S
    ):
        arguments, _ = bench.parse_args(command.split())
        report = utils_results.beside_report(
            [ROOT / run for run in arguments.beside], arguments.up_to, [ROOT / path for path in arguments.references]
        )
        blocks[arguments.beside[0].relative_to("results").as_posix()] = report, shown
    return blocks


def test_the_docs_show_rainbows_check_beside_the_main_job_as_its_committed_files_give_them():
    """docs/results.md's table of --preset rainbow beside the main job's first 2M steps and Dopamine's published runs
    is `bench.py` of the committed files with the flags its marker names, and its figure is committed."""
    text = (ROOT / "docs" / "results.md").read_text()
    report, shown = beside_blocks()["rainbow-2m/Breakout-seed0"]
    assert shown == utils_results.beside_markdown(report) + "\n" and report["up_to"] == 2_000_000
    assert "| Dopamine JAX DQN, at 8M frames | 38.3 ± 2.9 | 5 seeds | 8M |" in shown  # the published scores beside
    assert "| Dopamine classic DQN, at 8M frames | 16.3 ± 1.8 | 5 seeds | 8M |" in shown  # both of Dopamine's DQNs
    # The preset's row says what it runs and whose each choice is, not "the paper's protocol".
    row = next(line for line in (ROOT / "README.md").read_text().splitlines() if line.startswith("| `rainbow` |"))
    assert "the paper's protocol" not in row and "this project's: the FIRE press" in row
    assert "Dopamine's: a lost life is no terminal" in row and "Dopamine's cross-entropy" in row
    assert "Adam's epsilon is 1e-8 in the defaults" in text and "classic DQN 16.3 ± 1.8" in text
    assert "(rainbow_2m_curve.png)" in text and (ROOT / "docs" / "rainbow_2m_curve.png").exists()


def test_runs_side_by_side_are_cut_at_the_step_asked(tmp_path, capsys):
    """bench.py --beside: each run up to --up-to (by default the first run's --steps), its recipe and evaluation
    epsilon, the step it reached, its last evaluation and training games before the step, its evaluations beside
    the others'; the figure's curves stop at the step; a missing run is one line."""
    evaluations = (
        "  0        0 1.0 0.0 1.0 1.0 10 5\n  1      500 8.0 2.0 4.0 12.0 10 300\n  2     1000 9.0 1.0 8 10 10 9\n"
    )
    short = write_run(
        tmp_path / "rainbow" / "Breakout-seed0", evaluations[: evaluations.index("  2")],
        [(step, step / 100, 50, 0.0, step * 0.5) for step in range(100, 701, 100)],
        steps=500, preset="rainbow", eval_epsilon=0.001, env="ALE/Breakout-v5",
    )  # fmt: skip
    long = write_run(
        tmp_path / "defaults" / "Breakout-seed0", evaluations,
        [(step, 1.0 if step <= 500 else 50.0, 50, 0.1, step * 0.25) for step in range(100, 1001, 100)],
        steps=1000, eval_epsilon=0.05, env="ALE/Breakout-v5", prioritized=True, threads=1,
    )  # fmt: skip
    (long / "agent_evaluation.txt").write_text(  # its released agent's games, of its last step
        "Playing ALE/Breakout-v5 with agent.pt (trained 1000 steps): 3 games, epsilon 0.05\n"
        "Episode #0: reward: 2.0\nEpisode #1: reward: 4.0\nEpisode #2: reward: 6.0\nMean reward over 3 episodes: 4.0\n"
    )
    (long / HEALTH_FILE).write_text(  # its memory's health at its evaluations after step 0
        HEALTH_HEADER
        + "500,10.0,10.0,0.0,0.00025118,1.5,1.25,0.7,3.25,499\n1000,9.0,9.0,1.7e-16,0.0002,2.0,2,1.0,9,996\n"
    )
    report = utils_results.beside_report([short, long])
    assert report["up_to"] == 500 and [run["recipe"] for run in report["runs"]] == ["--preset rainbow", "--prioritized"]
    first, second = report["runs"]
    assert (first["step"], first["training_games"], first["training_mean"]) == (500, 5, 3.0)  # games by step 500
    assert (second["step"], second["training_mean"], second["wall_seconds"]) == (500, 1.0, 125.0)
    assert [row["step"] for row in second["evaluations"]] == [0, 500]  # not its evaluation at step 1000
    assert second["agents"] == []  # nor its agent of step 1000
    text = utils_results.beside_markdown(report)
    assert (
        f"| {short} | --preset rainbow | 500 of 500 | 8.0 ± 2.0 (step 500, 10 games, epsilon 0.001) | 3.0 (5 games) |"
        " - | 138.9 |" in text
    )
    assert f"| {long} | --prioritized | 500 of 500 | 8.0 ± 2.0 (step 500, 10 games, epsilon 0.05) |" in text
    assert (
        "| 500 | 8.0 ± 2.0 [4, 12] (10 games) | 3.0 (5 games) | 8.0 ± 2.0 [4, 12] (10 games) | 1.0 (5 games) |" in text
    )
    assert "| 1,000 |" not in text
    assert text.endswith(
        f"The replay memory of {long} at each evaluation (memory_health.csv):\n\n| step | relative error of the total "
        "| priorities | a new one's | beta | largest weight |\n|---|---|---|---|---|---|\n"
        "| 500 | 0 | 0.000251 to 1.500 | 1.250 | 0.700 | 3.2 |"
    )  # its rows up to the step, and none for the run without the file
    figure = utils_results.beside_figure(report, [short, long])
    evaluation, training = figure.axes
    assert [list(line.get_xdata()) for line in evaluation.lines[:2]] == [[0, 500], [0, 500]]
    assert max(training.lines[2].get_xdata()) == 500 and evaluation.get_xlim() == (0, 500)
    # To its last step, with the published scores of two files (a single run's has no spread).
    references = [tmp_path / "a.csv", tmp_path / "b.csv"]
    header = "name,game,score,spread,runs,frames,optimizer,evaluation,sticky_actions,source\n"
    references[0].write_text(header + "Paper,Breakout,10,1,3 seeds,40M,o,e,none,s\n")
    references[1].write_text(header + "One run,Breakout,7,,1 run,200M,o,e,none,s\n")
    assert bench.beside_main([long], 1000, references, None) == 0
    text = capsys.readouterr().out
    assert "| 1,000 | 9.0 ± 1.0" in text and text.endswith(
        "| 1,000 | 1.7e-16 | 0.000200 to 2.000 | 2.000 | 1.000 | 9.0 |\n"
    )
    assert "| 25.5 (10 games) | 4.0 ± 1.6 (step 1,000, 3 whole games, epsilon 0.05) | 69.4 (1) |" in text
    assert "| Paper | 10.0 ± 1.0 | 3 seeds |" in text and "| One run | 7.0 | 1 run |" in text
    assert bench.beside_main([tmp_path / "none"], None, [], None) == 2
    assert capsys.readouterr() == ("", f"bench.py: error: no run folder {tmp_path / 'none'}\n")
    for flags, message in (
        (["--up-to", "500"], "--up-to STEP goes with --beside and is a positive step"),
        (["--beside", str(long), "--up-to", "0"], "--up-to STEP goes with --beside and is a positive step"),
        (["--references", "r.csv"], "--references goes with --beside"),
        (["--plot", "f.png"], "--plot goes with --main-job or --beside"),
    ):
        with pytest.raises(SystemExit):
            bench.parse_args(flags)
        assert capsys.readouterr().err.endswith(f" error: {message}\n")  # argparse names the program


def test_runs_side_by_side_read_their_files_as_the_rest_of_the_project_does(tmp_path, capsys):
    """bench.py --beside on crafted or old files: a config.json that is not an object or lacks a valid steps, env or
    eval_epsilon, a references CSV with a bad row (not a number, short, not UTF-8, out of range, inf, nan, another
    game) and runs of different games each end in one line naming the file; an old three-column rewards.txt is read;
    "step reached" is the run's step (a finished run's --steps, a run with no finished game its last evaluation's);
    a | or a line break in a name stays in its cell."""
    finished = write_run(
        tmp_path / "a|b" / "Breakout-seed0", "  0        0 1.0 0.0 1.0 1.0 10 5\n  1     3000 4.0 1.0 3 5 10 9\n",
        [(2829, 2.0, 50, 0.1, 30.0)], steps=3000, eval_epsilon=0.05, env="ALE/Breakout-v5",
    )  # fmt: skip
    old = write_run(
        tmp_path / "old" / "Breakout-seed0", "  0        0 1.0\n  1     1500 7.0\n", [], steps=3000, eval_epsilon=0.05,
        env="ALE/Breakout-v5",
    )  # fmt: skip
    references = tmp_path / "references.csv"
    header = "name,game,score,spread,runs,frames,optimizer,evaluation,sticky_actions,source\n"
    references.write_text(header + '"Paper | one\nline",Breakout,10,1,3 seeds,40M,o,e,none,s\n')

    def shown(runs: list, path=None) -> str:
        status = bench.beside_main(runs, None, [path] if path else [], None)
        out, err = capsys.readouterr()
        assert status == 0 and err == "", err
        return out

    def refused(runs: list, message: str, path=None) -> None:
        status = bench.beside_main(runs, None, [path] if path else [], None)
        assert (status, capsys.readouterr()) == (2, ("", f"bench.py: error: {message}\n"))

    out = shown([finished, old], references)
    assert out.startswith("Breakout: 2 runs up to step 3,000.\n")  # the game named
    assert f"| {tmp_path}/a\\|b/Breakout-seed0 | the defaults | 3,000 of 3,000 | 4.0 ± 1.0 (step 3,000," in out
    assert f"| {old} | the defaults | 1,500 of 3,000 | 7.0 (step 1,500, epsilon 0.05; games not logged) |" in out
    assert "| 1,500 | - | - | 7.0 (its spread and games not logged) | - |" in out
    assert "| Paper \\| one line | 10.0 ± 1.0 | 3 seeds |" in out
    config = old / "config.json"
    for text, message in (
        ("[1, 2]", f"{config}: not a run's configuration (a JSON object of its options)"),
        ('{"env": "ALE/Breakout-v5", "eval_epsilon": 0.05}', f"{config}: steps is None, not a run's steps"),
        ('{"steps": 1e3, "env": "x", "eval_epsilon": 0}', f"{config}: steps is 1000.0, not a run's steps"),
        ('{"steps": 10, "eval_epsilon": 0.05}', f"{config}: env is None, not a run's env"),
        ('{"steps": 10, "env": "ALE/Breakout-v5", "eval_epsilon": 7}', f"{config}: eval_epsilon is 7, not a run's "
         "eval_epsilon"),
    ):  # fmt: skip
        config.write_text(text)
        refused([finished, old], message)
    config.write_text('{"steps": 3000, "env": "ALE/Pong-v5", "eval_epsilon": 0.05}')
    refused([finished, old], f"runs of different games ({finished}: Breakout, {old}: Pong): set one game's runs side "
            "by side")  # fmt: skip
    row = f"{references}: row 1 ('Paper')"
    for line, message in (
        ("Paper,Breakout,ten,1,3,40M,o,e,none,s", f"{row}: its score or spread is not a number"),
        ("Paper,Breakout,10,1,3", f"{row}: fewer fields than the header names"),
        ("Paper,Breakout,10,1,3,40M,o,e,none,s,extra", f"{row}: more fields than the header names"),
        ("Paper,Breakout,1e308,1,3,40M,o,e,none,s", f"{row}: 1e308 ± 1 is not a published score (finite, under "
         "1e+09, its spread not negative)"),
        ("Paper,Breakout,-inf,1,3,40M,o,e,none,s", f"{row}: -inf ± 1 is not a published score (finite, under "
         "1e+09, its spread not negative)"),
        ("Paper,Breakout,10,nan,3,40M,o,e,none,s", f"{row}: 10 ± nan is not a published score (finite, under "
         "1e+09, its spread not negative)"),
        ("Paper,Pong,10,1,3,40M,o,e,none,s", f"{row}: a score of 'Pong', not of Breakout, the runs' game"),
    ):  # fmt: skip
        references.write_text(header + line + "\n")
        refused([finished], message, references)
    playback = finished / "agent_evaluation.txt"  # a released agent's games that are not main.py --evaluate's
    for text in ("Episode #0: reward: 2.0\n", "Playing x (trained 10 steps): 1 games, epsilon 0.05\nEpisode #0: reward: x\n",
                 "Playing x (trained 10 steps): 1 games, epsilon nan\nEpisode #0: reward: 1\n"):  # fmt: skip
        playback.write_text(text)
        refused([finished], f"{playback} is not what main.py --evaluate prints (its Playing line, a line per game)")
    playback.unlink()
    references.write_bytes(header.encode() + b"Paper,Breakout,10,1,3,40M,\xff\xfe,e,none,s\n")
    status = bench.beside_main([finished], None, [references], None)
    out, err = capsys.readouterr()
    assert status == 2 and err.startswith(f"bench.py: error: {references} is not a CSV text file (") and out == ""
    assert err.count("\n") == 1


def test_bench_says_when_the_machine_is_loaded(monkeypatch):
    """Speed measured beside other work is not comparable (bench.py --quick printed prioritized replay 1.54 times
    faster than uniform under load): a load average above half the CPUs gets a note, an idle machine none."""
    monkeypatch.setattr(bench, "available_cpus", lambda: 2)
    monkeypatch.setattr(bench.os, "getloadavg", lambda: (2.3, 2.0, 1.0))
    assert bench.load_note() == (
        "this machine is loaded (load average 2.3 over 2 CPUs) before bench.py starts: figures measured now are not "
        "to be compared with others; measure on an idle machine"
    )
    monkeypatch.setattr(bench.os, "getloadavg", lambda: (0.4, 2.0, 1.0))
    assert bench.load_note() is None


def test_the_docs_show_the_games_at_once_figures_as_committed():
    """docs/performance.md's tables of games at once are `bench.py --at-once-report` of the committed figures."""
    text = (ROOT / "docs" / "performance.md").read_text()
    blocks = re.findall(
        r"<!-- bench.py --at-once-report (\S+) -->\n(.*?)\n<!-- end of bench.py --at-once-report -->", text, re.S
    )
    assert [path for path, _ in blocks][:1] == ["results/at-once/cpu.json"]  # and any later run's, each its own
    for path, shown in blocks:
        assert shown == utils_results.at_once_markdown(json.loads((ROOT / path).read_text())), path


def test_the_three_full_length_breakout_runs_are_shown_beside_schaul_et_al_as_their_files_give_them():
    """Issue 67's table: the main job (uniform, seed 0, with its released agent), uniform seed 1 and prioritized
    seed 0 (attempt 6 of each, attempt 5's games and further) in docs/results.md are `bench.py --beside` of the
    committed files, beside references.csv's and Schaul et al.'s figures; the README shows the same table of where
    they stand, and the figure of both memories."""
    report, shown = beside_blocks()["breakout-10m/attempt-2/Breakout-seed0"]
    assert shown == utils_results.beside_markdown(report) + "\n"
    assert [(run["name"], run["recipe"], run["threads"]) for run in report["runs"]] == [
        ("breakout-10m/attempt-2/Breakout-seed0", "the defaults", 2),
        ("breakout-10m/uniform/attempt-6/Breakout-seed1", "the defaults", 1),
        ("breakout-10m/prioritized/attempt-6/Breakout-seed0", "--prioritized", 1),
    ]
    for run in report["runs"][1:]:  # an attempt is shown once it has gone past every earlier one's last games
        memory, attempt, seed = run["name"].removeprefix("breakout-10m/").split("/")
        folder = ROOT / "results" / "breakout-10m" / memory  # attempt 1's run has no attempt-K level
        earlier = BOTH_MEMORIES_LATER_ATTEMPTS[: BOTH_MEMORIES_LATER_ATTEMPTS.index(attempt)]
        for run_folder in [folder / seed, *(folder / name / seed for name in earlier)]:
            assert run["step"] > read_episodes(run_folder / "episodes.csv")[-1, 0], run_folder
    assert "355.2 ± 74.3 (step 10,000,000, 30 games of up to 5 minutes, epsilon 0.05)" in shown  # Nature's protocol
    assert "| Mnih et al. (2015) | 401.2 ± 26.9 |" in shown
    assert "| 3,000,000 | 2e-16 | 0.000251 to 6.481 | 5.738 | 0.580 | 59.6 |" in shown  # the memory's health
    for name, score in (("DQN, uniform replay", "303.9"), ("Double DQN (tuned), uniform replay", "368.9"),
                        ("Double DQN (tuned), proportional prioritized replay", "371.6")):  # fmt: skip
        assert f"| Schaul et al. (2016): {name} | {score} | 1 run | 200M |" in shown
    readme = (ROOT / "README.md").read_text()
    assert utils_results.beside_scores_markdown(report) in readme
    assert "(docs/both_memories_curve.png)" in readme and (ROOT / "docs" / "both_memories_curve.png").exists()


# Issue 67's two runs (memory, seed folder), and its attempts after the first, each from step 0 on a machine that had
# lost the one before (folders attempt-K between the two; the stops file must name exactly these).
BOTH_MEMORIES_RUNS = (("prioritized", "Breakout-seed0"), ("uniform", "Breakout-seed1"))
BOTH_MEMORIES_LATER_ATTEMPTS = tuple(
    sorted(
        (path.name for path in (ROOT / "results" / "breakout-10m" / "prioritized").glob("attempt-*")),
        key=lambda name: int(name.removeprefix("attempt-")),
    )
)


def test_both_memories_runs_are_what_their_stops_file_says_and_the_prioritized_memory_stayed_exact():
    """Issue 67's two runs beside the main job: each attempt (a folder of its own) starts at step 0 and each stretch
    of the stops file where the one before stopped; each run's committed files are its command's (the memory, the
    seed, 10M steps, the stops' thread count, its folder) and go no further than its last stop; the prioritized
    run's memory-health log has a line at each evaluation after step 0 whose sum tree equals its leaves summed
    again."""
    folder = ROOT / "results" / "breakout-10m"
    lines = [line for line in (folder / "both-memories-stops.csv").read_text().splitlines() if not line.startswith("#")]
    stretches: dict[str, list[dict[str, str]]] = {}
    for row in csv.DictReader(lines):
        stretches.setdefault(row["run"], []).append(row)
    assert set(stretches) == {f"{memory}/{seed}" for memory, seed in BOTH_MEMORIES_RUNS} | {
        f"{memory}/{attempt}/{seed}" for memory, seed in BOTH_MEMORIES_RUNS for attempt in BOTH_MEMORIES_LATER_ATTEMPTS
    }
    for run, rows in stretches.items():
        memory, *attempt, seed = run.split("/")  # attempt 1's folder has no attempt-K level
        assert rows[0]["start_step"] == "0" and {row["attempt"] for row in rows} == {
            attempt[0].removeprefix("attempt-") if attempt else "1"
        }
        for before, after in itertools.pairwise(rows):
            assert after["start_step"] == before["stop_step"]
        config = json.loads((folder / run / "config.json").read_text())
        assert config["prioritized"] == (memory == "prioritized") and f"Breakout-seed{config['seed']}" == seed
        assert (config["steps"], config["threads"], config["out"]) == (
            10_000_000,
            int(rows[-1]["threads"]),
            f"results/breakout-10m/{run}",
        )
        evaluations = [step for _, (step, *_) in read_rewards(folder / run / "rewards.txt")]
        assert evaluations == list(range(0, evaluations[-1] + 1, 250_000)) and evaluations[-1] <= int(
            rows[-1]["stop_step"]
        )
        if memory == "prioritized":
            health = read_log(folder / run / HEALTH_FILE, HEALTH_HEADER)
            assert health[:, 0].tolist() == evaluations[1:]
            # The tree's pairwise sums against the exactly rounded sum of its leaves: within a few units in the last
            # place (pairwise rounding, at most about log2(2**20) of them), where drift would grow with the updates.
            assert (health[:, 3] < 1e-14).all()


def played(run: Path) -> tuple[list, list]:
    """A run's training games (step, score, length, epsilon: all but the seconds) and evaluations (all but the
    seconds)."""
    games = read_episodes(run / "episodes.csv")[:, :4].tolist()
    return games, [values[:-1] for _, values in read_rewards(run / "rewards.txt")]


@pytest.mark.parametrize("attempt", BOTH_MEMORIES_LATER_ATTEMPTS)
def test_each_later_attempt_repeats_the_one_before_or_the_first_commit_on_its_machine(attempt):
    """Each later attempt runs the same command from step 0 on frozen code (the stops file names the commit), on a
    fresh machine that had lost the attempt before it (where each stopped: the stops file). One thread's training is
    deterministic on one kind of processor and attempt 1's resumes (eight each, one after an out-of-memory kill) were
    exact, so wherever an attempt and the one before it have gone their games, evaluations and memory health are the
    same to the last digit, bar the wall-clock seconds. A processor that computes floats otherwise (attempt 5's, 7's)
    plays the attempt before's games only until the first learning steps: a check beside the attempt, attempt 1's
    command on attempt 1's commit run on that machine, shows the attempt's games are those. A later commit's
    configuration may add only what it records beside the settings, tracking off."""
    folder = ROOT / "results" / "breakout-10m"
    position = BOTH_MEMORIES_LATER_ATTEMPTS.index(attempt)
    for memory, seed in BOTH_MEMORIES_RUNS:
        first_attempt = folder / memory / seed  # attempt 1's folder has no attempt-K level
        before = folder / memory / BOTH_MEMORIES_LATER_ATTEMPTS[position - 1] / seed if position else first_attempt
        later = folder / memory / attempt / seed
        runs = before, later
        first, second = (json.loads((run / "config.json").read_text()) for run in (first_attempt, later))
        assert {**first, "out": None} == {key: second[key] for key in first} | {"out": None}
        assert set(second) - set(first) <= {"track", "versions", "wandb_entity", "wandb_project_name"}
        assert not second.get("track")
        games, evaluations = zip(*(played(run) for run in runs), strict=True)
        check = folder / memory / attempt / f"check-34b029f-{seed}"
        if check.exists():
            # Run without --save-memory --keep-checkpoints 2, which decide only what stays on disk.
            kept = {"out": None, "save_memory": True, "keep_checkpoints": 2}
            assert {**json.loads((check / "config.json").read_text()), **kept} == {**first, **kept}
            parted = next(index for index, (one, other) in enumerate(zip(*games, strict=False)) if one != other)
            assert games[1][parted][0] > first["learning_starts"]  # the random steps' games are the same
            check_games, check_evaluations = played(check)
            assert len(check_games) > parted + 5  # several games past the parting
            compared = [(games[1], check_games), (evaluations[1], check_evaluations)]
        else:
            compared = [games, evaluations]
            if memory == "prioritized":
                compared.append([read_log(run / HEALTH_FILE, HEALTH_HEADER).tolist() for run in runs])
        for earlier_rows, later_rows in compared:
            shared = min(len(earlier_rows), len(later_rows))
            assert earlier_rows[:shared] == later_rows[:shared]
        assert len(games[1]) > 400 and len(evaluations[1]) >= 3  # past the first evaluations of a learning agent
