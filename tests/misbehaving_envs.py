"""Small gymnasium environments that misbehave, for the tests of what a run does then (``--env
misbehaving_envs:Misbehaving``; the tests' folder is on sys.path)."""

from __future__ import annotations

import os
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

SIZE = 40  # pixels per side: the smallest frames the nature network reads are 36x36


class Misbehaving(gym.Env):
    """Games of 10 steps on 40x40 frames, a reward of 1 a step; from an instance's ``after_steps``-th step on (and
    at its resets after it), it does what ``misbehaviour`` names (a test sets both, or MISBEHAVING):
    a reward of ``"nan"`` or ``"inf"``, ``"step raises"``, ``"reset raises"``, or ``"shape"`` (a frame of
    another shape than its observation space's)."""

    misbehaviour: ClassVar[str | None] = None
    after_steps: ClassVar[int] = 0
    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["rgb_array"]}

    def __init__(self, render_mode: str | None = None) -> None:
        self.observation_space = gym.spaces.Box(0, 255, self.frame_shape(), np.uint8)
        self.action_space = gym.spaces.Discrete(3)
        self.render_mode, self.steps, self.played = render_mode, 0, 0
        told = os.environ.get("MISBEHAVING")  # "what after N", for games in other processes (--env-workers)
        if told:
            what, _, after = told.rpartition(" after ")
            self.misbehaviour, self.after_steps = what, int(after)

    @staticmethod
    def frame_shape() -> tuple[int, ...]:
        return SIZE, SIZE

    def misbehaving(self, what: str) -> bool:
        return self.misbehaviour == what and self.played >= self.after_steps

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        if self.misbehaving("reset raises"):
            raise RuntimeError("the game's server went away")
        self.steps = 0
        return self._frame(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.steps, self.played = self.steps + 1, self.played + 1
        if self.misbehaving("step raises"):
            raise RuntimeError("the game's server went away")
        reward = float(self.misbehaviour) if self.misbehaving("nan") or self.misbehaving("inf") else 1.0
        frame = np.zeros((SIZE // 2, SIZE), np.uint8) if self.misbehaving("shape") else self._frame()
        return frame, reward, self.steps == 10, False, {}

    def render(self) -> np.ndarray | None:
        return np.zeros((SIZE, SIZE, 3), np.uint8) if self.render_mode == "rgb_array" else None

    def _frame(self) -> np.ndarray:
        frame = np.zeros(self.frame_shape(), np.uint8)
        frame[self.steps * 4 : self.steps * 4 + 4] = 255  # a bar moving down the screen
        return frame


class NoRenderMode(Misbehaving):
    """Takes no ``render_mode``: gymnasium.make(..., render_mode="rgb_array") cannot make it."""

    def __init__(self) -> None:
        super().__init__()


class NoImages(Misbehaving):
    """Made with ``render_mode="rgb_array"``, but renders nothing."""

    def render(self) -> None:
        return None


class Huge(Misbehaving):
    """2000x2000 colour frames: few enough bytes for a small replay memory, far too many for the network."""

    @staticmethod
    def frame_shape() -> tuple[int, ...]:
        return 2000, 2000, 3
