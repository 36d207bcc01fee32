"""nature_dqn.py, the algorithm in one file, is main.py: the same training games, evaluations and weights, with
either memory; and it refuses what it cannot run, in one line, without touching any file."""

import ast
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from dqn_atari import main, nature_dqn
from dqn_atari.utils_run import HEALTH_FILE, HEALTH_HEADER, load_checkpoint, read_episodes, read_log

ROOT = Path(__file__).resolve().parent.parent
SINGLE_FILE = ROOT / "nature_dqn.py"
# The flags of the comparison, as nature_dqn.py's docstring states them, chosen so that every part acts: a memory of
# 500 steps wraps twice; games are cut at 600 frames; the gradient clip at 0.05 acts on some steps and not others;
# a target sync at step 301 is followed by a learning step at 302 (learning every 2nd step), which a sync one step
# late would see; learning from step 200 on batches of 8 keeps it short.
FLAGS = [
    "--env", "Breakout", "--seed", "0", "--steps", "1200", "--learning-starts", "200", "--train-every", "2",
    "--batch-size", "8", "--memory-size", "500", "--eps-decay-steps", "600", "--target-every", "301",
    "--grad-clip", "0.05", "--max-episode-frames", "600", "--eval-every", "600", "--eval-episodes", "1",
    "--device", "cpu",
]  # fmt: skip
GRAD_CLIP = 0.05


@pytest.mark.parametrize("memory", [[], ["--prioritized"]], ids=["uniform", "prioritized"])
def test_nature_dqn_is_main_py_bit_for_bit_while_every_part_acts(tmp_path, monkeypatch, memory):
    norms, cuts = [], []
    clip = torch.nn.utils.clip_grad_norm_

    def clip_and_record(parameters, most):  # what both programs call: the numbers stay as they are
        norm = clip(parameters, most)
        norms.append(float(norm))
        return norm

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", clip_and_record)
    assert main.main([*FLAGS, *memory, "--threads", "1", "--out", str(tmp_path / "main")]) == 0
    step = nature_dqn.AtariGame.step
    monkeypatch.setattr(nature_dqn.AtariGame, "step", lambda game, action: record_cut(cuts, step(game, action)))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # main.py's --threads 1: the thread count changes the learning step's numerics
    try:
        network = nature_dqn.main([*FLAGS, *memory, "--out", str(tmp_path / "single")])
    finally:
        torch.set_num_threads(threads)
    games = [read_episodes(tmp_path / run / "episodes.csv")[:, :4] for run in ("main", "single")]  # all but seconds
    np.testing.assert_array_equal(*games)
    evaluations = [
        [line.split()[:7] for line in (tmp_path / run / "rewards.txt").read_text().splitlines()]
        for run in ("main", "single")
    ]
    assert [line[:2] for line in evaluations[0]] == [["0", "0"], ["1", "600"], ["2", "1200"]]
    assert evaluations[0] == evaluations[1]  # all but the seconds
    weights = load_checkpoint(tmp_path / "main" / "model_002.pt")["agent"]["online"]  # the network after step 1,200
    assert len(weights) == len(network.state_dict()) == 10
    for theirs, ours in zip(weights.values(), network.state_dict().values(), strict=True):
        assert torch.equal(theirs, ours)
    # ... in a run where every part acts.
    learning_steps = (1200 - 200) // 2
    single_norms = np.array(norms[learning_steps:])
    assert len(norms) == 2 * learning_steps and (single_norms > GRAD_CLIP).any() and (single_norms < GRAD_CLIP).any()
    assert sum(cuts) >= 3  # games cut at the frame limit, whose last steps learning must not draw
    if memory:  # the priorities spread over more than two orders of magnitude
        health = read_log(tmp_path / "main" / HEALTH_FILE, HEALTH_HEADER)
        assert (health[:, 5] > 100 * health[:, 4]).all()


def record_cut(cuts: list[bool], outcome: tuple) -> tuple:
    cuts.append(outcome[4])
    return outcome


