"""Uniform replay memory: stacks, sampleable slots and sampling, against a brute-force log."""

import io

import numpy as np
import pytest
import torch

from dqn_atari.utils_memory import PrioritizedReplayMemory, ReplayMemory
from dqn_atari.utils_types import NATURE_STACKS, StackRule

DEPTH = 4


def encode(step: int) -> np.ndarray:
    """A (1, 3) frame whose pixels spell the global step number plus one, so every frame is unique
    and none is all zeros (a zero-filled stack's padding decodes as -1)."""
    step += 1
    return np.array([[step & 255, (step >> 8) & 255, (step >> 16) & 255]], dtype=np.uint8)


def decode(frames: np.ndarray) -> np.ndarray:
    frames = frames.astype(np.int64)
    return frames[..., 0, 0] + (frames[..., 0, 1] << 8) + (frames[..., 0, 2] << 16) - 1


def play_log(n_steps: int, seed: int) -> list[dict]:
    """Random games with lost lives (terminal, same game), game overs and frame-limit cuts."""
    rng = np.random.default_rng(seed)
    log, first = [], True
    while len(log) < n_steps:
        length = int(rng.integers(1, 12))
        ending = rng.choice(["game_over", "truncated"], p=[0.7, 0.3])
        for i in range(length):
            last = i == length - 1
            done = bool(last and ending == "game_over") or bool(not last and rng.random() < 0.1)  # lost life
            log.append(
                {"action": int(rng.integers(18)), "reward": float(rng.integers(-1, 2)), "done": done, "first": first}
            )
            first = False
        first = True
    return log[:n_steps]


def fill(memory: ReplayMemory, log: list[dict]) -> None:
    for step, entry in enumerate(log):
        memory.push(encode(step), entry["action"], entry["reward"], entry["done"], entry["first"])


def reference_state(log: list[dict], step: int, rule: StackRule = NATURE_STACKS) -> list[int]:
    """The frames (global steps) of the state at ``step``: back to the game's first frame (or, with
    ``rule.per_life``, the first after a terminal step), repeated before it, or zeros (-1)."""
    start = step
    while not log[start]["first"] and not (rule.per_life and log[start - 1]["done"]):
        start -= 1
    padding = -1 if rule.zero_fill else start
    return [step - k if step - k >= start else padding for k in range(DEPTH - 1, -1, -1)]


GAMMA = 0.9


def reference_window(
    log: list[dict], step: int, capacity: int, n_step: int, rule: StackRule = NATURE_STACKS
) -> tuple | None:
    """The transition of ``step`` computed from the log: (return, discount, next state's frames or
    None after a terminal step), or None when it may not be sampled."""
    total = len(log)
    oldest = max(0, total - capacity)
    if step < oldest or step >= total - 1:  # gone, or the newest (no next frame yet)
        return None
    # Once full, the 3 oldest slots are excluded: their stacks may reach overwritten slots.
    if total >= capacity and step - oldest < DEPTH - 1:
        return None
    if min(frame for frame in reference_state(log, step, rule) if frame >= 0) < oldest:
        return None
    value, discount = 0.0, 1.0
    for k in range(n_step):
        value += discount * log[step + k]["reward"]
        if log[step + k]["done"]:  # a lost life or game over ends the sum
            return value, 0.0, None
        discount *= GAMMA
        if step + k + 1 >= total or log[step + k + 1]["first"]:  # not written yet, or cut by the frame limit
            return None
    return value, discount, reference_state(log, step + n_step, rule)


STREAM = 1_000_000  # frames spell stream * STREAM + step


def fill_streams(memory: ReplayMemory, logs: list[list[dict]], seed: int) -> None:
    """Push the streams' steps interleaved in a random order, each stream's in its own order."""
    order = np.random.default_rng(seed).permutation(np.repeat(np.arange(len(logs)), [len(log) for log in logs]))
    pushed = [0] * len(logs)
    for stream in order:
        step, entry = pushed[stream], logs[stream][pushed[stream]]
        memory.push(
            encode(stream * STREAM + step), entry["action"], entry["reward"], entry["done"], entry["first"], stream
        )
        pushed[stream] += 1


