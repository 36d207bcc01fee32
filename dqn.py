"""The Python API: load a trained agent and act, evaluate it, train as the command line does.

import dqn
agent = dqn.load_agent("runs/Pong-seed0")             # a run folder (its newest checkpoint) or a model_NNN.pt
env = agent.make_env(seed=1)                          # its game, as a gymnasium environment
observation, info = env.reset()
observation, reward, terminated, truncated, info = env.step(agent.act(observation))

dqn.train(env="Pong", preset="cleanrl-short", steps=3000, out="runs/pong")  # main.py's flags as arguments
gymnasium.make("dqn/Atari-v0", game="Pong")          # the environment alone, registered with gymnasium
"""

from __future__ import annotations

import argparse
import contextlib
import io
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np

import main
from utils_config import build_parser, device_problem, parse_config, pick_device
from utils_drl import Agent
from utils_env import FRAME_SIZE, STACK_DEPTH, AtariEnv, AtariGymEnv, evaluate
from utils_run import load_checkpoint, load_newest_checkpoint

gymnasium.register(id="dqn/Atari-v0", entry_point="utils_env:AtariGymEnv")
OBSERVATION_SHAPE = (STACK_DEPTH, FRAME_SIZE, FRAME_SIZE)


class TrainedAgent:
    """A checkpoint's network, acting on the observations of its game (``make_env``)."""

    def __init__(self, checkpoint: dict[str, Any], device: str = "auto") -> None:
        defaults = vars(build_parser().parse_args([]))
        self.config = argparse.Namespace(**{**defaults, **checkpoint["config"]})  # options newer than the run: defaults
        self.step: int = checkpoint["run"]["step"]
        self.n_actions = AtariEnv(self.config.env, 0, **self.env_options()).n_actions
        problem = device_problem(device)
        if problem:
            raise ValueError(f"device {device!r}: {problem}")
        self._agent = Agent(self.n_actions, pick_device(device), seed=0, **main.agent_options(self.config))
        self._agent.online.load_state_dict(checkpoint["agent"]["online"])
        self._rng = np.random.default_rng(0)

    def act(self, observation: np.ndarray, epsilon: float = 0.0) -> int:
        """The greedy action for a (4, 84, 84) uint8 frame stack; with probability ``epsilon`` a
        random one (the run's evaluation protocol: ``epsilon=agent.config.eval_epsilon``). Anything
        else raises ValueError: frames scaled to [0, 1] would silently become black ones."""
        frames = np.asarray(observation)
        if frames.shape != OBSERVATION_SHAPE:
            raise ValueError(
                f"an observation is a {OBSERVATION_SHAPE} frame stack (make_env's), got shape {frames.shape}"
            )
        if frames.dtype != np.uint8:
            whole = np.issubdtype(frames.dtype, np.number) and np.array_equal(frames, np.round(frames))
            if not (whole and frames.min() >= 0 and frames.max() <= 255):
                raise ValueError(f"an observation holds uint8 pixels, 0 to 255; got {frames.dtype} values")
            frames = frames.astype(np.uint8)
        if not 0.0 <= epsilon <= 1.0:  # also refuses nan
            raise ValueError(f"epsilon must be within [0, 1], got {epsilon}")
        return self._agent.act(frames, epsilon, self._rng)

    def env_options(self) -> dict[str, Any]:
        """The run's game settings (sticky actions, frame limit, no-op starts, ...), but its id and seed."""
        options = main.env_options(self.config)
        del options["env_id"]
        return options

    def make_env(self, seed: int = 0, render_mode: str | None = None, **overrides: Any) -> AtariGymEnv:
        """The run's game with the run's settings (``overrides`` change them, e.g. sticky_actions=0.25,
        but not the actions the network chooses from)."""
        if overrides.get("full_action_space", self.config.full_action_space) != self.config.full_action_space:
            raise ValueError(
                f"full_action_space: the network chooses among the actions it was trained on ({self.n_actions})"
            )
        options = {**self.env_options(), **overrides}
        return AtariGymEnv(self.config.env, seed, render_mode, main.stack_rule(self.config), **options)

    def evaluate(self, episodes: int = 10, seed: int = 0, epsilon: float | None = None) -> list[float]:
        """Whole games with the run's evaluation protocol (its --eval-epsilon unless given): their raw scores."""
        if not isinstance(episodes, int) or episodes < 1:
            raise ValueError(f"episodes must be a whole number of 1 or more, got {episodes!r}")
        env = AtariEnv(self.config.env, seed, **self.env_options())
        epsilon = self.config.eval_epsilon if epsilon is None else epsilon
        return evaluate(self.act, env, episodes, epsilon, stack_rule=main.stack_rule(self.config)).scores


def load_agent(path: str | Path, device: str = "auto") -> TrainedAgent:
    """The agent of a checkpoint file (``model_NNN.pt``), or of a run folder's newest checkpoint."""
    path = Path(path)
    checkpoint = load_newest_checkpoint(path)[1] if path.is_dir() else load_checkpoint(path)
    return TrainedAgent(checkpoint, device)


def train(**options: Any) -> Path:
    """Train exactly as ``python main.py`` with these flags (``preset="atari100k"``, ``n_step=3``,
    ``double=True``, ``fire_reset=False``, ``resume="runs/x"``) and return the run folder. Bad
    options raise ValueError with main.py's one line; a failed or stopped run raises RuntimeError."""
    switches = {action.dest for action in build_parser()._actions if isinstance(action, argparse.BooleanOptionalAction)}
    argv: list[str] = []
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif value is False and name in switches:
            argv.append("--no-" + name.replace("_", "-"))  # fire_reset=False: --no-fire-reset
        elif value is not False and value is not None:  # a plain switch's False is its default: no flag
            argv += [flag, str(value)]
    refusal = io.StringIO()
    try:
        with contextlib.redirect_stderr(refusal):
            args, checkpoint = parse_config(argv)
    except SystemExit:
        raise ValueError(refusal.getvalue().strip().split(": error: ", 1)[-1]) from None
    summary = main.train(args, checkpoint)
    if summary.exit_code != 0:
        raise RuntimeError(f"training stopped with exit status {summary.exit_code}; its reason was printed above")
    return Path(args.out)
