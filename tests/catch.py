"""Catch, a tiny pixel game for the learning test: a ball falls down a grid and the agent
moves a paddle on the bottom row (left, stay, right) to be under it when it lands."""

from __future__ import annotations

import numpy as np

from dqn_atari.utils_types import StepResult

GRID = 8  # cells per side
CELL = 5  # pixels per cell
FRAME_SIZE = GRID * CELL


class Catch:
    """Implements the part of ``utils_env.AtariEnv`` the training loop uses."""

    n_actions = 3

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def reset(self) -> np.ndarray:
        self.ball_row, self.ball_col = 0, int(self.rng.integers(GRID))
        self.paddle = int(self.rng.integers(GRID))
        return self._frame()

    def step(self, action: int) -> StepResult:
        self.paddle = int(np.clip(self.paddle + action - 1, 0, GRID - 1))
        self.ball_row += 1
        landed = self.ball_row == GRID - 1
        reward = (1.0 if self.paddle == self.ball_col else -1.0) if landed else 0.0
        return StepResult(self._frame(), reward, False, landed, False)

    def _frame(self) -> np.ndarray:
        frame = np.zeros((FRAME_SIZE, FRAME_SIZE), dtype=np.uint8)
        frame[self.ball_row * CELL : (self.ball_row + 1) * CELL, self.ball_col * CELL : (self.ball_col + 1) * CELL] = (
            255
        )
        bottom = (GRID - 1) * CELL
        frame[bottom:, self.paddle * CELL : (self.paddle + 1) * CELL] = 128
        return frame