NO_CUDA = [] if torch.cuda.is_available() else [(["--device", "cuda"], "--device cuda: Torch not compiled with CUDA")]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--steps", "-5"], "--steps must be 1 or more, got -5"),
        (["--eval-epsilon", "7"], "--eval-epsilon must be within [0, 1], got 7.0"),
        (["--batch-size", "0"], "--batch-size must be 1 or more, got 0"),
        (["--max-episode-frames", "0"], "--max-episode-frames must be at least --noop-max + 68 frames, got 0"),
        (["--eval-episodes", "0"], "--eval-episodes must be 1 or more, got 0"),
        (["--eval-every", "0"], "--eval-every must be 1 or more, got 0"),
        (["--memory-size", "0"], "--memory-size must be 1 or more, got 0"),
        (["--memory-size", "5"], "--memory-size must be more than 5, got 5"),
        (["--noop-max", "0"], "--noop-max must be 1 or more, got 0"),
        (["--learning-starts", "10", "--steps", "10"], "--learning-starts must be from --batch-size to below --steps"),
        (["--lr", "nan"], "--lr must be positive and finite, got nan"),
        (["--alpha", "inf"], "--alpha must be positive and finite, got inf"),
        (["--env", "Nope"], "--env Nope: ALE has no game ALE/Nope-v5"),
        (["--device", "nope"], "--device nope: Expected one of cpu"),
        *NO_CUDA,
    ],
)
def test_nature_dqn_refuses_a_bad_value_in_one_line_before_it_writes_anything(tmp_path, capsys, flags, message):
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as stop:
        nature_dqn.main([*flags, "--out", str(out)])
    assert stop.value.code == 2 and not out.exists()
    assert f"error: {message}" in capsys.readouterr().err.strip().splitlines()[-1]


def test_nature_dqn_never_replaces_a_run_nor_writes_through_a_link(tmp_path, capsys, monkeypatch):
    """A folder that holds a run (this file's or main.py's, or the default --out a first run took) is refused, as is
    a link planted where it writes; a link planted after that check is still never written through ("x")."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "rewards.txt").write_text("  0        0 1.0\n")
    (run / "config.json").write_text("{}\n")
    outside = tmp_path / "outside.txt"
    outside.write_text("someone's file\n")
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "episodes.csv").symlink_to(outside)
    for folder, held in ((run, "rewards.txt, config.json"), (linked, "episodes.csv")):
        with pytest.raises(SystemExit):
            nature_dqn.main(["--out", str(folder)])
        assert f"--out {folder} holds a run ({held}): give a new folder" in capsys.readouterr().err
    assert (run / "rewards.txt").read_text() == "  0        0 1.0\n" and outside.read_text() == "someone's file\n"
    assert sorted(path.name for path in run.iterdir()) == ["config.json", "rewards.txt"]

    monkeypatch.setattr(nature_dqn.os.path, "lexists", lambda path: False)  # the link planted after the check
    with pytest.raises(FileExistsError):
        nature_dqn.main(["--steps", "100", "--learning-starts", "32", "--out", str(linked)])
    assert outside.read_text() == "someone's file\n"


def test_nature_dqn_is_one_short_file_that_states_its_check():
    text = SINGLE_FILE.read_text()
    assert len(text.splitlines()) <= 400
    tree = ast.parse(text)
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert all(node.level == 0 for node in ast.walk(tree) if isinstance(node, ast.ImportFrom))
    packages = {name.split(".")[0] for name in imported}
    project = {path.stem for path in ROOT.glob("*.py")} | {"dqn_atari"}
    assert not packages & project
    assert packages - set(sys.stdlib_module_names) == {"torch", "numpy", "gymnasium", "ale_py"}
    stated = " ".join(line for line in ast.get_docstring(tree).splitlines() if line.startswith("    --"))
    assert stated.split() == FLAGS  # the docstring's flags are the test's
