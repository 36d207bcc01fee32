"""The Nature DQN network (Mnih et al. 2015), optionally with a dueling head (Wang et al. 2016)."""

from __future__ import annotations

import torch
from torch import nn


class NatureCNN(nn.Module):
    """Q-network: conv 32x8x8/4, 64x4x4/2, 64x3x3/1, fc 512, one output per action.

    Takes uint8 frame stacks and scales them to [0, 1] itself, so the replay memory and the
    acting path never hold float copies of frames.
    """

    def __init__(
        self,
        n_actions: int,
        stack_depth: int = 4,
        frame_size: int = 84,
        dueling: bool = False,
    ) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(stack_depth, 32, kernel_size=8, stride=4),
            nn.ReLU(),
            nn.Conv2d(32, 64, kernel_size=4, stride=2),
            nn.ReLU(),
            nn.Conv2d(64, 64, kernel_size=3, stride=1),
            nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            n_features = self.features(torch.zeros(1, stack_depth, frame_size, frame_size)).shape[1]
        self.dueling = dueling
        self.head = _mlp(n_features, n_actions)
        self.value = _mlp(n_features, 1) if dueling else None

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        # Channels-last uint8 (a quarter of the bytes) before scaling: the convolutions run channels
        # last, and would otherwise convert the float batch, twice per learning step.
        frames = frames.contiguous(memory_format=torch.channels_last)
        features = self.features(frames / 255.0)  # uint8 in, float32 out, in one kernel
        if self.value is None:
            return self.head(features)
        advantages = self.head(features)
        # Subtracting the mean advantage makes the value/advantage split identifiable.
        return self.value(features) + advantages - advantages.mean(dim=1, keepdim=True)


def _mlp(n_in: int, n_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(n_in, 512), nn.ReLU(), nn.Linear(512, n_out))
