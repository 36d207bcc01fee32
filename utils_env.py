"""Atari games with the DQN preprocessing, the frame stack, and evaluation.

Preprocessing follows Mnih et al. (2015) and Machado et al. (2018): each agent step
repeats the action for 4 emulator frames and keeps the pixel-wise max of the last two
(Atari sprites flicker), converts to grayscale and resizes to 84x84 by area averaging. Episodes start
with up to 30 random no-op frames (``noop_max``; or agent steps, ``noop_unit``), FIRE is pressed after
a reset and after each lost life in games that wait for it (``fire_reset``), and an episode is cut at
108,000 frames (30 minutes).

Training and evaluation use this one class, so they see identical observations for
identical emulator states; they differ only in what they do with ``StepResult``:
training treats a lost life as terminal and clips rewards, evaluation plays whole games
and reports the raw score.

Any other gymnasium environment with image observations and discrete actions plays through
``GymEnv``, which gives it the same surface (``--env MinAtar/Breakout-v1``, ``--env module:Class``).
"""

from __future__ import annotations

import difflib
import functools
import importlib
import importlib.metadata
import json
import math
import re
import shutil
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import ale_py
import gymnasium as gym
import numpy as np
import torch
from gymnasium.envs.registration import EnvSpec
from gymnasium.wrappers import FrameStackObservation, TimeLimit
from PIL import Image
from tqdm import tqdm

from dqn_atari.utils_types import NATURE_STACKS, EvalResult, FinishedGames, GameResult, StackRule, StepResult

if TYPE_CHECKING:
    from dqn_atari.utils_memory import ReplayMemory

gym.register_envs(ale_py)

FRAME_SIZE = 84
STACK_DEPTH = 4
FRAME_SKIP = 4
NOOP_UNITS = ("frames", "steps")  # what --noop-max counts: emulator frames, or agent steps of FRAME_SKIP frames


ALE_ENTRY_POINT = "ale_py.env:AtariEnv"


def _ale_ids() -> list[str]:
    return sorted(k for k in gym.registry if k.startswith("ALE/") and k.endswith("-v5"))


def ale_games() -> dict[str, str]:
    """Each registered ALE game's squashed name (``game_key``) -> its ALE/<Game>-v5 id."""
    return {_squash(game_name(i)): i for i in _ale_ids()}


def game_key(name: str) -> str:
    """A game's name or ALE/<Game>-v5 id as ``ale_games`` keys it: 'space_invaders', 'SpaceInvaders' alike."""
    return _squash(name.removeprefix("ALE/").removesuffix("-v5"))


def _squash(name: str) -> str:
    return name.lower().replace("_", "").replace("-", "").replace(" ", "")


def resolve_env_id(name: str) -> str:
    """Map 'Breakout', 'space_invaders', 'ALE/Breakout-v5' or ALE's older ids ('BreakoutNoFrameskip-v4':
    the same game, played as this module plays it) to a registered ALE id; any other
    registered gymnasium id ('MinAtar/Breakout-v1'), a 'module:Class' that makes an environment, or
    a gymnasium EnvSpec in JSON (what ``dqn.train`` records for an environment object) as it is.

    Raises ValueError with close matches for an unknown name.
    """
    atari = atari_id(name)
    if atari is not None:
        return atari
    if name.startswith("{"):
        try:
            EnvSpec.from_json(name)
        except Exception as error:  # gymnasium raises several kinds for a spec it cannot read
            raise ValueError(f"not a gymnasium EnvSpec in JSON ({type(error).__name__}: {error})") from None
        return name
    if ":" in name:  # imported only when made (make_gym_env): reading a saved run's name runs nothing
        module, _, attribute = name.partition(":")
        if not module or not attribute:
            raise ValueError(f"{name!r}: module:Class names a module and what in it makes the environment")
        return name
    register_plugin_envs()
    if name in gym.registry:
        return atari_id(name) or name  # an ALE id a plugin registered is that game too
    games, key = ale_games(), game_key(name)
    close = difflib.get_close_matches(key, games, n=3, cutoff=0.6)
    hints = [game_name(games[c]) for c in close] + difflib.get_close_matches(name, list(gym.registry), n=3)
    raise ValueError(
        f"unknown environment {name!r}: not an Atari game, a registered gymnasium id, or module:Class"
        + (f"; did you mean {', '.join(hints)}?" if hints else " (Atari games: Breakout, Pong, ...)")
    )


def atari_id(name: str) -> str | None:
    """The registered ALE id of an Atari game's name or id ('Breakout', 'space_invaders', 'ALE/Breakout-v5', ALE's
    older 'BreakoutNoFrameskip-v4': the same game, played as this module plays it), None for any other name. It
    only looks names up in gymnasium's registry: nothing ``name`` names is imported or run."""
    if name in gym.registry and name.startswith("ALE/"):
        return name
    games, key = ale_games(), game_key(name)
    if key in games:
        return games[key]
    spec = gym.registry.get(name)
    legacy_game = spec.kwargs.get("game") if spec is not None and spec.entry_point == ALE_ENTRY_POINT else None
    return games.get(_squash(legacy_game)) if legacy_game else None


def saved_env_id(env: str) -> str:
    """A saved configuration's ``env`` for reports and sweeps, which read folders others may hand over: an Atari
    game as ``resolve_env_id`` names it, anything else as it is, an opaque label (a 'module:Class' is never
    imported, a spec in JSON never made). A report reads numbers: no file in a results folder may run code."""
    return atari_id(env) or env


