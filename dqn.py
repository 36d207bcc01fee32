"""The Python API: load a trained agent and act, evaluate it, train as the command line does.

from dqn_atari import dqn
agent = dqn.load_agent("runs/Pong-seed0")             # a run folder (its newest checkpoint) or a model_NNN.pt
agent.save("pong-agent.pt")                           # the network alone, to release (load_agent plays it)
env = agent.make_env(seed=1)                          # its game, as a gymnasium environment
observation, info = env.reset()
observation, reward, terminated, truncated, info = env.step(agent.act(observation))

run = dqn.train(env="Pong", preset="cleanrl-short", steps=3000, out="runs/pong")  # main.py's flags as arguments
run.folder, run.agent                                 # the run folder and its trained agent
dqn.train(env="Pong", callback=lambda event: not (event.kind == "evaluation" and min(event.scores) > 20))
                                                      # called at each game, evaluation, checkpoint: False stops
dqn.train(env="MinAtar/Breakout-v1", network="minatar")  # any gymnasium environment: an id, or gymnasium.make's env
gymnasium.make("dqn/Atari-v0", game="Pong")          # the Atari environment alone, registered with gymnasium
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import gymnasium
import numpy as np

from dqn_atari import main
from dqn_atari.utils_config import (
    EVAL_ENVS,
    build_parser,
    device_problem,
    parse_config,
    pick_device,
    refusals_as_value_errors,
    saved_playback_options,
)
from dqn_atari.utils_drl import Agent
from dqn_atari.utils_env import (
    FRAME_SIZE,
    STACK_DEPTH,
    AtariGymEnv,
    GymEnv,
    env_label,
    episode_steps,
    evaluate,
    is_atari,
    make_gym_env,
    register_plugin_envs,
    saved_env_refusal,
)
from dqn_atari.utils_run import playable_checkpoint, save_checkpoint
from dqn_atari.utils_types import RunEvent

gymnasium.register(id="dqn/Atari-v0", entry_point="dqn_atari.utils_env:AtariGymEnv")
register_plugin_envs()  # installed packages' ids (MinAtar's), which gymnasium.make does not load by itself
OBSERVATION_SHAPE = (STACK_DEPTH, FRAME_SIZE, FRAME_SIZE)


class TrainedAgent:
    """A checkpoint's network, acting on the observations of its environment (``make_env``). An environment that
    names code (``module:Class``, an environment object's spec) is made only with ``trust_env=True``."""

    def __init__(self, checkpoint: dict[str, Any], device: str = "auto", trust_env: bool = False) -> None:
        untrusted = saved_env_refusal(str(checkpoint["config"].get("env", "")))
        if untrusted and trust_env is not True:
            raise ValueError(f"{untrusted}: pass trust_env=True if you trust where the checkpoint came from")
        # Checked as --evaluate checks it; options newer than the run: defaults.
        self.config = saved_playback_options(checkpoint["config"], trusted_env=trust_env is True)
        self.step: int = checkpoint["run"]["step"]
        self._saved_config = checkpoint["config"]  # as the run wrote it, for save
        self._saved_versions = checkpoint.get("versions")  # what it was trained on (none in older runs), for save
        game = main.make_env(self.config, 0)
        self.n_actions = game.n_actions
        # A gymnasium environment's observations become the agent's states as in training.
        self._gym_env = game if isinstance(game, GymEnv) else None
        self.observation_shape = game.env.observation_space.shape if self._gym_env else OBSERVATION_SHAPE
        problem = device_problem(device)
        if problem:
            raise ValueError(f"device {device!r}: {problem}")
        self._agent = Agent(self.n_actions, pick_device(device), seed=0, **main.agent_options(self.config, game))
        self._agent.load_online(checkpoint["agent"].get("online"))
        self._rng = np.random.default_rng(0)

    def act(self, observation: np.ndarray, epsilon: float = 0.0) -> int:
        """The greedy action for an observation of ``make_env``'s environment (an Atari game's: a
        (4, 84, 84) uint8 frame stack); with probability ``epsilon`` a random one (the run's
        evaluation protocol: ``epsilon=agent.config.eval_epsilon``). Anything else raises
        ValueError: frames scaled to [0, 1] would silently become black ones."""
        frames = np.asarray(observation)
        if frames.shape != self.observation_shape:
            raise ValueError(
                f"an observation is a {self.observation_shape} array (make_env's), got shape {frames.shape}"
            )
        check_epsilon(epsilon)
        if self._gym_env is not None:  # (which refuses values off the observation space's dtype and range)
            return self._agent.act(self._gym_env.state(frames), epsilon, self._rng, noise=False)
        if frames.dtype != np.uint8:
            whole = np.issubdtype(frames.dtype, np.number) and np.array_equal(frames, np.round(frames))
            if not (whole and frames.min() >= 0 and frames.max() <= 255):
                raise ValueError(f"an observation holds uint8 pixels, 0 to 255; got {frames.dtype} values")
            frames = frames.astype(np.uint8)
        return self._agent.act(frames, epsilon, self._rng, noise=False)

    def save(self, path: str | Path) -> None:
        """Write the network alone, with the run's settings, step and versions, as a checkpoint that ``load_agent`` and
        ``main.py --evaluate`` play (about 7 MB for the Nature network; no optimizer, target network, generators or
        games in progress, so it cannot resume training): the file to release a trained agent as. Plain tensors
        and values, loadable with ``torch.load(path, weights_only=True)``; written atomically."""
        online = {name: tensor.detach().cpu().clone() for name, tensor in self._agent.online.state_dict().items()}
        versions = {"versions": self._saved_versions} if isinstance(self._saved_versions, dict) else {}
        save_checkpoint(
            Path(path),
            {"config": self._saved_config, "run": {"step": self.step}, "agent": {"online": online}, **versions},
        )

    def env_options(self) -> dict[str, Any]:
        """The run's Atari game settings (sticky actions, frame limit, no-op starts, ...), but its id and seed."""
        options = main.env_options(self.config)
        del options["env_id"]
        return options

    def make_env(self, seed: int = 0, render_mode: str | None = None, **overrides: Any) -> gymnasium.Env:
        """The run's game with the run's settings (``overrides`` change an Atari game's, e.g.
        sticky_actions=0.25, but not the actions the network chooses from); another gymnasium
        environment as the run made it (its episodes cut as the run's were), its random state seeded with ``seed``."""
        if self._gym_env is not None:
            if overrides:
                raise ValueError(
                    f"{', '.join(overrides)}: Atari game settings; {env_label(self.config.env)} is not one"
                )
            env = make_gym_env(self.config.env, render_mode, episode_steps(self.config.max_episode_frames))
            env.reset(seed=seed)  # gymnasium seeds at a reset: the episodes of later resets follow from it
            return env
        if overrides.get("full_action_space", self.config.full_action_space) != self.config.full_action_space:
            raise ValueError(
                f"full_action_space: the network chooses among the actions it was trained on ({self.n_actions})"
            )
        options = {**self.env_options(), **overrides}
        return AtariGymEnv(self.config.env, seed, render_mode, main.stack_rule(self.config), **options)

    def evaluate(
        self, episodes: int = 10, seed: int = 0, epsilon: float | None = None, envs: int = EVAL_ENVS
    ) -> list[float]:
        """Whole games with the run's evaluation protocol (its --eval-epsilon unless given), each on a game of its
        own seeded by (``seed``, its number), ``envs`` at a time (the same games however many): their raw scores,
        in the games' order."""
        if not isinstance(episodes, int) or episodes < 1:
            raise ValueError(f"episodes must be a whole number of 1 or more, got {episodes!r}")
        if not isinstance(envs, int) or envs < 1:
            raise ValueError(f"envs must be a whole number of 1 or more, got {envs!r}")
        epsilon = self.config.eval_epsilon if epsilon is None else epsilon
        check_epsilon(epsilon)
        games = main.seeded_games(self.config, [seed], render=False)
        rule = main.stack_rule(self.config, main.make_env(self.config, seed))
        return evaluate(self._agent.act_evaluating, games, episodes, epsilon, envs, stack_rule=rule).scores


def check_epsilon(epsilon: float) -> None:
    """ValueError unless ``epsilon`` is a probability (nan included)."""
    if not 0.0 <= epsilon <= 1.0:
        raise ValueError(f"epsilon must be within [0, 1], got {epsilon}")


def load_agent(path: str | Path, device: str = "auto", trust_env: bool = False) -> TrainedAgent:
    """The agent of a checkpoint file (``model_NNN.pt``, a released agent), of a run folder's newest checkpoint,
    or of the one agent file in a folder that holds no run. ``trust_env``:
    make its environment even when that imports and calls code the checkpoint names (``module:Class``, a spec's
    entry points), which ValueError refuses otherwise: a checkpoint may come from anyone."""
    return TrainedAgent(playable_checkpoint(Path(path))[1], device, trust_env)


class TrainedRun(NamedTuple):
    folder: Path  # the run folder, as main.py leaves it
    agent: TrainedAgent  # its newest checkpoint's agent, ready to act


def train(callback: Callable[[RunEvent], Any] | None = None, **options: Any) -> TrainedRun:
    """Train exactly as ``python main.py`` with these flags (``preset="atari100k"``, ``n_step=3``,
    ``double=True``, ``fire_reset=False``, ``resume="runs/x"``); return the run folder and its
    trained agent. ``env`` is a name or id as ``--env`` takes it, or an environment that
    ``gymnasium.make`` made (wrappers included: its spec, saved in the run's config, makes new ones
    for evaluations and resumes). ``callback(event)`` is called at each finished training game, evaluation and
    checkpoint with a ``RunEvent`` (its kind, step, run folder, scores, checkpoint); returning False stops the
    run as Ctrl-C does (a checkpoint is written; ``resume`` goes on from it) and returns what it has, as
    Stable-Baselines3's callbacks stop by returning False. Bad options raise ValueError with main.py's one line; a
    failed run, or one stopped otherwise, raises RuntimeError."""
    if options.get("evaluate") is not None:
        raise ValueError("evaluate: dqn.train trains; to play a checkpoint, dqn.load_agent(path).evaluate()")
    if isinstance(options.get("env"), gymnasium.Env):
        options["env"] = env_recipe(options["env"])
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
    with refusals_as_value_errors():
        args, checkpoint = parse_config(argv)
    asked_to_stop = False

    def told(event: RunEvent) -> Any:
        nonlocal asked_to_stop
        answer = callback(event)
        asked_to_stop = asked_to_stop or answer is False
        return answer

    summary = main.train(args, checkpoint, told if callback is not None else None)  # none: no event is made
    if summary.exit_code != 0 and not (summary.exit_code == 130 and asked_to_stop):
        raise RuntimeError(f"training stopped with exit status {summary.exit_code}; its reason was printed above")
    return TrainedRun(Path(args.out), load_agent(args.out, trust_env=True))  # its environment: the one given


def env_recipe(env: gymnasium.Env) -> str:
    """What ``--env`` takes to make ``env`` again: its registered id when ``gymnasium.make(id)`` makes it
    as it is, else its spec (id, arguments and wrappers) in JSON."""
    spec = env.spec
    if spec is None:
        raise ValueError(
            "env: an environment object must come from gymnasium.make, whose spec makes new ones for evaluations "
            "and resumes; for a class of your own, pass env='module:Class'"
        )
    try:
        if spec == gymnasium.spec(spec.id) and not is_atari(spec.id):  # an ALE id is this program's own Atari game
            return spec.id
    except gymnasium.error.Error:  # not registered under its id
        pass
    try:
        return spec.to_json()
    except (TypeError, ValueError) as error:  # an argument JSON cannot hold: a function, an array, an object
        raise ValueError(
            f"env: its spec cannot be saved to make it again ({error}); a wrapper given a function "
            "(TransformObservation's) can be a class of your own, in a module: env='module:Class'"
        ) from None
