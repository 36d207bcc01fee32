"""The Q-network: the Nature DQN network (Mnih et al. 2015), optionally with a dueling head (Wang et
al. 2016) and noisy fully connected layers (Fortunato et al. 2018), in three variants (``--network``) that share
this one class:

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

import functools
import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

NATURE_CONVOLUTIONS = ((32, 8, 4), (64, 4, 2), (64, 3, 1))  # (channels, kernel, stride), Mnih et al. 2015
# The noisy layers' initial scale: Fortunato et al. (2018), section 3.2, for factorised noise; Rainbow's too (Hessel
# et al. 2018, Table 1).
NOISY_SIGMA0 = 0.5


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


def network_size(
    n_actions: int, input_shape: tuple[int, int, int], dueling: bool, network: str, units: int = 1, noisy: bool = False
) -> tuple[int, int]:
    """The parameters of ``network`` on states of ``input_shape``, and the floats its forward pass holds for one
    state (the scaled input and every layer's output); built on the meta device, so nothing is allocated, however
    large the frames."""
    outputs: list[int] = []
    with torch.device("meta"):
        model = QNetwork(n_actions, input_shape, dueling, network, units, NOISY_SIGMA0 if noisy else None)
        for module in model.modules():
            if not list(module.children()):
                module.register_forward_hook(lambda _module, _input, output: outputs.append(output.numel()))
        model(torch.zeros((1, *input_shape), dtype=torch.uint8))
    return sum(p.numel() for p in model.parameters()), math.prod(input_shape) + sum(outputs)


def weights_misfit(network: nn.Module, weights: object, shown: int = 3) -> str | None:
    """How ``weights`` (a checkpoint's) fail to be ``network``'s state dict, in one line naming at most ``shown``
    names of each kind of misfit (a crafted file may hold 100,000 of them); None where they fit."""
    if weights is None:
        return "it holds no network"
    if not isinstance(weights, dict):
        return f"the network's weights are a {type(weights).__name__}, not a dict of tensors"
    expected = network.state_dict()

    def listed(names: list[str]) -> str:
        more = f" and {len(names) - shown:,} more" if len(names) > shown else ""
        return ", ".join(name if len(name) <= 60 else name[:57] + "..." for name in names[:shown]) + more

    problems = []
    missing = [name for name in expected if name not in weights]
    if missing:
        problems.append(f"missing {listed(missing)}")
    extra = [repr(name) for name in weights if name not in expected]
    if extra:
        problems.append(f"unexpected {listed(extra)}")
    wrong = [
        f"{name} is {tuple(weights[name].shape) if isinstance(weights[name], torch.Tensor) else 'not a tensor'}, "
        f"not {tuple(tensor.shape)}"
        for name, tensor in expected.items()
        if name in weights and not (isinstance(weights[name], torch.Tensor) and weights[name].shape == tensor.shape)
    ]
    if wrong:
        problems.append(listed(wrong))
    return "; ".join(problems) or None


class QNetwork(nn.Module):
    """The convolutions of the variant ``network`` names (a key of ``NETWORKS``; Nature's: conv
    32x8x8/4, 64x4x4/2, 64x3x3/1, fc 512), ``units`` outputs per action, (B, actions, units): one for a
    Q-value, a distribution's logits for C51 (a dueling head: a value and one advantage per action, each
    ``units`` wide). With ``noisy_sigma0`` every fully connected layer is a ``NoisyLinear``.

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
        units: int = 1,
        noisy_sigma0: float | None = None,
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
        self.n_actions, self.units = n_actions, units
        self.dueling = dueling
        linear = nn.Linear if noisy_sigma0 is None else functools.partial(NoisyLinear, sigma0=noisy_sigma0)
        if spec.shared_dueling_layer:
            self.hidden = nn.Sequential(linear(n_features, hidden), nn.ReLU())
            self.head = linear(hidden, n_actions * units)
            self.value = linear(hidden, units) if dueling else None
        else:
            self.hidden = nn.Identity()
            self.head = nn.Sequential(linear(n_features, hidden), nn.ReLU(), linear(hidden, n_actions * units))
            self.value = (
                nn.Sequential(linear(n_features, hidden), nn.ReLU(), linear(hidden, units)) if dueling else None
            )
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
        advantages = self.head(features).view(-1, self.n_actions, self.units)
        if self.value is None:
            return advantages
        # Subtracting the mean advantage makes the value/advantage split identifiable (C51: atom by atom).
        return self.value(features).view(-1, 1, self.units) + advantages - advantages.mean(dim=1, keepdim=True)

    def set_noise(self, generator: torch.Generator | None) -> None:
        """New noise in every noisy layer, drawn from ``generator`` layer after layer; None: the noise off (the
        mean weights)."""
        for module in self.modules():
            if isinstance(module, NoisyLinear):
                module.set_noise(generator)


class NoisyLinear(nn.Module):
    """A fully connected layer with learned, factorised Gaussian noise (Fortunato et al. 2018, section 3):
    weights mu_w + sigma_w * f(e_out) f(e_in)^T and biases mu_b + sigma_b * f(e_out), e_in and e_out standard
    normal, f(x) = sgn(x) sqrt(|x|) (their equations 10-11). mu starts uniform in +-1/sqrt(inputs), sigma at
    sigma0 / sqrt(inputs) (section 3.2). The noise is drawn by ``set_noise`` (the agent decides when) and is
    part of no state dict: it is redrawn before each use."""

    def __init__(self, n_in: int, n_out: int, sigma0: float) -> None:
        super().__init__()
        bound, sigma = 1 / math.sqrt(n_in), sigma0 / math.sqrt(n_in)
        self.weight_mu = nn.Parameter(torch.empty(n_out, n_in).uniform_(-bound, bound))
        self.weight_sigma = nn.Parameter(torch.full((n_out, n_in), sigma))
        self.bias_mu = nn.Parameter(torch.empty(n_out).uniform_(-bound, bound))
        self.bias_sigma = nn.Parameter(torch.full((n_out,), sigma))
        self.register_buffer("noise_in", torch.zeros(n_in), persistent=False)
        self.register_buffer("noise_out", torch.zeros(n_out), persistent=False)

    def set_noise(self, generator: torch.Generator | None) -> None:
        if generator is None:
            self.noise_in.zero_()
            self.noise_out.zero_()
            return
        for noise in (self.noise_in, self.noise_out):  # drawn on the host: the same noise on any device
            drawn = torch.randn(len(noise), generator=generator)
            noise.copy_(drawn.sign() * drawn.abs().sqrt())

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        # (sigma_w * f(e_out) f(e_in)^T) x = f(e_out) * (sigma_w (f(e_in) * x)): the noise's product with the
        # inputs without the noisy weight matrix, whose millions of entries cost more than a second product.
        noise = F.linear(inputs * self.noise_in, self.weight_sigma) * self.noise_out
        return F.linear(inputs, self.weight_mu, self.bias_mu) + noise + self.bias_sigma * self.noise_out
