"""Small value types passed between the modules."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch


class StepResult(NamedTuple):
    """What one agent step (``frame_skip`` emulator frames) of an Atari game produced."""

    frame: np.ndarray  # (84, 84) uint8, the max over the last two grayscale frames
    reward: float  # raw game score gained during the step (not clipped)
    life_lost: bool  # a life was lost, terminal for learning (not for the game); False with life_loss_terminal off
    terminated: bool  # game over
    truncated: bool  # episode cut at the frame limit


class Batch(NamedTuple):
    """A sampled mini-batch, already on the training device."""

    states: torch.Tensor  # (B, stack, H, W) uint8
    actions: torch.Tensor  # (B,) int64
    returns: torch.Tensor  # (B,) float32, discounted sum of the clipped rewards of the n-step window
    next_states: torch.Tensor  # (B, stack, H, W) uint8, the state n steps later
    discounts: torch.Tensor  # (B,) float32, gamma ** n for the bootstrap; 0 after a terminal step
    weights: torch.Tensor  # (B,) float32 importance-sampling weights (ones when uniform)
    indices: np.ndarray  # (B,) int64 memory slots, for priority updates


class LearnResult(NamedTuple):
    """What one gradient step reports back, on the training device (read them only when needed)."""

    loss: torch.Tensor  # () float32
    mean_q: torch.Tensor  # () float32
    priorities: torch.Tensor  # (B,) float32, for priority updates: |target - Q(s, a)|, or C51's cross-entropy


class GameResult(NamedTuple):
    """A finished game (every life) of the training player."""

    score: float  # raw game score, not clipped
    length: int  # agent steps played


class EvalResult(NamedTuple):
    """Raw game scores of one evaluation."""

    scores: list[float]
    steps: int  # agent steps played over all episodes
    seconds: float


class FinishedGames(NamedTuple):
    """What an evaluation stopped between two games keeps, so that it can go on where it stopped."""

    scores: list[float]  # the raw scores of the games it finished
    steps: int  # their agent steps
    seconds: float  # their time
    env: dict[str, Any] | None  # serial games: the game's ``get_state()`` before the next game's reset
    act_rng: dict[str, Any] | None  # serial games: the acting generator's ``bit_generator.state`` then
    numbers: list[int] | None = None  # seeded games: the finished games' numbers (None: the first ones)


@dataclass
class Progress:
    """Counters that a checkpoint carries across a resume."""

    step: int = 0
    evaluations: int = 0  # evaluations done; the next one gets this index
    episodes: int = 0
    wall_seconds: float = 0.0
    last_score: float = float("nan")
    threads: int = 0  # the learner's CPU threads (0: unknown, an older checkpoint)
    evaluation_due: bool = False  # a stop interrupted the evaluation at this step: a resume does it first
    evaluation_games: dict[str, Any] | None = None  # the games it had finished (FinishedGames), not played again
    wandb_run_id: str = ""  # the run's Weights & Biases run (--track), which a resume goes on in


class MemoryHealth(NamedTuple):
    """``PrioritizedReplayMemory.health``: the figures logged at each evaluation of a prioritized run."""

    total: float  # the sum tree's root
    exact_total: float  # the leaves summed again, correctly rounded
    relative_error: float  # |total - exact_total| / exact_total
    min_priority: float  # over the sampleable slots (non-zero leaves)
    max_priority: float
    new_priority: float  # what a new transition gets (max_priority of the memory)
    beta: float
    max_weight: float  # the largest importance weight, (N * min P(i)) ** -beta, before any normalisation
    sampleable: int  # the slots with a non-zero leaf


class StackRule(NamedTuple):
    """Where a frame stack starts, and what fills it before its first frame."""

    zero_fill: bool = False  # zeros before the first frame (Dopamine), not copies of it (Nature)
    per_life: bool = False  # a lost life that is terminal for learning starts a new stack (Dopamine)


NATURE_STACKS = StackRule()  # the default: a game's first frame repeated, one stack across its lives


class RunEvent(NamedTuple):
    """What ``dqn.train``'s callback is told, at each finished training game, evaluation and checkpoint."""

    kind: str  # "game", "evaluation" or "checkpoint"
    step: int  # the agent step it happened at
    run: Path  # the run folder
    scores: tuple[float, ...] = ()  # a game's score; an evaluation's games' scores
    checkpoint: Path | None = None  # the checkpoint written
