"""Small gymnasium environments for the tests of the generic path (``--env gym_envs:Endless``; the tests'
folder is on sys.path): one that never ends, and frames declared one way and given another."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class Frames(gym.Env):
    """10x10 frames, declared as ``Box(0, high, dtype=declared)`` and given as ``given`` arrays whose pixels count the
    steps (modulo ``period``, by default ``high + 1``); an episode ends after ``length`` steps, or never (None)."""

    def __init__(
        self,
        high: int = 255,
        declared: str = "uint8",
        given: str | None = None,
        period: int | None = None,
        length: int | None = None,
    ) -> None:
        self.observation_space = gym.spaces.Box(0, high, (10, 10), np.dtype(declared))
        self.action_space = gym.spaces.Discrete(2)
        self.given, self.period, self.length = np.dtype(given or declared), period or high + 1, length

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.steps = 0
        return self._observation(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.steps += 1
        return self._observation(), 1.0, self.steps == self.length, False, {}

    def _observation(self) -> np.ndarray:
        return np.full((10, 10), self.steps % self.period, self.given)


class Endless(Frames):
    """Never terminates nor truncates by itself."""
