"""The DQN agent: epsilon-greedy (or noisy) acting, TD learning through a value head (``utils_heads``), the
target network, its state."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import torch

from dqn_atari.utils_heads import ScalarHead, ValueHead
from dqn_atari.utils_model import QNetwork, weights_misfit
from dqn_atari.utils_types import Batch, LearnResult


def linear_schedule(step: int, start: float, end: float, duration: int) -> float:
    """``start`` at step 0, moving linearly to ``end`` at ``duration``, then constant."""
    if duration <= 0 or step >= duration:
        return end
    return start + step / duration * (end - start)


class Agent:
    """Online and target Q-networks (``utils_model.QNetwork``) with an Adam optimizer, their outputs read
    by a value head (``head``: one Q-value per action unless given).

    ``learn`` takes per-sample importance weights and returns per-sample priorities, so
    uniform and prioritized replay both plug in without changing it.

    With noisy layers (``noisy_sigma0``) the noise is drawn from the agent's own generator: anew for
    each action selection, and for each learning step one draw for the online network, used for both
    its passes (the loss's and Double DQN's choice at the next states), another for the target network.
    Hessel et al. (2018) do not say how the draws are shared; Dopamine's full Rainbow shares one between
    the target network and the online choice, and draws another for the loss
    (``dopamine/jax/agents/full_rainbow/full_rainbow_agent.py`` lines 141, 156 and 220-223, commit
    5873f54). Evaluations act on the mean weights (``noise=False``), as Dopamine evaluates.
    """

    def __init__(
        self,
        n_actions: int,
        device: str | torch.device = "cpu",
        *,
        lr: float = 1e-4,
        adam_eps: float = 1e-8,
        head: ValueHead | None = None,
        grad_clip: float = 10.0,
        double: bool = False,
        dueling: bool = False,
        network: str = "nature",
        noisy_sigma0: float | None = None,
        separate_target: bool = True,
        augment: str = "none",
        cuda_graphs: bool = True,
        input_shape: tuple[int, int, int] = (4, 84, 84),
        seed: int = 0,
    ) -> None:
        self.n_actions, self.input_shape = n_actions, input_shape
        self.device = torch.device(device)
        self.grad_clip = grad_clip
        self.head = (head or ScalarHead()).to(self.device)
        self.double = double
        torch.manual_seed(seed)
        # Channels-last weights make the convolutions about 20% faster on a CPU (oneDNN kernels).
        layout = {"device": self.device, "memory_format": torch.channels_last}
        network_options = (n_actions, input_shape, dueling, network, self.head.units, noisy_sigma0)
        self.online = QNetwork(*network_options).to(**layout)
        # Without a separate target network (a target update every step, as in the Atari 100k
        # recipes) the target is the online network itself: nothing to copy, one forward pass less.
        self.target = self.online
        if separate_target:
            self.target = QNetwork(*network_options).to(**layout)
            self.target.requires_grad_(False)
            self.sync_target()
        # The augmentation draws from its own generator on the host, so that a resumed run draws the
        # same values, on any device.
        self.augmentation = AUGMENTATIONS[augment]
        self.augment_rng = torch.Generator().manual_seed(seed) if self.augmentation else None
        self.noise_rng = torch.Generator().manual_seed(seed) if noisy_sigma0 is not None else None
        # The fused kernel updates all parameters in one pass: a quarter off a CPU learning step.
        fused = True if self.device.type in ("cpu", "cuda") else None
        # On a GPU the learning step can be one CUDA graph (see GraphedLearning), the augmentation's
        # draws among its inputs.
        self.graphs = cuda_graphs and self.device.type == "cuda"
        self.graphed_acts = cuda_graphs and self.device.type == "cuda"  # the greedy action too (GraphedActing)
        self.optimizer = torch.optim.Adam(
            self.online.parameters(), lr=lr, eps=adam_eps, fused=fused, capturable=self.graphs
        )
        self.graphed: GraphedLearning | None = None
        self.graphed_acting: dict[tuple[int, ...], GraphedActing] = {}  # by batch shape
        self.eager_steps = 0  # learning steps taken before the graph is captured
        self.rng = np.random.default_rng(seed)
        # A state goes to a GPU through one page-locked buffer; act's own read of the action waits
        # for the forward pass, so the buffer is free again before the next action.
        self.state_buffer = torch.empty(0, dtype=torch.uint8, pin_memory=self.device.type == "cuda")

    def act(self, state: np.ndarray, epsilon: float, rng: np.random.Generator | None = None, noise: bool = True) -> int:
        """Epsilon-greedy action for one (stack, H, W) uint8 state; a stack of multi-channel frames,
        (stack, channels, H, W), is read as stack x channels channels, as the replay memory's batches."""
        return int(self.act_all(state[None], epsilon, [self.rng if rng is None else rng], noise)[0])

    def act_all(
        self, states: np.ndarray, epsilon: float, rngs: list[np.random.Generator] | None = None, noise: bool = True
    ) -> np.ndarray:
        """Epsilon-greedy actions for a batch of states, one per game: game i explores with its own
        generator ``rngs[i]`` (default: the agent's, drawn game after game), and the greedy ones share one
        forward pass (and one draw of a noisy network's noise; ``noise=False``: its mean weights). One
        game's draws are ``act``'s."""
        rngs = [self.rng] * len(states) if rngs is None else rngs
        actions = np.empty(len(states), dtype=np.int64)
        greedy = []
        for game, rng in enumerate(rngs):
            if rng.random() < epsilon:
                actions[game] = rng.integers(self.n_actions)
            else:
                greedy.append(game)
        if len(greedy) == len(states):  # the common case once epsilon is low: no copy of the batch
            actions[:] = self.greedy(states, noise)
        elif greedy:
            actions[greedy] = self.greedy(states[greedy], noise)
        return actions

    def act_evaluating(
        self, states: np.ndarray, epsilon: float, rngs: list[np.random.Generator] | None = None
    ) -> np.ndarray:
        """``act_all`` as evaluations act: a noisy network on its mean weights."""
        return self.act_all(states, epsilon, rngs, noise=False)

    def greedy(self, states: np.ndarray, noise: bool = True) -> np.ndarray:
        """The greedy actions of a batch of states (B, stack, H, W), or (B, stack, channels, H, W)."""
        states = states.reshape(len(states), -1, *states.shape[-2:])
        if self.noise_rng is not None:
            self.online.set_noise(self.noise_rng if noise else None)
        if self.graphed_acts:
            graph = self.graphed_acting.get(states.shape)
            if graph is None:  # one graph per batch size: the games still playing change it
                graph = self.graphed_acting[states.shape] = GraphedActing(self.q_values, states.shape, self.device)
            return graph(self.pinned(states))
        with torch.inference_mode():
            q_values = self.q_values(self.on_device(states))
        return q_values.argmax(dim=1).cpu().numpy()

    def q_values(self, states: torch.Tensor) -> torch.Tensor:
        """The online network's action values of a batch of states, as its head reads them."""
        return self.head.q_values(self.online(states))

    def on_device(self, state: np.ndarray) -> torch.Tensor:
        """States on the device: through the page-locked buffer on a GPU, shared on the CPU."""
        if self.device.type != "cuda":
            return torch.from_numpy(state).to(self.device)
        return self.pinned(state).to(self.device, non_blocking=True)

    def pinned(self, state: np.ndarray) -> torch.Tensor:
        """States in the page-locked buffer, from which they go up without a wait."""
        if self.state_buffer.shape != state.shape:
            self.state_buffer = torch.empty(state.shape, dtype=torch.uint8, pin_memory=True)
        self.state_buffer.numpy()[:] = state
        return self.state_buffer

    def td_targets(self, batch: Batch) -> torch.Tensor:
        """The head's target from the target network's outputs at the next state and the action that
        maximises its values there (Double DQN: the online network's values; with the target network the
        online one, that is the same action)."""
        with torch.no_grad():
            next_target = self.target(batch.next_states)
            chooser = next_target
            if self.double and self.target is not self.online:
                chooser = self.online(batch.next_states)
            best = self.head.q_values(chooser).argmax(dim=1)
            return self.head.target(batch, taken(next_target, best))

    def priorities(self, batch: Batch) -> np.ndarray:
        """Each transition's priority as ``learn`` computes it (|TD error| for the scalar head), without learning."""
        self._draw_learning_noise()
        with torch.no_grad():
            targets = self.td_targets(batch)
            return self.head.losses(taken(self.online(batch.states), batch.actions), targets)[1].cpu().numpy()

    def learn(self, batch: Batch) -> LearnResult:
        """One gradient step on the importance-weighted TD loss (on augmented frames with an
        ``augment`` other than none: the states, then the next states, each get their own draws).
        Its results stay on the device: reading them makes the host wait for the step."""
        draws = self._augment_draws(batch.states.shape[0])
        self._draw_learning_noise()  # into the networks' buffers, which a graph reads in place
        if self.graphs:
            stale = self.graphed is not None and self.graphed.batch.states.shape != batch.states.shape
            if (self.graphed is None or stale) and self.eager_steps >= GraphedLearning.WARMUP_STEPS:
                # The first capture, or another for a batch of another size.
                self.graphed = GraphedLearning(self._step, batch, draws, list(self.online.parameters()))
            if self.graphed is not None:
                return self.graphed(batch, draws)
            self.eager_steps += 1
            side = torch.cuda.Stream(self.device)  # warm-up steps run beside the capture's stream
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                result = self._step(batch, draws)
            torch.cuda.current_stream(self.device).wait_stream(side)
            return result
        return self._step(batch, draws)

    def _draw_learning_noise(self) -> None:
        """A learning step's noise: the online network's, then the target network's."""
        if self.noise_rng is not None:
            for network in dict.fromkeys((self.online, self.target)):  # one draw when they are one network
                network.set_noise(self.noise_rng)

    def _augment_draws(self, batch_size: int) -> AugmentDraws | None:
        """The augmentation's draws for one batch, on the device: the states' shifts and intensities,
        then the next states'."""
        if self.augmentation is None:
            return None
        states, next_states = (self.augmentation.draw(batch_size, self.augment_rng) for _ in range(2))
        return AugmentDraws(*(None if draw is None else draw.to(self.device) for draw in (*states, *next_states)))

    def _step(self, batch: Batch, draws: AugmentDraws | None) -> LearnResult:
        if draws is not None:
            batch = batch._replace(
                states=self.augmentation.apply(batch.states, draws.state_shifts, draws.state_factors),
                next_states=self.augmentation.apply(batch.next_states, draws.next_shifts, draws.next_factors),
            )
        outputs = taken(self.online(batch.states), batch.actions)
        targets = self.td_targets(batch)
        losses, priorities = self.head.losses(outputs, targets)
        loss = (batch.weights * losses).mean()
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if math.isfinite(self.grad_clip):  # an infinite clip only scales by 1: 3% of a step saved
            torch.nn.utils.clip_grad_norm_(self.online.parameters(), self.grad_clip)
        self.optimizer.step()
        mean_q = self.head.q_values(outputs.detach()[:, None]).mean()
        return LearnResult(loss.detach(), mean_q, priorities)

    def values_finite(self) -> bool:
        """Whether the online network's weights, and its action values of two probe states (all black, all white),
        on its mean weights and on one draw of its noise, are finite: an overflowing noise scale leaves the weights
        finite and the values not, and no result or checkpoint is written from such a network. The draw comes from a
        generator of its own, and every use of the network draws its noise first: the run's numbers stay as they are."""
        if not all(bool(torch.isfinite(weights).all()) for weights in self.online.parameters()):
            return False
        probes = torch.zeros((2, *self.input_shape), dtype=torch.uint8, device=self.device)
        probes[1] = 255
        noises = [None, torch.Generator().manual_seed(0)] if self.noise_rng is not None else [None]
        with torch.inference_mode():
            for noise in noises:
                self.online.set_noise(noise)  # a network without noisy layers has none to set
                if not torch.isfinite(self.q_values(probes)).all():
                    return False
        return True

    def sync_target(self) -> None:
        if self.target is not self.online:
            self.target.load_state_dict(self.online.state_dict())

    def state_dict(self) -> dict[str, Any]:
        state = {
            "online": self.online.state_dict(),
            "target": self.target.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "rng": self.rng.bit_generator.state,
        }
        if self.augment_rng is not None:
            state["shift_rng"] = self.augment_rng.get_state()  # the key of checkpoints from before intensity
        if self.noise_rng is not None:
            state["noise_rng"] = self.noise_rng.get_state()
        return state

    def load_online(self, weights: object) -> None:
        """A checkpoint's online network, for playing: ValueError in one line where it is not this network's."""
        problem = weights_misfit(self.online, weights)
        if problem:
            raise ValueError(f"the checkpoint's network does not fit its settings: {problem}")
        self.online.load_state_dict(weights)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        # Adam's state becomes new tensors: the next steps capture new graphs.
        self.graphed, self.graphed_acting = None, {}
        for name in ("online", "target"):  # one line naming a few keys, not a traceback listing them all
            problem = weights_misfit(getattr(self, name), state.get(name))
            if problem:
                raise ValueError(f"the {name} network: {problem}")
        self.online.load_state_dict(state["online"])
        self.target.load_state_dict(state["target"])
        # A copy: torch's optimizer keeps the given tensors, and the state of a live agent would
        # then be shared by both agents, each step moving both's Adam moments.
        self.optimizer.load_state_dict(copy.deepcopy(state["optimizer"]))
        if any(parameter not in self.optimizer.state for parameter in self.online.parameters()):
            # A state saved before its first learning step has no Adam moments: Adam makes them at its next step,
            # which a capture must not take in (it would replay the making), so warm up again first.
            self.eager_steps = 0
        for group in self.optimizer.param_groups:  # this run's choice, not that of the run that saved it
            group["capturable"] = self.graphs
            for parameter in group["params"] if self.graphs else ():  # a graph's Adam counts on the device
                step = self.optimizer.state.get(parameter, {}).get("step")
                if step is not None:
                    self.optimizer.state[parameter]["step"] = step.to(parameter.device, torch.float32)
        self.rng.bit_generator.state = state["rng"]
        if self.augment_rng is not None:
            self.augment_rng.set_state(state["shift_rng"])
        if self.noise_rng is not None:
            self.noise_rng.set_state(state["noise_rng"])