@pytest.mark.parametrize("rule", [NATURE_STACKS, StackRule(zero_fill=True, per_life=True)], ids=["nature", "dopamine"])
@pytest.mark.parametrize("n_step", [1, 3, 5])
@pytest.mark.parametrize(
    "capacity,n_steps,streams", [(50, 30, 1), (50, 50, 1), (50, 137, 1), (37, 500, 1), (60, 70, 3), (90, 400, 3)]
)
def test_transitions_match_brute_force(capacity, n_steps, streams, n_step, rule):
    """Sampleable slots, states, n-step returns, discounts and next states at game boundaries,
    lost lives and frame-limit cuts, before and across the circular wrap, for one stream or
    several pushed interleaved (each stream's games of different lengths), under Nature's stacks
    and Dopamine's (zeros before a stack's first frame, a new stack after each terminal step)."""
    logs = [play_log(n_steps + 17 * stream, seed=capacity + n_steps + stream) for stream in range(streams)]
    memory = ReplayMemory(capacity, frame_shape=(1, 3), n_step=n_step, gamma=GAMMA, streams=streams, stack_rule=rule)
    fill_streams(memory, logs, seed=n_step)
    stripe = capacity // streams
    slots = np.arange(capacity)
    stored = decode(memory.frames)  # which stream and step each slot holds
    expected = []
    for slot in slots:
        stream, step = divmod(int(stored[slot]), STREAM)
        filled = slot % stripe < len(logs[slot // stripe])
        assert not filled or stream == slot // stripe  # each stream stays in its stripe
        expected.append(reference_window(logs[stream], step, stripe, n_step, rule) if filled else None)
    mask = memory.sampleable(slots)
    assert mask.tolist() == [window is not None for window in expected]
    batch = memory._batch(slots[mask], np.ones(int(mask.sum()), dtype=np.float32))
    for i, slot in enumerate(slots[mask]):
        stream, step = divmod(int(stored[slot]), STREAM)
        value, discount, next_state = expected[slot]
        assert in_stream(batch.states[i], stream) == reference_state(logs[stream], step, rule)
        assert batch.returns[i].item() == pytest.approx(value, abs=1e-6)
        assert batch.discounts[i].item() == pytest.approx(discount, abs=1e-6)
        if next_state is not None:  # after a terminal step the next state is never used
            assert in_stream(batch.next_states[i], stream) == next_state
    if rule.zero_fill:
        assert (decode(batch.states.numpy()) == -1).any()  # some stacks were zero-filled


def in_stream(stack: torch.Tensor, stream: int) -> list[int]:
    """A stack's frames as steps of ``stream`` (-1: a zero frame)."""
    return [step if step < 0 else step - stream * STREAM for step in decode(stack.numpy()).tolist()]


def test_one_step_transitions_are_nature_dqns_exactly():
    """n = 1: the clipped reward itself, gamma (as float32) or 0 at a terminal step, and the next frame."""
    log = play_log(300, seed=7)
    memory = ReplayMemory(100, frame_shape=(1, 3), seed=3)
    fill(memory, log)
    slots = np.flatnonzero(memory.sampleable(np.arange(100)))
    batch = memory._batch(slots, np.ones(len(slots), dtype=np.float32))
    assert np.array_equal(batch.returns.numpy(), memory.rewards[slots])
    assert np.array_equal(batch.discounts.numpy(), np.float32(0.99) * (1 - memory.dones[slots]).astype(np.float32))
    stacks = memory.stack_slots(slots)
    assert stacks.shape == (len(slots), DEPTH + 1) and np.array_equal(stacks[:, -1], (slots + 1) % 100)
    assert torch.equal(batch.next_states[:, :-1], batch.states[:, 1:])


def test_batch_holds_the_stored_transition():
    log = play_log(300, seed=1)
    memory = ReplayMemory(100, frame_shape=(1, 3), seed=3)
    fill(memory, log)
    batch = memory.sample(64)
    steps = decode(batch.states.numpy()[:, -1])
    for i, step in enumerate(steps):
        assert batch.actions[i] == log[step]["action"]
        assert batch.returns[i] == log[step]["reward"]
        assert batch.discounts[i] == np.float32(0.99) * (not log[step]["done"])
        assert decode(memory.frames[batch.indices[i]]) == step
    assert batch.states.dtype == torch.uint8 and batch.states.shape == (64, DEPTH, 1, 3)
    assert torch.equal(batch.weights, torch.ones(64))


@pytest.mark.parametrize("streams", [1, 3])
def test_uniform_sampling_is_uniform_over_sampleable_slots(streams):
    logs = [play_log(250 - 60 * stream, seed=2 + stream) for stream in range(streams)]  # some stripes not full
    memory = ReplayMemory(100 if streams == 1 else 102, frame_shape=(1, 3), seed=4, streams=streams)
    fill_streams(memory, logs, seed=5)
    counts = np.bincount(np.concatenate([memory.sample(1000).indices for _ in range(200)]), minlength=memory.capacity)
    mask = memory.sampleable(np.arange(memory.capacity))
    assert counts[~mask].sum() == 0
    expected = counts.sum() / mask.sum()
    chi2 = ((counts[mask] - expected) ** 2 / expected).sum()
    dof = mask.sum() - 1
    assert chi2 < dof + 5 * np.sqrt(2 * dof)


@pytest.mark.parametrize("frames_on_device", [False, True])
def test_batches_drawn_together_are_those_drawn_one_at_a_time(frames_on_device):
    """A round's batches drawn at once (sample_batches) are the batches of as many calls of sample, field for field,
    the redraws of frame-limited steps included, and leave the generator where the calls leave it; a prioritized
    memory, whose draws depend on each step's priorities, refuses."""
    logs = [play_log(160, seed=7 + stream) for stream in range(3)]  # a third of the games cut by the frame limit
    one_at_a_time, together = (
        ReplayMemory(150, frame_shape=(1, 3), seed=9, streams=3, n_step=3, frames_on_device=frames_on_device)
        for _ in range(2)
    )
    for memory in (one_at_a_time, together):
        fill_streams(memory, logs, seed=5)
    singles = [one_at_a_time.sample(16) for _ in range(40)]
    drawn = together.sample_batches(40, 16)
    assert len(drawn) == 40 and all(len(batch.indices) == 16 for batch in drawn)
    for single, batch in zip(singles, drawn, strict=True):
        for name, value in single._asdict().items():
            np.testing.assert_array_equal(np.asarray(getattr(batch, name)), np.asarray(value), err_msg=name)
    assert together.rng.integers(10**9) == one_at_a_time.rng.integers(10**9)
    sizes = together._range_sizes()
    in_range = together._range_slots(np.arange(sizes.sum()), sizes)
    assert (~together.sampleable(in_range)).mean() > 0.02  # so that some of the 640 draws were redrawn
    prioritized = PrioritizedReplayMemory(150, frame_shape=(1, 3), streams=3)
    fill_streams(prioritized, logs, seed=5)
    assert not prioritized.draws_ahead and together.draws_ahead
    with pytest.raises(TypeError, match="one at a time"):
        prioritized.sample_batches(2, 16)


def test_too_few_steps_to_sample():
    memory = ReplayMemory(10, frame_shape=(1, 3))
    memory.push(encode(0), 0, 0.0, False, True)
    with pytest.raises(ValueError, match="too few"):
        memory.sample(4)


def test_bytes_per_transition_at_84x84():
    memory = ReplayMemory(1000)
    assert memory.nbytes / memory.capacity == 84 * 84 + 7


@pytest.mark.parametrize("frames_on_device", [False, True], ids=["host", "device-code"])
@pytest.mark.parametrize("streams", [1, 3])
def test_state_dict_round_trip(streams, frames_on_device):
    # The first stripe wrapped, the others (of 33 slots) not full: saved from a view of the first slots with one
    # stream, gathered with three.
    logs = [play_log(length, seed=5 + stream) for stream, length in enumerate([180, 30, 20][:streams])]
    memory = ReplayMemory(100, frame_shape=(1, 3), seed=6, streams=streams, frames_on_device=frames_on_device)
    fill_streams(memory, logs, seed=1)
    buffer = io.BytesIO()
    torch.save(memory.state_dict(), buffer)
    buffer.seek(0)
    copy = ReplayMemory(100, frame_shape=(1, 3), seed=99, streams=streams, frames_on_device=frames_on_device)
    copy.load_state_dict(torch.load(buffer, weights_only=True))
    assert np.array_equal(copy.frames, memory.frames) and np.array_equal(copy.cursors, memory.cursors)
    for _ in range(3):
        a, b = memory.sample(16), copy.sample(16)
        assert np.array_equal(a.indices, b.indices) and torch.equal(a.states, b.states)


@pytest.mark.parametrize("memory_class", [ReplayMemory, PrioritizedReplayMemory])
@pytest.mark.parametrize("streams", [1, 3])
def test_the_state_of_a_full_memory_copies_none_of_it(memory_class, streams):
    """A full memory's state (what --save-memory writes at every checkpoint of a long run) views its arrays: a copy
    of a 1M-step memory's frames held a second 7 GB during the save, and two runs on one 24 GB machine that saved at
    once were killed for it. A memory with a stripe not yet full still saves just its filled slots (the round trip
    above)."""
    memory = memory_class(99, frame_shape=(1, 3), streams=streams)
    fill_streams(memory, [play_log(150, seed=5 + stream) for stream in range(streams)], seed=1)
    state = memory.state_dict()
    arrays = {name: getattr(memory, name) for name in memory._arrays}
    if isinstance(memory, PrioritizedReplayMemory):
        arrays |= {"priorities": memory.tree.leaves, "initial_td_errors": memory.initial_td_errors}
    for name, array in arrays.items():
        assert np.shares_memory(state[name].numpy(), array), name


@pytest.mark.parametrize("frames_on_device", [False, True], ids=["host", "device-code"])
@pytest.mark.parametrize("rule", [NATURE_STACKS, StackRule(zero_fill=True, per_life=True)], ids=["nature", "dopamine"])
def test_multi_channel_frames_stack_as_depth_times_channels(rule, frames_on_device):
    """Frames of several channels (a gymnasium environment's whole observation, MinAtar's 4 channels):
    a state is the stack's frames one after another, channels of the oldest first, (depth x channels, H, W)."""
    log = play_log(200, seed=11)
    memory = ReplayMemory(100, frame_shape=(2, 1, 3), n_step=2, gamma=GAMMA, stack_rule=rule,
                          frames_on_device=frames_on_device)  # fmt: skip
    for step, entry in enumerate(log):
        frame = np.stack([encode(step), 255 - encode(step)])  # the second channel differs from the first
        memory.push(frame, entry["action"], entry["reward"], entry["done"], entry["first"])
    slots = np.flatnonzero(memory.sampleable(np.arange(100)))
    batch = memory._batch(slots, np.ones(len(slots), dtype=np.float32))
    assert batch.states.shape == batch.next_states.shape == (len(slots), DEPTH * 2, 1, 3)
    states = batch.states.numpy().reshape(len(slots), DEPTH, 2, 1, 3)
    for i, slot in enumerate(slots):
        step = int(decode(np.asarray(memory.frames[slot][0])))  # (a tensor with its frames on the device)
        expected = reference_state(log, step, rule)
        assert decode(states[i, :, 0]).tolist() == expected
        padded = np.array(expected) < 0  # zero-filled frames are zeros in every channel
        assert np.array_equal(states[i, ~padded, 1], 255 - states[i, ~padded, 0]) and not states[i, padded].any()
