"""The Q-network: the Nature DQN network (Mnih et al. 2015), optionally with a dueling head (Wang et
al. 2016), in three variants (``--network``) that share this one class:

- ``nature``: the paper's. Unpadded ("VALID") convolutions, 20x20, 9x9 and 7x7 outputs, 3,136
  features into the 512-unit layer; a dueling head has two separate 512-unit streams, one for the
  value and one for the advantages; PyTorch's default initialisation.
- ``dopamine``: the network of Dopamine's Atari 100k agents (``dopamine/jax/networks.py``,
  ``FullRainbowNetwork``, as DrQ(eps) uses it). flax's ``nn.Conv`` pads "SAME" by default, as
  TensorFlow does (the odd pixel of padding after, not before), so the outputs are 21x21, 11x11 and
  11x11, 7,744 features; one 512-unit layer is shared by the value and the advantage outputs;
  weights Glorot-uniform (``nn.initializers.xavier_uniform``), biases zero.
- ``minatar``: Young & Tian's (2019) network for MinAtar's 10x10 observations (``examples/dqn.py`` of
  github.com/kenjyoung/MinAtar, class ``QNetwork``): one unpadded 16-channel 3x3 convolution of
  stride 1, a 128-unit layer; PyTorch's default initialisation.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import nn

NATURE_CONVOLUTIONS = ((32, 8, 4), (64, 4, 2), (64, 3, 1))  # (channels, kernel, stride), Mnih et al. 2015


class NetworkSpec(NamedTuple):
    convolutions: tuple[tuple[int, int, int], ...]  # (channels, kernel, stride) of each
    hidden_units: int  # of the fully connected layer after them
    same_padding: bool  # pad each convolution so that its output is ceil(input / stride) wide
    shared_dueling_layer: bool  # the dueling value and advantages read one hidden layer (else one each)
    glorot_init: bool  # Glorot-uniform weights and zero biases (else PyTorch's defaults)


NETWORKS = {
    "nature": NetworkSpec(NATURE_CONVOLUTIONS, 512, same_padding=False, shared_dueling_layer=False, glorot_init=False),
    "dopamine": NetworkSpec(NATURE_CONVOLUTIONS, 512, same_padding=True, shared_dueling_layer=True, glorot_init=True),
    "minatar": NetworkSpec(((16, 3, 1),), 128, same_padding=False, shared_dueling_layer=False, glorot_init=False),
}


def same_padding(size: int, kernel: int, stride: int) -> tuple[int, int]:
    """TensorFlow's (and flax's) "SAME" padding of one dimension: (before, after), the odd pixel after."""
    total = max((-(-size // stride) - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


def smallest_input(network: str) -> int:
    """The narrowest frame, in pixels, that ``network``'s convolutions leave at least one output of."""
    spec, size = NETWORKS[network], 1
    if spec.same_padding:
        return size  # SAME padding never shrinks a frame below one pixel
    for _, kernel, stride in reversed(spec.convolutions):
        size = (size - 1) * stride + kernel
    return size


def network_size(n_actions: int, input_shape: tuple[int, int, int], dueling: bool, network: str) -> tuple[int, int]:
    """The parameters of ``network`` on states of ``input_shape``, and the floats its forward pass holds for one
    state (the scaled input and every layer's output); built on the meta device, so nothing is allocated, however
    large the frames."""
    outputs: list[int] = []
    with torch.device("meta"):
        model = QNetwork(n_actions, input_shape, dueling, network)
        for module in model.modules():
            if not list(module.children()):
                module.register_forward_hook(lambda _module, _input, output: outputs.append(output.numel()))
        model(torch.zeros((1, *input_shape), dtype=torch.uint8))
    return sum(p.numel() for p in model.parameters()), math.prod(input_shape) + sum(outputs)


class QNetwork(nn.Module):
    """The convolutions of the variant ``network`` names (a key of ``NETWORKS``; Nature's: conv
    32x8x8/4, 64x4x4/2, 64x3x3/1, fc 512), one output per action (a dueling head: a value and one
    advantage per action).

    ``input_shape`` is (channels, height, width) of one state: 4 stacked 84x84 frames for Atari.
    Takes uint8 states (or float ones on the same 0-255 scale) and scales them to [0, 1] itself, so
    the replay memory and the acting path never hold float copies of frames.
    """

    def __init__(
        self,
        n_actions: int,
        input_shape: tuple[int, int, int] = (4, 84, 84),
        dueling: bool = False,
        network: str = "nature",
    ) -> None:
        super().__init__()
        spec = NETWORKS[network]
        channels, height, width = input_shape
        if min(height, width) < smallest_input(network):
            raise ValueError(
                f"the {network} network needs frames of at least {smallest_input(network)}x{smallest_input(network)} "
                f"pixels, these are {height}x{width}"
            )
        layers: list[nn.Module] = []
        for out_channels, kernel, stride in spec.convolutions:
            (top, bottom), (left, right) = (
                (same_padding(height, kernel, stride), same_padding(width, kernel, stride))
                if spec.same_padding
                else ((0, 0), (0, 0))
            )
            if (bottom, right) != (top, left):  # the convolution pads evenly; the odd pixel goes after, on its own
                layers.append(nn.ZeroPad2d((0, right - left, 0, bottom - top)))
            layers += [nn.Conv2d(channels, out_channels, kernel, stride, padding=(top, left)), nn.ReLU()]
            channels = out_channels
            height, width = (
                (height + top + bottom - kernel) // stride + 1,
                (width + left + right - kernel) // stride + 1,
            )
        self.features = nn.Sequential(*layers, nn.Flatten())
        n_features, hidden = channels * height * width, spec.hidden_units
        self.dueling = dueling
        if spec.shared_dueling_layer:
            self.hidden = nn.Sequential(nn.Linear(n_features, hidden), nn.ReLU())
            self.head = nn.Linear(hidden, n_actions)
            self.value = nn.Linear(hidden, 1) if dueling else None
        else:
            self.hidden = nn.Identity()
            self.head = _mlp(n_features, hidden, n_actions)
            self.value = _mlp(n_features, hidden, 1) if dueling else None
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


def _mlp(n_in: int, hidden: int, n_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(n_in, hidden), nn.ReLU(), nn.Linear(hidden, n_out))
