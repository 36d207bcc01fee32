"""The agent and network: schedules, acting, TD targets by hand, learning steps, checkpoints."""

import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from dqn_atari.utils_drl import AUGMENTATIONS, Agent, Augmentation, linear_schedule, shift_frames
from dqn_atari.utils_heads import ScalarHead
from dqn_atari.utils_model import NETWORKS, QNetwork, smallest_input
from dqn_atari.utils_run import CheckpointError, load_checkpoint, save_checkpoint
from dqn_atari.utils_types import Batch


def test_linear_schedule_nature_epsilon():
    assert linear_schedule(0, 1.0, 0.1, 1_000_000) == 1.0
    assert linear_schedule(500_000, 1.0, 0.1, 1_000_000) == pytest.approx(0.55)
    assert linear_schedule(1_000_000, 1.0, 0.1, 1_000_000) == pytest.approx(0.1)
    assert linear_schedule(5_000_000, 1.0, 0.1, 1_000_000) == pytest.approx(0.1)
    assert linear_schedule(250, 0.4, 1.0, 1000) == pytest.approx(0.55)  # the beta schedule
    assert linear_schedule(0, 1.0, 0.1, 0) == 0.1


def test_nature_cnn_shape_and_size():
    model = QNetwork(4)
    out = model(torch.zeros(2, 4, 84, 84, dtype=torch.uint8))
    assert out.shape == (2, 4, 1)  # (batch, actions, units): one unit, a Q-value
    # conv 8224 + 32832 + 36928, fc 3136*512+512, head 512*4+4 (Mnih et al. 2015)
    assert sum(p.numel() for p in model.parameters()) == 1_686_180
    dueling = QNetwork(6, dueling=True)
    assert dueling(torch.zeros(3, 4, 84, 84, dtype=torch.uint8)).shape == (3, 6, 1)
    # Two 512-unit streams: the value's adds 3136*512+512 + 513 (Wang et al. 2016)
    assert sum(p.numel() for p in dueling.parameters()) == 1_686_180 + 2 * 513 + 1_606_144 + 513


def test_dopamine_network_is_same_padded_shared_and_glorot_initialised():
    """--network dopamine, as Dopamine's FullRainbowNetwork: flax's SAME padding (TensorFlow's: the
    odd pixel after) gives 21x21, 11x11, 11x11 outputs and 7,744 features; one 512-unit layer feeds
    the value and the advantages; Glorot-uniform weights, zero biases."""
    torch.manual_seed(0)
    network = QNetwork(6, dueling=True, network="dopamine")
    frames = torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8)
    # The convolutions against explicitly padded ones: pads (2, 2), (1, 2) and (1, 1) per side.
    x = frames / 255.0
    convolutions = [m for m in network.features if isinstance(m, nn.Conv2d)]
    for conv, (before, after), size in zip(convolutions, [(2, 2), (1, 2), (1, 1)], [21, 11, 11], strict=True):
        x = F.relu(F.conv2d(F.pad(x, (before, after, before, after)), conv.weight, conv.bias, conv.stride))
        assert x.shape[-2:] == (size, size)
    assert torch.allclose(network.features(frames / 255.0), x.flatten(1), atol=1e-5)
    hidden = F.relu(network.hidden[0](x.flatten(1)))
    value, advantages = network.value(hidden), network.head(hidden)
    expected = value + advantages - advantages.mean(1, keepdim=True)
    assert torch.allclose(network(frames).squeeze(2), expected, atol=1e-5)
    # conv 8224 + 32832 + 36928, fc 7744*512+512, advantages 512*6+6, value 513
    assert sum(p.numel() for p in network.parameters()) == 77_984 + 3_965_440 + 3_078 + 513
    for module in (*convolutions, network.hidden[0], network.head, network.value):
        fan_in, fan_out = module.weight[0].numel(), module.weight[:, 0].numel()
        bound = math.sqrt(6 / (fan_in + fan_out))
        assert module.weight.abs().max() <= bound and module.weight.abs().max() > 0.95 * bound
        assert module.weight.std().item() == pytest.approx(bound / math.sqrt(3), rel=0.05)
        assert not module.bias.any()
    assert QNetwork(6, network="dopamine")(frames).shape == (2, 6, 1)


