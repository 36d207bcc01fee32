"""nature_dqn.py, the algorithm in one file, is main.py: the same training games, evaluations and weights."""

import ast
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from dqn_atari import main, nature_dqn
from dqn_atari.utils_run import load_checkpoint, read_episodes

ROOT = Path(__file__).resolve().parent.parent
SINGLE_FILE = ROOT / "nature_dqn.py"
# The flags of the comparison, as nature_dqn.py's docstring states them: learning from step 1,000 on (every 16th
# step on batches of 8, to keep the test short), a memory that wraps around twice, epsilon at its end from step
# 2,000, target syncs every 500 steps, an evaluation every 2,500.
FLAGS = [
    "--env", "Breakout", "--seed", "0", "--steps", "5000", "--learning-starts", "1000", "--train-every", "16",
    "--batch-size", "8", "--memory-size", "2000", "--eps-decay-steps", "2000", "--target-every", "500", "--eval-every", "2500",
    "--eval-episodes", "1", "--device", "cpu",
]  # fmt: skip
LEARNING_STARTS, EPSILON_ENDS = 1000, 2000


@pytest.mark.slow
def test_nature_dqn_plays_main_pys_training_games_and_evaluations(tmp_path):
    assert main.main([*FLAGS, "--threads", "1", "--out", str(tmp_path / "main")]) == 0
    torch.set_num_threads(1)  # main.py's --threads 1: the thread count changes the learning step's numerics
    network = nature_dqn.main([*FLAGS, "--out", str(tmp_path / "single")])
    games = [read_episodes(tmp_path / run / "episodes.csv")[:, :4] for run in ("main", "single")]  # all but seconds
    np.testing.assert_array_equal(*games)
    steps = games[0][:, 0]
    assert steps[-1] > 4500 and np.sum(steps > LEARNING_STARTS) >= 15 and np.sum(steps > EPSILON_ENDS) >= 10
    evaluations = [
        [line.split()[:7] for line in (tmp_path / run / "rewards.txt").read_text().splitlines()]
        for run in ("main", "single")
    ]
    assert [line[:2] for line in evaluations[0]] == [["0", "0"], ["1", "2500"], ["2", "5000"]]
    assert evaluations[0] == evaluations[1]  # all but the seconds
    weights = load_checkpoint(tmp_path / "main" / "model_002.pt")["agent"]["online"]  # the network after step 5,000
    assert len(weights) == len(network.state_dict()) == 10
    for theirs, ours in zip(weights.values(), network.state_dict().values(), strict=True):
        assert torch.equal(theirs, ours)


def test_nature_dqn_is_one_short_file_that_states_its_check():
    text = SINGLE_FILE.read_text()
    assert len(text.splitlines()) <= 300
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
