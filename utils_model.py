"""The Q-network: the Nature DQN network (Mnih et al. 2015), optionally with a dueling head (Wang et
al. 2016), in two variants (``--network``) that share this one class:

- ``nature``: the paper's. Unpadded ("VALID") convolutions, 20x20, 9x9 and 7x7 outputs, 3,136
  features into the 512-unit layer; a dueling head has two separate 512-unit streams, one for the
  value and one for the advantages; PyTorch's default initialisation.
- ``dopamine``: the network of Dopamine's Atari 100k agents (``dopamine/jax/networks.py``,
  ``FullRainbowNetwork``, as DrQ(eps) uses it). flax's ``nn.Conv`` pads "SAME" by default, as
  TensorFlow does (the odd pixel of padding after, not before), so the outputs are 21x21, 11x11 and
  11x11, 7,744 features; one 512-unit layer is shared by the value and the advantage outputs;
  weights Glorot-uniform (``nn.initializers.xavier_uniform``), biases zero.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

CONVOLUTIONS = ((32, 8, 4), (64, 4, 2), (64, 3, 1))  # (channels, kernel, stride), Mnih et al. 2015
HIDDEN_UNITS = 512


class NetworkSpec(NamedTuple):
    same_padding: bool  # pad each convolution so that its output is ceil(input / stride) wide
    shared_dueling_layer: bool  # the dueling value and advantages read one hidden layer (else one each)
    glorot_init: bool  # Glorot-uniform weights and zero biases (else PyTorch's defaults)


NETWORKS = {
    "nature": NetworkSpec(same_padding=False, shared_dueling_layer=False, glorot_init=False),
    "dopamine": NetworkSpec(same_padding=True, shared_dueling_layer=True, glorot_init=True),
}


def same_padding(size: int, kernel: int, stride: int) -> tuple[int, int]:
    """TensorFlow's (and flax's) "SAME" padding of one dimension: (before, after), the odd pixel after."""
    total = max((-(-size // stride) - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


class QNetwork(nn.Module):
    """Conv 32x8x8/4, 64x4x4/2, 64x3x3/1, fc 512, one output per action (a dueling head: a value
    and one advantage per action), in the variant ``network`` names (a key of ``NETWORKS``).

    Takes uint8 frame stacks (or float ones on the same 0-255 scale) and scales them to [0, 1]
    itself, so the replay memory and the acting path never hold float copies of frames.
    """

    def __init__(
        self,
        n_actions: int,
        stack_depth: int = 4,
        frame_size: int = 84,
        dueling: bool = False,
        network: str = "nature",
    ) -> None:
        super().__init__()
        spec = NETWORKS[network]
        layers: list[nn.Module] = []
        channels, size = stack_depth, frame_size
        for out_channels, kernel, stride in CONVOLUTIONS:
            before, after = same_padding(size, kernel, stride) if spec.same_padding else (0, 0)
            if after > before:  # the convolution pads evenly; the odd pixel goes after, on its own
                layers.append(nn.ZeroPad2d((0, after - before, 0, after - before)))
            layers += [nn.Conv2d(channels, out_channels, kernel, stride, padding=before), nn.ReLU()]
            channels, size = out_channels, (size + before + after - kernel) // stride + 1
        self.features = nn.Sequential(*layers, nn.Flatten())
        n_features = channels * size * size
        self.dueling = dueling
        if spec.shared_dueling_layer:
            self.hidden = nn.Sequential(nn.Linear(n_features, HIDDEN_UNITS), nn.ReLU())
            self.head = nn.Linear(HIDDEN_UNITS, n_actions)
            self.value = nn.Linear(HIDDEN_UNITS, 1) if dueling else None
        else:
            self.hidden = nn.Identity()
            self.head = _mlp(n_features, n_actions)
            self.value = _mlp(n_features, 1) if dueling else None
        if spec.glorot_init:
            for module in self.modules():
                if isinstance(module, nn.Conv2d | nn.Linear):
                    nn.init.xavier_uniform_(module.weight)
                    nn.init.zeros_(module.bias)

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        # Channels-last uint8 (a quarter of the bytes) before scaling: the convolutions run channels
        # last, and would otherwise convert the float batch, twice per learning step.
        frames = frames.contiguous(memory_format=torch.channels_last)
        features = self.hidden(self.features(frames / 255.0))  # uint8 in, float32 out, in one kernel
        if self.value is None:
            return self.head(features)
        advantages = self.head(features)
        # Subtracting the mean advantage makes the value/advantage split identifiable.
        return self.value(features) + advantages - advantages.mean(dim=1, keepdim=True)


def _mlp(n_in: int, n_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(n_in, HIDDEN_UNITS), nn.ReLU(), nn.Linear(HIDDEN_UNITS, n_out))