def taken(outputs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """The (B, units) outputs of each sample's action, of a network's (B, actions, units) outputs."""
    index = actions.view(-1, 1, 1).expand(-1, 1, outputs.shape[2])
    return outputs.gather(1, index).squeeze(1)


def shift_frames(frames: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """DrQ's random shift (Kostrikov et al. 2020) with its draws given: each sample of a (B, C, H, W)
    batch padded with copies of its edge pixels and cropped back to (H, W), shifted by its (B, 2)
    ``offsets`` (rows, columns), every channel alike. One gather on the batch: a shifted pixel reads
    its source pixel, with the source clamped to the frame."""
    batch, channels, height, width = frames.shape
    rows = (torch.arange(height, device=frames.device) + offsets[:, :1]).clamp_(0, height - 1)  # (B, H)
    columns = (torch.arange(width, device=frames.device) + offsets[:, 1:]).clamp_(0, width - 1)  # (B, W)
    sources = (rows[:, :, None] * width + columns[:, None, :]).view(batch, 1, height * width)
    flat = frames.reshape(batch, channels, height * width)
    return flat.gather(2, sources.expand(batch, channels, height * width)).view(batch, channels, height, width)


class AugmentDraws(NamedTuple):
    """One learning step's augmentation draws, made on the host by the agent's generator and read on
    the device by the step, so that a CUDA graph can hold the step (see GraphedLearning)."""

    state_shifts: torch.Tensor  # (B, 2) int64 row and column shifts of the states
    state_factors: torch.Tensor | None  # (B,) float32 intensity factors (None: no intensity step)
    next_shifts: torch.Tensor  # the same for the next states
    next_factors: torch.Tensor | None


class GraphedLearning:
    """A learning step captured once as a CUDA graph and replayed for each batch: the host then
    launches one graph instead of a hundred kernels, which on a GPU is most of a step's time. The
    batch is copied into the graph's own input tensors; the parameters, the gradients and Adam's
    state (capturable) are updated in place, so a target sync and a checkpoint see the same
    tensors (loading a state replaces Adam's, so ``Agent.load_state_dict`` drops the graph). Warm-up steps on a side stream come first, as
    PyTorch's CUDA graph notes ask, so that the libraries' workspaces exist before the capture."""

    WARMUP_STEPS = 3

    def __init__(
        self,
        step: Callable[[Batch, AugmentDraws | None], LearnResult],
        batch: Batch,
        draws: AugmentDraws | None,
        parameters: list[torch.Tensor],
    ) -> None:
        # The graph's own inputs: copies of the batch's tensors (not its slot indices) and draws,
        # into which each replay's are copied.
        self.batch, self.draws = graph_input(batch), graph_input(draws)
        self.graph = torch.cuda.CUDAGraph()
        for parameter in parameters:
            parameter.grad = None  # the captured backward allocates the gradients in the graph's pool
        with torch.cuda.graph(self.graph):
            self.outputs = step(self.batch, self.draws)

    def __call__(self, batch: Batch, draws: AugmentDraws | None) -> LearnResult:
        for inputs, given in ((self.batch, batch), (self.draws, draws)):
            for name, tensor in tensor_fields(inputs):
                tensor.copy_(getattr(given, name))
        self.graph.replay()
        # Copies: the next replay overwrites the graph's outputs.
        return LearnResult(*(output.clone() for output in self.outputs))


def tensor_fields(value: NamedTuple | None) -> list[tuple[str, torch.Tensor]]:
    """The (name, tensor) fields of a named tuple (none of None)."""
    fields = () if value is None else value._asdict().items()
    return [(name, field) for name, field in fields if isinstance(field, torch.Tensor)]


def graph_input(value: NamedTuple | None) -> Any:
    """A copy of a named tuple's tensors, for a graph to read its inputs from."""
    return None if value is None else value._replace(**{name: t.clone() for name, t in tensor_fields(value)})


class GraphedActing:
    """The greedy actions of a batch of states as a CUDA graph: the forward pass and the argmax of a
    small batch are some twenty small kernels, whose launches from the host take longer than the GPU
    takes to run them, and the loop waits for each action. The graph reads the online network's
    parameters (and noise) in place, so learning steps and target syncs need no new capture."""

    WARMUP_STEPS = 3

    def __init__(
        self, q_values: Callable[[torch.Tensor], torch.Tensor], batch_shape: tuple[int, ...], device: torch.device
    ) -> None:
        self.states = torch.zeros(batch_shape, dtype=torch.uint8, device=device)
        side = torch.cuda.Stream(device)  # warm-up beside the capture's stream, as for learning
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side), torch.no_grad():
            for _ in range(self.WARMUP_STEPS):
                q_values(self.states).argmax(dim=1)
        torch.cuda.current_stream(device).wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.no_grad(), torch.cuda.graph(self.graph):
            self.actions = q_values(self.states).argmax(dim=1)

    def __call__(self, states: torch.Tensor) -> np.ndarray:
        """The actions of ``states`` (on the device, or in page-locked host memory)."""
        self.states.copy_(states, non_blocking=True)
        self.graph.replay()
        return self.actions.cpu().numpy()


class Augmentation(NamedTuple):
    """What ``--augment`` does to each sampled frame stack before a learning step."""

    shifts: tuple[int, int]  # the least and the most pixels of the random shift
    intensity: float  # the scale of the random intensity (0: none)

    def draw(self, batch_size: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One batch's draws, shifts then intensities: each sample's (row, column) shift, from
        ``shifts[0]`` to ``shifts[1]`` pixels, both included, and with an intensity, its factor
        1 + intensity * clip(N(0, 1), -2, 2) (SPR's, Schwarzer et al. 2021, as DrQ(eps) in Dopamine)."""
        shifts = torch.randint(self.shifts[0], self.shifts[1] + 1, (batch_size, 2), generator=generator)
        if not self.intensity:
            return shifts, None
        return shifts, 1.0 + self.intensity * torch.randn(batch_size, generator=generator).clamp_(-2.0, 2.0)

    def apply(self, frames: torch.Tensor, shifts: torch.Tensor, factors: torch.Tensor | None) -> torch.Tensor:
        """A (B, C, H, W) batch with its draws applied: uint8 frames out of a shift alone, float frames
        on the 0-255 scale with an intensity."""
        shifted = shift_frames(frames, shifts)
        return shifted if factors is None else shifted * factors.view(-1, 1, 1, 1)


AUGMENTATIONS: dict[str, Augmentation | None] = {
    "none": None,
    # DrQ's paper: 4 pixels of padding, crops at any of the 9 offsets per direction.
    "shift": Augmentation(shifts=(-4, 4), intensity=0.0),
    # Dopamine's drq_image_augmentation (dopamine/labs/atari_100k/atari_100k_rainbow_agent.py): 4
    # pixels of edge padding, crops at offsets 0..7 (jax.random.randint's bound is exclusive), so
    # shifts of -4..+3, then the intensity factor with scale 0.05.
    "dopamine": Augmentation(shifts=(-4, 3), intensity=0.05),
}