def test_minatar_network_is_young_and_tians_and_frames_too_small_are_refused():
    """--network minatar as MinAtar's examples/dqn.py: conv 16x3x3/1 unpadded (8x8 out of 10x10), fc 128."""
    network = QNetwork(3, (4, 10, 10), network="minatar")
    assert network(torch.zeros(5, 4, 10, 10, dtype=torch.uint8)).shape == (5, 3, 1)
    # conv 4*9*16+16, fc 8*8*16*128+128, head 128*3+3
    assert sum(p.numel() for p in network.parameters()) == 592 + 131_200 + 387
    assert (smallest_input("nature"), smallest_input("minatar"), smallest_input("dopamine")) == (36, 3, 1)
    assert QNetwork(2, (4, 36, 36))(torch.zeros(1, 4, 36, 36)).shape == (1, 2, 1)  # the smallest the Nature one reads
    with pytest.raises(ValueError, match="the nature network needs frames of at least 36x36 pixels, these are 35x84"):
        QNetwork(2, (4, 35, 84))
    # Frames need not be square: SAME padding per axis (84 -> 21, 11, 11; 60 -> 15, 8, 8).
    assert QNetwork(2, (3, 84, 60), network="dopamine").features(torch.zeros(1, 3, 84, 60)).shape == (1, 64 * 11 * 8)


class PixelQ(nn.Module):
    """A fake network whose Q-values are pixels of the newest frame: row ``row``, first 3 columns."""

    def __init__(self, row: int) -> None:
        super().__init__()
        self.row = row

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, -1, self.row, :3, None].float()  # (B, actions, 1 unit)


def make_batch(next_q_rows, returns, discounts, states=None) -> Batch:
    n = len(returns)
    next_states = torch.zeros(n, 4, 2, 3, dtype=torch.uint8)
    next_states[:, -1] = torch.tensor(next_q_rows, dtype=torch.uint8)
    return Batch(
        states=torch.zeros(n, 4, 2, 3, dtype=torch.uint8) if states is None else states,
        actions=torch.zeros(n, dtype=torch.int64),
        returns=torch.tensor(returns, dtype=torch.float32),
        next_states=next_states,
        discounts=torch.tensor(discounts, dtype=torch.float32),
        weights=torch.ones(n),
        indices=np.arange(n),
    )


def test_td_targets_by_hand():
    agent = Agent(3)
    agent.online, agent.target = PixelQ(row=0), PixelQ(row=1)
    # next state rows: row 0 is what the online net sees, row 1 what the target net sees
    rows = [
        [[1, 9, 2], [4, 5, 6]],  # online prefers action 1; target's max is 6 (action 2)
        [[7, 0, 0], [3, 8, 1]],  # online prefers action 0; terminal below, so no bootstrap
        [[0, 0, 5], [2, 2, 2]],
    ]
    # The third is a 3-step window: return 1 + 0.9 * 0 + 0.81 * 1, bootstrapped with 0.9 ** 3.
    batch = make_batch(rows, returns=[1.0, -1.0, 1.81], discounts=[0.9, 0.0, 0.729])
    # DQN: G + discount * max_a Q_target(s', a)
    assert torch.allclose(agent.td_targets(batch), torch.tensor([1 + 0.9 * 6, -1.0, 1.81 + 0.729 * 2]))
    # Double DQN: G + discount * Q_target(s', argmax_a Q_online(s', a))
    agent.double = True
    assert torch.allclose(agent.td_targets(batch), torch.tensor([1 + 0.9 * 5, -1.0, 1.81 + 0.729 * 2]))


def test_td_targets_with_the_online_network_as_target():
    """A target updated every step (the Atari 100k recipes) is the online network: one network,
    and Double DQN's target is then the plain max of its values."""
    agent = Agent(3, separate_target=False)
    assert agent.target is agent.online
    agent.online = agent.target = PixelQ(row=0)
    rows = [[[1, 9, 2], [0, 0, 0]], [[7, 0, 0], [0, 0, 0]]]
    batch = make_batch(rows, returns=[1.0, 2.0], discounts=[0.9, 0.5])
    expected = torch.tensor([1 + 0.9 * 9, 2 + 0.5 * 7])
    assert torch.allclose(agent.td_targets(batch), expected)
    agent.double = True
    assert torch.allclose(agent.td_targets(batch), expected)


def test_without_a_separate_target_nothing_is_copied_and_checkpoints_round_trip(tmp_path):
    agent = Agent(4, seed=6, lr=1e-3, separate_target=False)
    agent.learn(real_batch())
    agent.sync_target()  # a no-op: nothing to copy
    assert agent.target is agent.online
    save_checkpoint(tmp_path / "model_000.pt", whole(agent))
    restored = Agent(4, seed=99, lr=1e-3, separate_target=False)
    restored.load_state_dict(load_checkpoint(tmp_path / "model_000.pt")["agent"])
    batch = real_batch(seed=1)
    assert agent.learn(batch).loss == restored.learn(batch).loss