def ale_id_note(typed: str, sticky_actions: float, full_action_space: bool) -> str | None:
    """For ``--env`` given as one of ALE's registered ids (ALE/Breakout-v5, Breakout-v0): it names the game alone,
    which this program plays with its own preprocessing and flags (recorded as ALE/<Game>-v5 all the same); the
    flags that give the sticky actions and action set ALE registers the id with, where they differ. None for a
    game's name, or when they agree."""
    spec = gym.registry.get(typed)
    if spec is None or spec.entry_point != ALE_ENTRY_POINT:
        return None
    sticky = spec.kwargs.get("repeat_action_probability", 0.25)  # ale-py's AtariEnv defaults
    full = spec.kwargs.get("full_action_space", False)

    def action_set(full: bool) -> tuple[str, str]:
        return (
            ("all 18 actions", "--full-action-space") if full else ("the game's own actions", "--no-full-action-space")
        )

    differences = []  # (as ALE registers it, its flag, this run's flag)
    if sticky != sticky_actions:
        differences.append(
            (f"sticky actions {sticky}", f"--sticky-actions {sticky}", f"--sticky-actions {sticky_actions}")
        )
    if full != full_action_space:
        differences.append((*action_set(full), action_set(full_action_space)[1]))
    if not differences:
        return None
    registered, flags, ours = (" and ".join(part) for part in zip(*differences, strict=True))
    return (
        f"--env {typed} names the game {game_name(resolve_env_id(typed))} alone, played with this program's settings "
        f"({ours}); ALE registers {typed} with {registered}: add {flags} for that protocol"
    )


@functools.cache
def register_plugin_envs() -> None:
    """Register the ids that installed packages declare for gymnasium (MinAtar's, for one): gymnasium
    1.x leaves loading its ``gymnasium.envs`` entry points to its users."""
    for entry in importlib.metadata.entry_points(group="gymnasium.envs"):
        try:
            entry.load()()
        except Exception as error:  # a broken package costs its own ids, not every other name's resolution
            warnings.warn(f"gymnasium environments of {entry.value} not registered: {error}", stacklevel=2)


def env_code(env_id: str) -> list[str]:
    """The code that making ``env_id`` imports and calls, as 'module:attr': a 'module:Class' itself, an EnvSpec's
    entry point and those of its wrappers; none for an Atari game or a registered id. A saved run's environment
    that names code is made only when the user names it again: a folder from elsewhere must not run code here."""
    if not env_id.startswith("{"):
        return [env_id] if ":" in env_id else []
    try:
        spec = json.loads(env_id)
    except ValueError:  # gymnasium cannot read it either, so makes nothing of it
        return []
    wrappers = spec.get("additional_wrappers") if isinstance(spec, dict) else None
    layers = [spec, *(wrappers if isinstance(wrappers, list) else [])]
    return [str(layer["entry_point"]) for layer in layers if isinstance(layer, dict) and layer.get("entry_point")]


def saved_env_refusal(env_id: str) -> str | None:
    """Why a saved run's environment is not made unless the user names it (see ``env_code``), or None."""
    code = env_code(env_id)
    return f"the saved run's environment would import and call {', '.join(code)}" if code else None


def is_atari(env_id: str) -> bool:
    """Whether ``env_id`` (as ``resolve_env_id`` returns it) is an ALE game this module plays itself."""
    return env_id.startswith("ALE/")


def env_label(env_id: str) -> str:
    """``env_id`` for messages: a gymnasium EnvSpec in JSON by its id alone."""
    return json.loads(env_id).get("id", "an environment") if env_id.startswith("{") else env_id


def game_name(env_id: str) -> str:
    """A short name for folders and tables: 'Breakout' for ALE/Breakout-v5, the id with its separators as dashes
    for another environment ('MinAtar-Breakout-v1')."""
    if env_id.startswith("ALE/"):
        return env_id.removeprefix("ALE/").removesuffix("-v5")
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", env_label(env_id)).strip("-")


def area_weights(n_in: int, n_out: int) -> np.ndarray:
    """(n_out, n_in) matrix of area interpolation, OpenCV's INTER_AREA: each output pixel
    averages the input pixels it covers, weighted by the covered fraction of each."""
    scale = n_in / n_out
    edges = np.arange(n_out + 1) * scale
    low = np.maximum(edges[:-1, None], np.arange(n_in)[None, :])
    high = np.minimum(edges[1:, None], np.arange(1, n_in + 1)[None, :])
    return (np.clip(high - low, 0.0, None) / scale).astype(np.float32)