def edge_filled_crop(frames: torch.Tensor, pixels: int, shifts: torch.Tensor) -> torch.Tensor:
    """DrQ's definition, sample by sample: pad by ``pixels`` repeating the edges, crop at the shift."""
    padded = F.pad(frames.float(), (pixels,) * 4, mode="replicate")
    height, width = frames.shape[-2:]
    crops = [
        padded[i, :, pixels + dy : pixels + dy + height, pixels + dx : pixels + dx + width]
        for i, (dy, dx) in enumerate(shifts.tolist())
    ]
    return torch.stack(crops).to(frames.dtype)


def test_random_shift_is_an_edge_filled_shift_per_sample():
    frames = torch.randint(0, 256, (64, 4, 12, 10), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    shift = Augmentation(shifts=(-3, 3), intensity=0.0)
    shifts, factors = shift.draw(64, torch.Generator().manual_seed(7))
    assert factors is None  # no intensity step, and no draw for it
    assert torch.equal(shifts, torch.randint(-3, 4, (64, 2), generator=torch.Generator().manual_seed(7)))
    shifted = shift.apply(frames, shifts, factors)
    assert shifted.shape == frames.shape and shifted.dtype == torch.uint8
    assert torch.equal(shifted, edge_filled_crop(frames, 3, shifts))
    assert len({tuple(shift) for shift in shifts.tolist()}) > 20  # each sample its own shift, of 49
    assert shifts.min() == -3 and shifts.max() == 3
    # A shift of (1, -2) by hand: row i reads row i + 1, column j reads column j - 2, clamped to the frame.
    one = frames[:1]
    by_hand = one[:, :, [min(i + 1, 11) for i in range(12)]][:, :, :, [max(j - 2, 0) for j in range(10)]]
    assert torch.equal(edge_filled_crop(one, 3, torch.tensor([[1, -2]])), by_hand)
    # Views (the memory's states are a slice of its gathered frames) are read as they are.
    wide = torch.randint(0, 256, (8, 5, 12, 10), dtype=torch.uint8)
    offsets = torch.randint(-2, 3, (8, 2))
    assert torch.equal(shift_frames(wide[:, 1:], offsets), shift_frames(wide[:, 1:].contiguous(), offsets))


def test_learning_with_shifts_is_learning_on_shifted_states_and_next_states():
    """--augment shift: the states, then the next states, each get their own shifts from the
    agent's generator (seeded by the run's seed), and learning goes on exactly as without."""
    batch = real_batch()
    shifting = Agent(4, seed=5, lr=1e-3, augment="shift")
    plain = Agent(4, seed=5, lr=1e-3)
    generator = torch.Generator().manual_seed(5)
    shifted = batch._replace(
        states=edge_filled_crop(batch.states, 4, torch.randint(-4, 5, (8, 2), generator=generator)),
        next_states=edge_filled_crop(batch.next_states, 4, torch.randint(-4, 5, (8, 2), generator=generator)),
    )
    assert not torch.equal(shifted.states, batch.states)
    assert shifting.learn(batch).loss == plain.learn(shifted).loss
    for a, b in zip(shifting.online.parameters(), plain.online.parameters(), strict=True):
        assert torch.equal(a, b)
    assert shifting.learn(batch).loss != plain.learn(shifted).loss  # new shifts for the next batch


def test_dopamines_augmentation_shifts_by_minus_4_to_3_and_scales_each_sample():
    """--augment dopamine, as Dopamine's drq_image_augmentation: edge padding of 4 and crops at
    offsets 0..7 (shifts -4..+3, drawn per sample), then each sample times 1 + 0.05 * clip(N(0, 1),
    -2, 2) (drawn per sample, the same over its frames and pixels)."""
    augmentation = AUGMENTATIONS["dopamine"]
    assert augmentation.shifts == (-4, 3) and augmentation.intensity == 0.05
    frames = torch.randint(0, 256, (4096, 4, 12, 10), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    augmented = augmentation.apply(frames, *augmentation.draw(4096, torch.Generator().manual_seed(3)))
    # The same draws, in the same order: the shifts, then the intensities.
    generator = torch.Generator().manual_seed(3)
    shifts = torch.randint(-4, 4, (4096, 2), generator=generator)
    factors = 1 + 0.05 * torch.randn(4096, generator=generator).clamp(-2, 2)
    expected = edge_filled_crop(frames, 4, shifts).float() * factors.view(-1, 1, 1, 1)
    assert augmented.dtype == torch.float32 and torch.allclose(augmented, expected)
    assert shifts.min() == -4 and shifts.max() == 3 and len({tuple(s) for s in shifts.tolist()}) == 64
    # The factors: within [0.9, 1.1], mean 1, a clipped normal's spread (0.05 * 0.9354: the standard
    # deviation of N(0, 1) clipped to [-2, 2]), and 2.3% of them at each bound.
    assert factors.min() >= 0.9 and factors.max() <= 1.1
    assert factors.mean().item() == pytest.approx(1.0, abs=0.003)
    assert factors.std().item() == pytest.approx(0.05 * 0.9354, rel=0.05)
    assert (factors == 1.1).float().mean().item() == pytest.approx(0.0228, abs=0.008)
    # Recovered from the output: each sample's ratio to its shifted frames is one number.
    shifted = edge_filled_crop(frames, 4, shifts).float()
    ratios = augmented / shifted.clamp(min=1)
    nonzero = shifted > 0
    assert torch.allclose(ratios[nonzero], factors.view(-1, 1, 1, 1).expand_as(ratios)[nonzero], atol=1e-5)
    assert AUGMENTATIONS["shift"].shifts == (-4, 4) and AUGMENTATIONS["none"] is None


def real_batch(n=8, seed=0) -> Batch:
    g = torch.Generator().manual_seed(seed)
    return Batch(
        states=torch.randint(0, 256, (n, 4, 84, 84), dtype=torch.uint8, generator=g),
        actions=torch.randint(0, 4, (n,), generator=g),
        returns=torch.randint(-1, 2, (n,), generator=g).float(),
        next_states=torch.randint(0, 256, (n, 4, 84, 84), dtype=torch.uint8, generator=g),
        discounts=0.99 * torch.randint(0, 2, (n,), generator=g).float(),
        weights=torch.rand(n, generator=g) + 0.5,
        indices=np.arange(n),
    )


@pytest.mark.parametrize("loss", ["huber", "mse"])
def test_learn_reports_td_errors_and_weighted_loss(loss):
    agent = Agent(4, seed=1, lr=1e-3, head=ScalarHead(loss))
    batch = real_batch()
    batch = batch._replace(returns=3 * batch.returns)  # TD errors on both sides of Huber's kink at 1
    with torch.no_grad():
        q = agent.q_values(batch.states).gather(1, batch.actions[:, None]).squeeze(1)
        targets = agent.td_targets(batch)
    td = targets - q
    assert (td.abs() > 1).any() and (td.abs() < 1).any()
    huber = torch.where(td.abs() < 1, 0.5 * td**2, td.abs() - 0.5)
    expected = huber if loss == "huber" else td**2
    result = agent.learn(batch)
    assert np.allclose(result.priorities, td.abs().numpy(), atol=1e-6)
    assert result.loss == pytest.approx((batch.weights * expected).mean().item(), rel=1e-5)
    assert result.mean_q == pytest.approx(q.mean().item(), rel=1e-5, abs=1e-6)


def test_an_infinite_grad_clip_learns_exactly_as_a_clip_too_large_to_bite():
    """--grad-clip inf (the Atari 100k recipe) skips the gradient's norm: the same weights bit for bit."""
    batch = real_batch()
    unclipped = Agent(4, seed=7, lr=1e-3, grad_clip=math.inf, separate_target=False)
    huge_clip = Agent(4, seed=7, lr=1e-3, grad_clip=1e30, separate_target=False)
    for _ in range(3):
        assert unclipped.learn(batch).loss == huge_clip.learn(batch).loss
    pairs = zip(unclipped.online.parameters(), huge_clip.online.parameters(), strict=True)
    assert all(torch.equal(a, b) for a, b in pairs)


def test_zero_weights_leave_the_network_unchanged_and_repeated_steps_fit():
    agent = Agent(4, seed=2, lr=1e-3)
    before = [p.clone() for p in agent.online.parameters()]
    batch = real_batch()
    agent.learn(batch._replace(weights=torch.zeros(8)))
    assert all(torch.equal(a, b) for a, b in zip(before, agent.online.parameters(), strict=True))
    losses = [agent.learn(batch).loss for _ in range(30)]
    assert losses[-1] < 0.2 * losses[0]
    target_before = agent.target(batch.states)
    agent.sync_target()
    assert not torch.equal(target_before, agent.target(batch.states))
    assert torch.equal(agent.target(batch.states), agent.online(batch.states))


def test_epsilon_greedy():
    agent = Agent(4, seed=3)
    state = np.zeros((4, 84, 84), dtype=np.uint8)
    greedy = int(agent.q_values(torch.from_numpy(state)[None]).argmax())
    assert {agent.act(state, 0.0) for _ in range(20)} == {greedy}
    counts = np.bincount([agent.act(state, 1.0) for _ in range(4000)], minlength=4)
    assert counts.min() > 850  # uniform: 1000 each
    share = np.mean([agent.act(state, 0.5) == greedy for _ in range(4000)])
    assert share == pytest.approx(0.5 + 0.5 / 4, abs=0.03)


def test_checkpoint_round_trip(tmp_path):
    agent = Agent(4, seed=4, lr=1e-3)
    agent.learn(real_batch())
    save_checkpoint(tmp_path / "model_000.pt", whole(agent))
    restored = Agent(4, seed=99, lr=1e-3)
    restored.load_state_dict(load_checkpoint(tmp_path / "model_000.pt")["agent"])
    batch = real_batch(seed=1)
    assert torch.equal(agent.online(batch.states), restored.online(batch.states))
    assert torch.equal(agent.target(batch.states), restored.target(batch.states))
    assert agent.learn(batch).loss == restored.learn(batch).loss  # same optimizer state
    state = np.zeros((4, 84, 84), dtype=np.uint8)
    assert [agent.act(state, 0.5) for _ in range(50)] == [restored.act(state, 0.5) for _ in range(50)]
    assert not list(tmp_path.glob(".*tmp"))


def test_an_agent_loaded_from_a_live_agent_learns_on_its_own():
    """Loading another agent's state (not a file) copies it: the two agents' steps stay apart,
    the same losses and weights bit for bit (torch's optimizer would keep the given tensors)."""
    source = Agent(4, seed=5, lr=1e-3)
    source.learn(real_batch())
    copy = Agent(4, seed=6, lr=1e-3)
    copy.load_state_dict(source.state_dict())
    for seed in range(1, 4):
        batch = real_batch(seed=seed)
        assert source.learn(batch).loss == copy.learn(batch).loss
    pairs = zip(source.online.parameters(), copy.online.parameters(), strict=True)
    assert all(torch.equal(a, b) for a, b in pairs)


def test_bad_checkpoints_raise_one_clear_error(tmp_path):
    with pytest.raises(CheckpointError, match="no checkpoint"):
        load_checkpoint(tmp_path / "missing.pt")
    save_checkpoint(tmp_path / "good.pt", whole(Agent(4)))
    assert load_checkpoint(str(tmp_path / "good.pt"))["run"]["step"] == 0  # a str path as well as a Path
    (tmp_path / "cut.pt").write_bytes((tmp_path / "good.pt").read_bytes()[:5000])
    with pytest.raises(CheckpointError, match="truncated"):
        load_checkpoint(tmp_path / "cut.pt")
    torch.save({"weights": torch.zeros(3)}, tmp_path / "foreign.pt")
    with pytest.raises(CheckpointError, match="not a checkpoint of this program"):
        load_checkpoint(tmp_path / "foreign.pt")
    # Our format, but parts missing or of the wrong kind: one error, never a KeyError later.
    for broken, named in [({}, "agent, config, run"), ({**whole(Agent(4)), "run": {"step": "7"}}, "run step")]:
        save_checkpoint(tmp_path / "part.pt", broken)
        with pytest.raises(CheckpointError, match=f"is not a whole checkpoint \\(its {named} missing or damaged\\)"):
            load_checkpoint(tmp_path / "part.pt")


def whole(agent: Agent) -> dict:
    """A checkpoint's parts, around ``agent``."""
    return {"config": {}, "run": {"step": 0}, "agent": agent.state_dict()}


def test_the_design_counts_the_network_variants():
    """docs/design.md said two variants when --network had three."""
    design = (Path(__file__).resolve().parent.parent / "docs" / "design.md").read_text()
    count = {2: "two", 3: "three", 4: "four", 5: "five"}[len(NETWORKS)]
    assert f"{count} variants from one class (`--network`)" in design