class AtariEnv:
    """One ALE game with DQN preprocessing; ``step`` returns a ``StepResult``."""

    stack_depth = STACK_DEPTH  # the agent's state: the last 4 frames, stacked by FrameStack
    frame_shape = (FRAME_SIZE, FRAME_SIZE)

    def __init__(
        self,
        env_id: str,
        seed: int,
        sticky_actions: float = 0.0,
        max_episode_frames: int = 108_000,
        noop_max: int = 30,
        noop_unit: str = "frames",
        fire_reset: bool = True,
        life_loss_terminal: bool = True,
        full_action_space: bool = False,
    ) -> None:
        if not 0.0 <= sticky_actions <= 1.0:  # also refuses nan
            raise ValueError(f"sticky_actions is a probability, within [0, 1], got {sticky_actions}")
        if noop_unit not in NOOP_UNITS:
            raise ValueError(f"noop_unit must be one of {', '.join(NOOP_UNITS)}, got {noop_unit!r}")
        env = gym.make(
            env_id,
            frameskip=1,
            repeat_action_probability=sticky_actions,
            full_action_space=full_action_space,
            obs_type="grayscale",
            max_num_frames_per_episode=max_episode_frames,
        ).unwrapped
        env.reset(seed=seed)  # seeds the emulator (and its sticky-action RNG)
        self._machine, self._ale = env, env.ale
        self.sticky_actions = sticky_actions
        self._actions = list(env._action_set)
        self.action_meanings: list[str] = env.get_action_meanings()
        self.n_actions = len(self._actions)
        self._fire = (
            self._actions[self.action_meanings.index("FIRE")]
            if fire_reset and "FIRE" in self.action_meanings and self.n_actions >= 3
            else None
        )
        self.max_episode_frames = max_episode_frames
        self.noop_max, self.noop_unit = noop_max, noop_unit
        self.life_loss_terminal = life_loss_terminal
        self._rng = np.random.default_rng(seed)
        self._screens = np.zeros((2, *self._ale.getScreenDims()), dtype=np.uint8)
        self._resize_rows = torch.from_numpy(area_weights(self._screens.shape[1], FRAME_SIZE))
        self._resize_columns = torch.from_numpy(area_weights(self._screens.shape[2], FRAME_SIZE).T.copy())
        self._lives = 0

    def reset(self) -> np.ndarray:
        """Start a new game: random no-ops, then FIRE where needed; return the first frame."""
        ale = self._ale
        ale.reset_game()
        noop = self._actions[0]
        if self.noop_unit == "frames":  # 1 to noop_max emulator frames (Mnih et al. 2015, OpenAI baselines)
            for _ in range(int(self._rng.integers(1, self.noop_max + 1)) if self.noop_max else 0):
                ale.act(noop)
                if ale.game_over(with_truncation=False):
                    ale.reset_game()
            self._grab_screen()
        else:  # 0 to noop_max - 1 agent steps through the frame skip and the max, as Dopamine's runner
            self._grab_screen()  # (atari_100k_runner.py), which starts the game again at a terminal one
            for _ in range(int(self._rng.integers(0, self.noop_max)) if self.noop_max else 0):
                lives = ale.lives()
                self._repeat(noop)
                if ale.game_over(with_truncation=False) or (self.life_loss_terminal and ale.lives() < lives):
                    ale.reset_game()
                    self._grab_screen()
        self._lives = ale.lives()
        if self._fire is not None:
            self._repeat(self._fire)
        return self._frame()

    def reseed(self, seed: int) -> None:
        """Play the next games as ``AtariEnv(seed=seed)`` would play its first ones: the no-op starts' draws, and
        the emulator's random numbers where it draws any (sticky actions: the game is loaded again, a fifth of a
        second). Without sticky actions a reset leaves nothing of the games before it (tests/test_envs.py)."""
        self._rng = np.random.default_rng(seed)
        if self.sticky_actions:
            self._machine.reset(seed=seed)

    def _grab_screen(self) -> None:
        """The current screen as both of the last two, as after a reset."""
        self._ale.getScreenGrayscale(self._screens[0])
        self._screens[1] = self._screens[0]

    def step(self, action: int) -> StepResult:
        reward = self._repeat(self._actions[action])
        ale = self._ale
        terminated = ale.game_over(with_truncation=False)
        lives = ale.lives()
        life_lost = lives < self._lives
        self._lives = lives
        if life_lost and not terminated and self._fire is not None:
            reward += self._repeat(self._fire)
            terminated = ale.game_over(with_truncation=False)
        truncated = not terminated and ale.getEpisodeFrameNumber() >= self.max_episode_frames
        return StepResult(self._frame(), reward, life_lost and self.life_loss_terminal, terminated, truncated)

    @property
    def lives(self) -> int:
        return self._ale.lives()

    def rgb(self) -> np.ndarray:
        """The current screen in colour, (210, 160, 3) uint8, for eval videos."""
        return self._ale.getScreenRGB()

    def get_state(self) -> dict[str, Any]:
        """Everything needed to continue this episode exactly (emulator, RNG, lives). The emulator's
        state is ale-py's own serialisation, plain bytes: nothing in a checkpoint is ever unpickled."""
        return {
            "ale": self._ale.cloneState(include_rng=True).serialize(),
            "rng": self._rng.bit_generator.state,
            "lives": self._lives,
            "screens": self._screens.tobytes(),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Continue the episode of ``get_state``; EmulatorStateError (and the game as it was) when
        the state is not one ``get_state`` wrote, such as the pickled one of older checkpoints."""
        try:
            emulator = ale_py.ALEState(bytes(state["ale"]))
            screens = np.frombuffer(state["screens"], np.uint8).reshape(self._screens.shape)
            rng = np.random.default_rng()
            rng.bit_generator.state = state["rng"]
            lives = int(state["lives"])
            self._ale.restoreState(emulator)
        except Exception as error:  # ale-py raises ValueError or SystemError for bytes it did not write
            raise EmulatorStateError(f"not an emulator state of this program ({type(error).__name__})") from None
        self._rng, self._lives = rng, lives
        self._screens[:] = screens

    def _repeat(self, action: Any) -> float:
        """Play ``action`` for FRAME_SKIP frames, keeping the last two grayscale screens."""
        ale, screens, skip = self._ale, self._screens, FRAME_SKIP
        reward = 0.0
        for k in range(skip):
            reward += ale.act(action)
            if ale.game_over(with_truncation=False):
                ale.getScreenGrayscale(screens[0])
                screens[1] = screens[0]
                break
            if k >= skip - 2:
                ale.getScreenGrayscale(screens[k - skip + 2])
        return reward

    def _frame(self) -> np.ndarray:
        pooled = torch.from_numpy(np.maximum(self._screens[0], self._screens[1])).float()
        # torch rather than numpy matmul: numpy's BLAS threads and torch's fight for the
        # cores when their calls alternate, which made each training step ~10x slower.
        return torch.round(self._resize_rows @ pooled @ self._resize_columns).to(torch.uint8).numpy()


class EmulatorStateError(Exception):
    """A saved game state that cannot be restored; the message says why."""


class EnvironmentFailed(Exception):
    """A gymnasium environment did what a run cannot go on from (raised in ``reset`` or ``step``, gave a reward
    that is not a finite number, an observation of another shape than its space's, no image to render); the
    message says in one line what it did."""


class ObservationError(EnvironmentFailed, ValueError):
    """A gymnasium environment gave an observation that is not what its observation space declares (its shape, its
    dtype, its range): at the first one, a bad --env (ValueError); later, a run that cannot go on."""


GYM_ENV_NOTE = (
    "no-op starts, FIRE presses, lives and a resume within a game are Atari's; "
    "this environment plays as it is made, its episodes cut at --max-episode-frames / 4 steps, and a resumed run "
    "starts a new episode"
)

# The defaults made for Atari games that another environment's run keeps where they are not given: how each reads.
ATARI_DEFAULTS = {
    "learning_starts": "{:,} random steps",
    "eps_decay_steps": "epsilon annealed over {:,} steps",
    "clip_rewards": "rewards clipped to their sign",
}


def atari_defaults_note(options: dict[str, Any], defaults: dict[str, Any]) -> str | None:
    """For a run of another environment than Atari's, without a preset: which of ATARI_DEFAULTS its ``options``
    keep at ``defaults`` (those its user did not change), and the preset made for MinAtar; None if it keeps none."""
    kept = [text.format(options[name]) for name, text in ATARI_DEFAULTS.items() if options[name] == defaults[name]]
    if not kept:
        return None
    return (
        f"these defaults are Atari's ({', '.join(kept)}); for MinAtar's games, --preset minatar gives MinAtar's own "
        "DQN settings"
    )


def episode_steps(max_episode_frames: int) -> int:
    """The step limit of a gymnasium environment's episodes: --max-episode-frames in agent steps of an Atari
    game's FRAME_SKIP frames (its 108,000 frames: 27,000 steps), so that an episode that never ends is cut."""
    return max_episode_frames // FRAME_SKIP


def make_gym_env(env_id: str, render_mode: str | None = None, max_steps: int | None = None) -> gym.Env:
    """The gymnasium environment of ``env_id`` (a registered id, 'module:Class' or an EnvSpec in JSON), its
    episodes cut after ``max_steps`` steps (gymnasium's TimeLimit, outermost); this imports and calls the code
    ``env_id`` names (``env_code``)."""
    if env_id.startswith("{"):
        spec: str | EnvSpec = EnvSpec.from_json(env_id)
        for wrapper in spec.additional_wrappers:  # JSON wrote their tuples (ResizeObservation's shape) as arrays
            wrapper.kwargs = as_tuples(wrapper.kwargs)
    elif ":" in env_id:
        module, _, attribute = env_id.partition(":")
        try:
            found = hasattr(importlib.import_module(module), attribute)
        except ImportError as error:
            raise ValueError(f"{env_id!r}: cannot import {module} ({error})") from None
        if not found:
            raise ValueError(f"{env_id!r}: module {module} has no {attribute}")
        spec = EnvSpec(id=game_name(env_id), entry_point=env_id)
    else:
        register_plugin_envs()
        spec = env_id
    env = gym.make(spec, **({"render_mode": render_mode} if render_mode else {}))  # not every class takes one
    return TimeLimit(env, max_steps) if max_steps else env


def as_tuples(value: Any) -> Any:
    """``value`` with its lists, at any depth, as tuples: gymnasium's wrappers take tuples (a shape), which a
    spec's JSON gives back as lists."""
    if isinstance(value, list):
        return tuple(as_tuples(item) for item in value)
    if isinstance(value, dict):
        return {key: as_tuples(item) for key, item in value.items()}
    return value


def frame_stacker(env: gym.Env) -> FrameStackObservation | None:
    """The ``FrameStackObservation`` whose stacks ``env`` returns as they are, or None: the outermost one
    in the wrapper chain, when no wrapper above it changes observations (an ``ObservationWrapper``, or
    any that changes their space), and when it pads a game's first stack as FrameStack can (with the
    first observation, or zeros)."""
    wrapper = env
    while isinstance(wrapper, gym.Wrapper) and not isinstance(wrapper, gym.ObservationWrapper):
        if isinstance(wrapper, FrameStackObservation):
            stacks_as_returned = wrapper.observation_space == env.observation_space
            return wrapper if stacks_as_returned and wrapper.padding_type in ("reset", "zero") else None
        wrapper = wrapper.env
    return None


class GymEnv:
    """A gymnasium environment with image observations and discrete actions, with ``AtariEnv``'s
    surface: ``reset`` gives a frame, ``step`` a ``StepResult``.

    Observations are uint8 or bool (read as 0 and 255) arrays of 2 axes (one grayscale frame) or 3
    (channels last when the last axis is the smallest, as MinAtar's 10x10x4, else first); frames
    are given to the agent channels first. A uint8 space whose pixels go up to less than 255 (a
    ``Box(0, 1)`` binary image) is scaled to 0-255, as bool frames are read, since the network
    takes 255 as white; an observation off its space's dtype or above its range raises
    ObservationError rather than being cast (float [0, 1) to zeros, int64 modulo 256). When the environment stacks frames with gymnasium's
    ``FrameStackObservation`` (see ``frame_stacker``), a frame is its newest one and the agent's
    FrameStack rebuilds its stacks, so the replay memory keeps one frame per step; otherwise a frame
    is the whole observation, with a stack of one. Episodes are cut (truncated) after ``max_steps``
    steps. A lost life is never terminal here; emulator
    state is not saved (``get_state`` holds nothing, ``set_state`` refuses).
    """

    def __init__(self, env_id: str, seed: int, render: bool = False, max_steps: int | None = None) -> None:
        self.env = make_gym_env(env_id, "rgb_array" if render else None, max_steps)
        self.env_id, self._seed = env_id, seed
        space, actions = self.env.observation_space, self.env.action_space
        if not isinstance(actions, gym.spaces.Discrete):
            raise ValueError(f"actions must be discrete (a Discrete space), not {actions}")
        self.n_actions, self._first_action = int(actions.n), int(actions.start)
        stacker = frame_stacker(self.env)
        self.stack_depth = stacker.stack_size if stacker else 1
        self.stack_rule = StackRule(zero_fill=stacker is not None and stacker.padding_type == "zero")
        shape = (space.shape[1:] if stacker else space.shape) if isinstance(space, gym.spaces.Box) else ()
        if len(shape) not in (2, 3) or space.dtype not in (np.uint8, np.bool_):
            raise ValueError(
                f"observations must be images, a Box of uint8 or bool with 2 axes or 3 (channels first or last), "
                f"not {space}"
            )
        self._channels_last = len(shape) == 3 and shape[-1] < min(shape[:2])
        self.frame_shape: tuple[int, ...] = (shape[2], *shape[:2]) if self._channels_last else tuple(shape)
        self._stacked = stacker is not None
        self._dtype = space.dtype
        self._brightest = int(space.high.max()) if space.dtype == np.uint8 else 1
        self._scale = 255 // max(self._brightest, 1) if space.dtype == np.uint8 else 1

    def frame(self, observation: np.ndarray) -> np.ndarray:
        """The newest frame of an observation, as the replay memory keeps it."""
        observation = self._checked(observation)
        return self._convert(observation[-1] if self._stacked else observation)

    def state(self, observation: np.ndarray) -> np.ndarray:
        """A whole observation as the agent's state: (stack depth, *frame_shape)."""
        observation = self._checked(observation)
        return np.stack([self._convert(frame) for frame in (observation if self._stacked else [observation])])

    def _checked(self, observation: Any) -> np.ndarray:
        """``observation`` as an array, when it holds what the observation space declares: its shape, its dtype
        (a cast would change it silently) and, where frames are scaled, its range (they would wrap around 255)."""
        observation = np.asarray(observation)
        expected = self.env.observation_space.shape
        if observation.shape != expected:
            problem = f"an observation of shape {observation.shape}, its observation space's is {expected}"
        elif observation.dtype != self._dtype:
            problem = (
                f"an observation of {observation.dtype} values, its observation_space declares {self._dtype}: give "
                f"{self._dtype} ones (a cast would change them silently)"
            )
        elif self._scale > 1 and observation.max() > self._brightest:
            problem = (
                f"an observation with a pixel of {observation.max()}, above the {self._brightest} its "
                "observation_space declares"
            )
        else:
            return observation
        raise ObservationError(f"{env_label(self.env_id)} gave {problem}")  # named only now: a spec's is parsed JSON

    def _convert(self, frame: np.ndarray) -> np.ndarray:
        """One observed frame as the agent's uint8, channels first."""
        if frame.dtype == np.bool_:
            frame = frame.view(np.uint8) * np.uint8(255)
        elif self._scale > 1:
            frame = frame * np.uint8(self._scale)
        return np.ascontiguousarray(frame.transpose(2, 0, 1) if self._channels_last else frame)

    def reset(self) -> np.ndarray:
        """A new episode (the first seeded with the seed given); its first frame."""
        observation, _ = self._call("reset", seed=self._seed)
        self._seed = None  # later episodes go on from the environment's own random state
        return self.frame(observation)

    def step(self, action: int) -> StepResult:
        observation, reward, terminated, truncated, _ = self._call("step", action + self._first_action)
        try:
            reward = float(reward)
        except (TypeError, ValueError):
            reward = math.nan
        if not math.isfinite(reward):  # it would end in the logs, and a nan in the memory ends learning
            raise EnvironmentFailed(f"{env_label(self.env_id)} gave a reward of {reward}, not a finite number")
        return StepResult(self.frame(observation), reward, False, bool(terminated), bool(truncated))

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """The environment's ``reset``, ``step`` or ``render``; what it raises, as EnvironmentFailed (in one line)."""
        try:
            return getattr(self.env, method)(*args, **kwargs)
        except Exception as error:  # someone else's code can raise anything
            reason = " ".join(str(error).split())
            raise EnvironmentFailed(
                f"{env_label(self.env_id)}'s {method} raised {type(error).__name__}: {reason}"
            ) from error

    def rgb(self) -> np.ndarray:
        """The environment's ``render()`` as (H, W, 3) uint8, for eval frames (floats in [0, 1] scaled)."""
        image = self._call("render")
        if image is None:
            raise EnvironmentFailed(f"{env_label(self.env_id)} renders no rgb_array images: leave out --render")
        image = np.asarray(image)
        return (image * 255).round().astype(np.uint8) if image.dtype.kind == "f" else image.astype(np.uint8)

    def reseed(self, seed: int) -> None:
        """The next episode starts from ``seed``, as the first of ``GymEnv(env_id, seed)`` does."""
        self._seed = seed

    def get_state(self) -> dict[str, Any]:
        return {}

    def set_state(self, state: dict[str, Any]) -> None:
        raise EmulatorStateError("not saved: a gymnasium environment's state cannot be, only an Atari game's")


@functools.cache
def env_layout(env: str) -> tuple[int, tuple[int, ...]]:
    """The stack depth and frame shape of the states of ``env`` (any name ``resolve_env_id`` takes; a
    gymnasium environment is made and reset once to know them, and its first observation checked);
    ValueError, or whatever making it raises, when it cannot be played."""
    env_id = resolve_env_id(env)  # 'Breakout' is the Atari game, not what gymnasium.make('Breakout') makes
    if is_atari(env_id):
        return AtariEnv.stack_depth, AtariEnv.frame_shape
    game = GymEnv(env_id, seed=0)
    game.reset()
    game.env.close()
    return game.stack_depth, game.frame_shape


def input_shape(env: AtariEnv | GymEnv) -> tuple[int, int, int]:
    """The network's input for ``env``'s states: (stack depth x channels, height, width)."""
    channels = env.frame_shape[0] if len(env.frame_shape) == 3 else 1
    return env.stack_depth * channels, env.frame_shape[-2], env.frame_shape[-1]


class FrameStack:
    """The agent's input: the last ``depth`` frames, oldest first.

    A stack starts at a game's first frame (with ``rule.per_life``, also at the first frame after
    a lost life that is terminal for learning), repeated over the whole stack or, with
    ``rule.zero_fill``, after zeros: exactly how the replay memory rebuilds stacks under the same rule.
    """

    def __init__(
        self,
        depth: int = STACK_DEPTH,
        frame_shape: tuple[int, ...] = (FRAME_SIZE,) * 2,
        rule: StackRule = NATURE_STACKS,
    ) -> None:
        self.frames = np.zeros((depth, *frame_shape), dtype=np.uint8)
        self.rule = rule

    def reset(self, frame: np.ndarray) -> np.ndarray:
        self.frames[:] = 0 if self.rule.zero_fill else frame
        self.frames[-1] = frame
        return self.frames

    def push(self, frame: np.ndarray) -> np.ndarray:
        self.frames[:-1] = self.frames[1:]
        self.frames[-1] = frame
        return self.frames

    def advance(self, result: StepResult) -> np.ndarray:
        """The state after a step that did not end the game."""
        return self.reset(result.frame) if self.rule.per_life and result.life_lost else self.push(result.frame)


class AtariGymEnv(gym.Env):
    """A game as the agent sees it, as a gymnasium environment, for gymnasium's wrappers and other
    people's loops: observations are the agent's (4, 84, 84) uint8 frame stacks (the same as
    training and evaluation see), actions index the game's action set, rewards are the game's own
    (unclipped). ``info`` holds ``lives`` and ``life_lost`` (terminal for learning, not for the
    game). The training loop uses ``AtariEnv`` itself; this only wraps it."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["rgb_array"], "render_fps": 60 // FRAME_SKIP}

    def __init__(
        self,
        game: str = "Breakout",
        seed: int = 0,
        render_mode: str | None = None,
        stack_rule: StackRule = NATURE_STACKS,
        **options: Any,
    ) -> None:
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode {render_mode!r}: only 'rgb_array' (or None)")
        self.env_id, self.options, self.render_mode = resolve_env_id(game), options, render_mode
        self.game = AtariEnv(self.env_id, seed, **options)
        self.observation_space = gym.spaces.Box(0, 255, (STACK_DEPTH, FRAME_SIZE, FRAME_SIZE), np.uint8)
        self.action_space = gym.spaces.Discrete(self.game.n_actions)
        self._stack = FrameStack(rule=stack_rule)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        if seed is not None:  # the emulator is seeded when made: a new seed is a new game machine
            self.game = AtariEnv(self.env_id, seed, **self.options)
        observation = self._stack.reset(self.game.reset()).copy()
        return observation, {"lives": self.game.lives}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        if (
            isinstance(action, bool)
            or not isinstance(action, int | np.integer)
            or not self.action_space.contains(action)
        ):
            raise ValueError(f"an action is a whole number from 0 to {self.game.n_actions - 1}, got {action!r}")
        result = self.game.step(int(action))
        observation = self._stack.advance(result).copy()
        info = {"lives": self.game.lives, "life_lost": result.life_lost}
        return observation, result.reward, result.terminated, result.truncated, info

    def render(self) -> np.ndarray | None:
        return self.game.rgb() if self.render_mode == "rgb_array" else None


class Player:
    """Plays a training game (any game with reset() and step()) with the agent and pushes every step
    into the replay memory's ``stream`` (one per game of --envs), its reward clipped to its sign (Mnih et al.
    2015) unless ``clip_rewards`` is off."""

    def __init__(
        self, env: AtariEnv | GymEnv, memory: ReplayMemory, clip_rewards: bool = True, stream: int = 0
    ) -> None:
        self.env = env
        self.memory = memory
        self.clip_rewards = clip_rewards
        self.stream = stream
        self.stack = FrameStack(memory.stack_depth, memory.frame_shape, memory.stack_rule)
        self.new_game()

    def new_game(self) -> None:
        self.state = self.stack.reset(self.env.reset())
        self.first = True  # the current frame starts a game
        self.episode_return = 0.0
        self.episode_length = 0

    def step(self, action: int) -> GameResult | None:
        """Play one agent step; return the game's raw score and length when it ended, else None."""
        result = self.env.step(action)
        learning_terminal = result.terminated or result.life_lost
        reward = np.sign(result.reward) if self.clip_rewards else result.reward
        self.memory.push(self.state[-1], action, reward, learning_terminal, self.first, self.stream)
        self.first = False
        self.episode_return += result.reward
        self.episode_length += 1
        if result.terminated or result.truncated:
            finished = GameResult(self.episode_return, self.episode_length)
            self.new_game()
            return finished
        self.state = self.stack.advance(result)
        return None

    def state_dict(self) -> dict[str, Any]:
        return {
            "env": self.env.get_state(),
            "stack": torch.from_numpy(self.state.copy()),
            "first": self.first,
            "episode_return": self.episode_return,
            "episode_length": self.episode_length,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.env.set_state(state["env"])
        self.stack.frames[:] = state["stack"].numpy()
        self.first = state["first"]
        self.episode_return = state["episode_return"]
        self.episode_length = state.get("episode_length", 0)  # absent from older checkpoints


class EvaluationStopped(Exception):
    """``evaluate`` was asked to stop before its last game ended; it returns no scores, only the
    games it finished, for a later ``evaluate`` to go on from."""

    def __init__(self, finished: FinishedGames) -> None:
        super().__init__(f"stopped after {len(finished.scores)} games")
        self.finished = finished


Game = tuple["AtariEnv | GymEnv", np.random.Generator]  # a game machine, and the generator its epsilon draws from


class SerialGames:
    """An evaluation's games played in turn on one game machine, epsilon drawn from one generator, each
    game starting where the one before left the emulator: the scheme of ``--eval-games serial`` (the runs
    from before --eval-envs). One game at a time: which games are played depends on the order."""

    most_at_once = 1

    def __init__(self, env: AtariEnv | GymEnv, rng: np.random.Generator) -> None:
        self.env, self.rng = env, rng

    def game(self, number: int) -> Game:
        return self.env, self.rng

    def position(self) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """Where the next game starts from (the emulator's and the generator's states), to go back to."""
        return self.env.get_state(), self.rng.bit_generator.state

    def go_back(self, finished: FinishedGames) -> None:
        self.env.set_state(finished.env)
        if finished.act_rng is not None:
            self.rng.bit_generator.state = finished.act_rng

    def done(self, env: AtariEnv | GymEnv) -> None:
        pass


class SeededGames:
    """An evaluation's games each seeded from ``entropy`` and the game's number, its emulator, no-op starts and
    epsilon draws alike: game k is the same game however many play at once (``--eval-games seeded``, with
    ``--eval-envs``). ``make(seed, render)`` makes a game machine (rendering, for the first game's frames, with
    ``render_first``); a machine whose game is over plays the next one, seeded again (``reseed``), as a new one
    would: loading a game takes a fifth of a second. ``pool``: the machines, kept for later evaluations."""

    most_at_once = math.inf

    def __init__(
        self,
        make: Callable[[int, bool], AtariEnv | GymEnv],
        entropy: list[int],
        render_first: bool = False,
        pool: list[AtariEnv | GymEnv] | None = None,
    ) -> None:
        self.make, self.entropy, self.render_first = make, entropy, render_first
        self.pool = [] if pool is None else pool
        self.rendering: AtariEnv | GymEnv | None = None  # the first game's machine, made to render: not kept

    def game(self, number: int) -> Game:
        seed = int(np.random.SeedSequence([*self.entropy, number]).generate_state(1)[0])
        if number == 0 and self.render_first:
            env = self.rendering = self.make(seed, True)
        elif self.pool:
            env = self.pool.pop()
            env.reseed(seed)
        else:
            env = self.make(seed, False)
        return env, np.random.default_rng(seed)

    def position(self) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        return None, None  # a game is played again from its seed

    def go_back(self, finished: FinishedGames) -> None:
        pass

    def done(self, env: AtariEnv | GymEnv) -> None:
        """``env``'s game is over: it may play another."""
        if env is not self.rendering:
            self.pool.append(env)


class Lane:
    """One game of an evaluation in play."""

    def __init__(self, number: int, game: Game, stack_rule: StackRule, before: tuple[Any, Any]) -> None:
        self.number, (self.env, self.rng), self.before = number, game, before
        self.stack = FrameStack(self.env.stack_depth, self.env.frame_shape, stack_rule)
        self.score, self.steps = 0.0, 0
        self.stack.reset(self.env.reset())


PROGRESS_STEPS = 1000  # an evaluation's progress bar shows the oldest game's steps this often


def step_in_workers(machines: list[Any], actions: np.ndarray) -> None:
    """The machines in worker processes (``utils_workers.RemoteGame``, with --env-workers) take their steps there,
    all at once, before each one's ``step`` gives its result; the others step when ``step`` is called."""
    groups = {id(machine.workers): machine.workers for machine in machines if hasattr(machine, "workers")}
    for workers in groups.values():
        workers.step_games(machines, actions)


def evaluate(
    act: Callable[[np.ndarray, float, list[np.random.Generator]], np.ndarray],
    games: SerialGames | SeededGames,
    episodes: int,
    epsilon: float,
    at_once: int = 1,
    frame_dir: Path | None = None,
    stopped: Callable[[], bool] = lambda: False,
    stack_rule: StackRule = NATURE_STACKS,
    show_progress: bool = False,
    finished: FinishedGames | None = None,
) -> EvalResult:
    """Play ``episodes`` whole games of ``games``, up to ``at_once`` at a time, with
    ``act(states, epsilon, rngs)`` (a batch of states, one generator per game: ``Agent.act_all``), and
    return their raw scores, in the games' order.

    With ``frame_dir``, game 0's colour frames are written there as 000000.png, 000001.png, ...; the
    folder appears only once it is complete. ``stopped`` is asked before every round of steps: once it
    says yes, raises EvaluationStopped (100 games can take many minutes, and a partial mean must never
    pass for a score) with the games finished so far and, for ``SerialGames``, where the first
    unfinished one starts. Given back as ``finished``, they are not played again: the evaluation goes
    on as it would have (EmulatorStateError when a serial game's state cannot be restored).
    ``show_progress``: a progress bar of the games played, with the oldest game's steps (redrawn every
    PROGRESS_STEPS steps, so that it costs the games nothing).
    """
    at_once = int(min(at_once, games.most_at_once))
    scores: dict[int, float] = {}
    steps, earlier_seconds = 0, 0.0
    if finished is not None:
        games.go_back(finished)
        numbers = finished.numbers if finished.numbers is not None else range(len(finished.scores))
        scores = dict(zip(numbers, finished.scores, strict=True))
        steps, earlier_seconds = finished.steps, finished.seconds
    start = time.perf_counter()
    waiting = iter([number for number in range(episodes) if number not in scores])
    partial = frame_dir.with_name(frame_dir.name + ".partial") if frame_dir and 0 not in scores else None
    if partial:
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
    playing: list[Lane] = []
    with tqdm(
        total=episodes,
        initial=len(scores),
        desc="evaluating",
        unit="game",
        leave=False,
        disable=not show_progress,
        mininterval=1.0,
    ) as bar:
        while True:
            while len(playing) < at_once and (number := next(waiting, None)) is not None:
                before = games.position()  # a stop in this game keeps the games before it, and this
                playing.append(Lane(number, games.game(number), stack_rule, before))
                if partial and number == 0:
                    Image.fromarray(playing[-1].env.rgb()).save(partial / f"{0:06d}.png")
            if not playing:
                break
            if stopped():
                if partial:
                    shutil.rmtree(partial, ignore_errors=True)
                numbers = sorted(scores)
                env, act_rng = playing[0].before  # the serial scheme's one game
                raise EvaluationStopped(
                    FinishedGames(
                        [scores[n] for n in numbers],
                        steps,
                        earlier_seconds + time.perf_counter() - start,
                        env,
                        act_rng,
                        numbers,
                    )
                )
            actions = act(np.stack([lane.stack.frames for lane in playing]), epsilon, [lane.rng for lane in playing])
            step_in_workers([lane.env for lane in playing], actions)
            for lane, action in zip(list(playing), actions, strict=True):
                result = lane.env.step(int(action))
                lane.stack.advance(result)
                lane.score += result.reward
                lane.steps += 1
                if partial and lane.number == 0:
                    Image.fromarray(lane.env.rgb()).save(partial / f"{lane.steps:06d}.png")
                if result.terminated or result.truncated:
                    scores[lane.number] = lane.score
                    steps += lane.steps
                    playing.remove(lane)
                    games.done(lane.env)
                    bar.update()
                    if partial and lane.number == 0:  # game 0's frames are complete
                        shutil.rmtree(frame_dir, ignore_errors=True)
                        partial.rename(frame_dir)
                        partial = None
            if playing and playing[0].steps % PROGRESS_STEPS == 0:
                bar.set_postfix_str(f"game {playing[0].number + 1}: {playing[0].steps:,} steps")
    return EvalResult(
        [scores[number] for number in range(episodes)], steps, earlier_seconds + time.perf_counter() - start
    )
