"""Tests of the sum tree and the proportional prioritized replay memory in utils_memory."""

from __future__ import annotations

import io
import math
from collections.abc import Iterator

import numpy as np
import pytest
import torch

from dqn_atari.utils_memory import PrioritizedReplayMemory, ReplayMemory, SumTree

FRAME_SHAPE = (4, 4)  # the memory logic does not depend on the frame size


def game_steps(seed: int = 0) -> Iterator[tuple[np.ndarray, int, float, bool, bool]]:
    """Endless ``push`` arguments of short games: some end with game over, every third is cut
    by the frame limit (its last step is not terminal), and lives are lost along the way."""
    rng = np.random.default_rng(seed)
    step, game = 0, 0
    while True:
        game += 1
        length = int(rng.integers(2, 12))
        for t in range(length):
            # Every third game is cut by the frame limit; earlier steps may lose a life.
            done = game % 3 != 0 if t == length - 1 else bool(rng.random() < 0.1)
            yield np.full(FRAME_SHAPE, step % 256, dtype=np.uint8), step % 3, float(step % 2), done, t == 0
            step += 1


def play(memory: ReplayMemory, steps: int, source: Iterator[tuple]) -> None:
    for _ in range(steps):
        memory.push(*next(source))


def prioritized(
    capacity: int, steps: int, seed: int = 0, **options: float
) -> tuple[PrioritizedReplayMemory, Iterator[tuple]]:
    """A memory filled with ``steps`` steps, and the games to continue from."""
    memory = PrioritizedReplayMemory(capacity, frame_shape=FRAME_SHAPE, seed=seed, **options)
    source = game_steps(seed)
    play(memory, steps, source)
    return memory, source


def push_step(memory: PrioritizedReplayMemory) -> int:
    """Push a step in the middle of a game, so the step before it becomes sampleable."""
    return memory.push(np.zeros(FRAME_SHAPE, np.uint8), 0, 0.0, False, False)


def log_uniform(rng: np.random.Generator, size: int, low: float, high: float) -> np.ndarray:
    return np.exp(rng.uniform(np.log(low), np.log(high), size))


def assert_consistent(tree: SumTree) -> None:
    nodes, capacity = tree.nodes, tree.capacity
    np.testing.assert_array_equal(nodes[1:capacity], nodes[2::2] + nodes[3::2])


def assert_proportional(tree: SumTree, rng: np.random.Generator, batch_size: int, batches: int) -> None:
    """Sampling frequencies match leaf / total: Pearson's chi-square below df + 5 sd, bins
    expecting fewer than 5 draws pooled into one; a zero leaf is never drawn."""
    drawn = np.concatenate([tree.sample(batch_size, rng) for _ in range(batches)])
    counts = np.bincount(drawn, minlength=tree.capacity)
    assert counts[tree.leaves == 0].sum() == 0
    expected = drawn.size * tree.leaves / tree.total
    rare = (expected > 0) & (expected < 5)
    observed = np.append(counts[expected >= 5], counts[rare].sum())
    expected = np.append(expected[expected >= 5], expected[rare].sum())
    if expected[-1] == 0:  # nothing rare to pool
        observed, expected = observed[:-1], expected[:-1]
    statistic = float(((observed - expected) ** 2 / expected).sum())
    df = observed.size - 1
    assert statistic < df + 5 * math.sqrt(2 * df), (statistic, df)


def tree_with(leaves: np.ndarray) -> SumTree:
    tree = SumTree(leaves.size)
    tree.update(np.arange(leaves.size), leaves)
    return tree


class FixedUniforms:
    """Stands in for a numpy Generator whose uniform draws all equal ``value``."""

    def __init__(self, value: float) -> None:
        self.value = value

    def random(self, size: int) -> np.ndarray:
        return np.full(size, self.value)


def test_sum_tree_stays_exact_over_millions_of_updates() -> None:
    rng = np.random.default_rng(0)
    tree = SumTree(100_000)
    for _ in range(2000):
        slots = rng.integers(0, tree.capacity, 1000)
        tree.update(slots, log_uniform(rng, 1000, 1e-6, 1e6))
    assert_consistent(tree)
    assert tree.total == pytest.approx(math.fsum(tree.leaves), rel=1e-9)


def test_sum_tree_repeated_slot_takes_the_last_value() -> None:
    tree = SumTree(10)
    tree.update(np.array([3, 5, 3]), np.array([1.0, 2.0, 7.0]))
    assert tree.leaves[3] == 7.0
    assert tree.total == 9.0
    assert_consistent(tree)


def test_sum_tree_rebuild_reproduces_update() -> None:
    rng = np.random.default_rng(1)
    tree = tree_with(rng.random(37))
    rebuilt = SumTree(37)
    rebuilt.leaves[:] = tree.leaves
    rebuilt.rebuild()
    np.testing.assert_array_equal(rebuilt.nodes, tree.nodes)
    assert tree.nbytes == 16 * 37


@pytest.mark.parametrize("capacity", [1000, 37, 1024])
@pytest.mark.parametrize("kind", ["uniform", "skewed", "sparse"])
def test_sum_tree_samples_in_proportion(capacity: int, kind: str) -> None:
    rng = np.random.default_rng(capacity)
    if kind == "uniform":
        leaves = np.ones(capacity)
    elif kind == "skewed":
        leaves = log_uniform(rng, capacity, 1e-6, 1e6)
    else:
        leaves = np.where(rng.random(capacity) < 0.9, 0.0, log_uniform(rng, capacity, 1e-3, 1e3))
        leaves[[0, -1]] = 0.0
    assert_proportional(tree_with(leaves), rng, batch_size=64, batches=3000)


@pytest.mark.parametrize("uniform", [0.0, 0.5, np.nextafter(1.0, 0.0)])
def test_sum_tree_never_returns_a_zero_leaf_at_the_edges(uniform: float) -> None:
    # Magnitudes far apart make the sums round off the small leaves, and zero leaves sit
    # at both ends and between positive ones.
    rng = np.random.default_rng(2)
    for capacity in [37, 64, 1000]:
        for _ in range(20):
            leaves = np.where(rng.random(capacity) < 0.7, 0.0, log_uniform(rng, capacity, 1e-12, 1e16))
            leaves[[0, -1]] = 0.0
            leaves[rng.integers(1, capacity - 1)] = 1e-300
            slots = tree_with(leaves).sample(32, FixedUniforms(uniform))
            assert (leaves[slots] > 0).all()


def test_sum_tree_refuses_to_sample_all_zero_leaves() -> None:
    with pytest.raises(ValueError):
        SumTree(8).sample(4, np.random.default_rng(0))


def leaves_in_tree_order(capacity: int) -> np.ndarray:
    """Slots in the order the descent partitions [0, total): leaves left to right."""
    order, pending = [], [1]
    while pending:
        node = pending.pop()
        if node >= capacity:
            order.append(node - capacity)
        else:
            pending += [2 * node + 1, 2 * node]
    return np.array(order)


@pytest.mark.parametrize(("batch_size", "per_segment"), [(8, 4), (8, 5), (32, 3)])
def test_sum_tree_draws_one_slot_per_segment(batch_size: int, per_segment: int) -> None:
    capacity = batch_size * per_segment
    tree = tree_with(np.ones(capacity))
    rank = np.argsort(leaves_in_tree_order(capacity))
    rng = np.random.default_rng(3)
    for _ in range(500):
        segments = rank[tree.sample(batch_size, rng)] // per_segment
        np.testing.assert_array_equal(segments, np.arange(batch_size))


def assert_leaves_match_sampleable(memory: PrioritizedReplayMemory) -> None:
    sampleable = memory.sampleable(np.arange(memory.capacity))
    np.testing.assert_array_equal(memory.tree.leaves > 0, sampleable)


@pytest.mark.parametrize("n_step,streams", [(1, 1), (3, 1), (5, 1), (1, 3), (3, 2)])
def test_leaves_are_positive_exactly_where_sampleable(n_step: int, streams: int) -> None:
    memory = PrioritizedReplayMemory(23 * streams, frame_shape=FRAME_SHAPE, n_step=n_step, streams=streams)
    sources = [game_steps(4 + stream) for stream in range(streams)]
    rng = np.random.default_rng(4)
    for step in range(250 * streams):
        stream = int(rng.integers(streams))
        memory.push(*next(sources[stream]), stream)
        assert_leaves_match_sampleable(memory)
        if step > 5:
            batch = memory.sample(8)
            memory.update_priorities(batch.indices, rng.normal(size=8))
    assert_consistent(memory.tree)


@pytest.mark.parametrize("n_step", [1, 3, 5])
def test_memory_never_samples_an_unsampleable_slot(n_step: int) -> None:
    memory, source = prioritized(50, 173, n_step=n_step)  # wrapped, with games cut by the frame limit
    assert memory.sampleable(np.arange(50)).sum() < memory._range_sizes().sum(), "no frame-limit cut in memory"
    rng = np.random.default_rng(5)
    for _ in range(300):
        batch = memory.sample(32)
        assert memory.sampleable(batch.indices).all()
        memory.update_priorities(batch.indices, log_uniform(rng, 32, 1e-4, 1e2))
        play(memory, 1, source)
    assert_leaves_match_sampleable(memory)


def test_newest_sampleable_slot_gets_sampled() -> None:
    memory, _ = prioritized(50, 120)
    rng = np.random.default_rng(6)
    for _ in range(20):
        batch = memory.sample(32)
        memory.update_priorities(batch.indices, rng.uniform(0.1, 1.0, 32))
    newest = push_step(memory)
    push_step(memory)
    assert memory.tree.leaves[newest] == memory.max_priority
    drawn = np.concatenate([memory.sample(32).indices for _ in range(20)])
    assert newest in drawn


@pytest.mark.parametrize("steps", [7, 12])  # not full (N = size - 1), and wrapped (N = capacity - depth)
def test_importance_weights_match_hand_computation(steps: int) -> None:
    memory = PrioritizedReplayMemory(10, frame_shape=FRAME_SHAPE, alpha=0.5, priority_eps=0.01)
    for step in range(steps):
        memory.push(np.zeros(FRAME_SHAPE, np.uint8), 0, 0.0, step == 4, step == 0)
    slots = np.flatnonzero(memory.sampleable(np.arange(10)))
    assert slots.size == 6
    td_errors = np.array([0.5, -1.0, 2.0, 3.0, -0.1, 4.0])
    memory.update_priorities(slots, td_errors)
    priorities = (np.abs(td_errors) + 0.01) ** 0.5
    np.testing.assert_allclose(memory.tree.leaves[slots], priorities, rtol=1e-12)

    batch = memory.sample(16, beta=0.7)
    leaf_of = dict(zip(slots.tolist(), priorities, strict=True))
    probability = np.array([leaf_of[slot] for slot in batch.indices]) / priorities.sum()
    weights = (6 * probability) ** -0.7
    np.testing.assert_allclose(batch.weights.numpy(), weights / weights.max(), rtol=1e-6)
    assert batch.weights.dtype == torch.float32


def test_health_checks_the_tree_against_its_leaves_and_gives_the_largest_weight_by_hand() -> None:
    memory = PrioritizedReplayMemory(10, frame_shape=FRAME_SHAPE, alpha=0.5, priority_eps=0.01)
    assert memory.health(0.4) is None  # nothing sampleable yet: nothing to report
    for step in range(12):  # wrapped: N = capacity - depth = 6 slots
        memory.push(np.zeros(FRAME_SHAPE, np.uint8), 0, 0.0, step == 4, step == 0)
    slots = np.flatnonzero(memory.sampleable(np.arange(10)))
    td_errors = np.array([0.5, -1.0, 2.0, 3.0, -0.1, 4.0])
    memory.update_priorities(slots, td_errors)
    priorities = (np.abs(td_errors) + 0.01) ** 0.5
    health = memory.health(0.7)
    exact = math.fsum(priorities)
    assert health.total == memory.tree.nodes[1] and health.exact_total == exact
    assert health.relative_error == abs(memory.tree.nodes[1] - exact) / exact < 1e-15
    assert (health.min_priority, health.max_priority) == (priorities.min(), priorities.max())
    assert health.max_weight == pytest.approx((6 * priorities.min() / exact) ** -0.7, rel=1e-12)  # (N P_min)^-beta
    assert (health.new_priority, health.beta, health.sampleable) == (memory.max_priority, 0.7, 6)

    # A leaf written without its sums (the drift the log is there to catch) shows as the relative error.
    memory.tree.leaves[slots[0]] += 1e-6
    drifted = memory.health(0.7)
    assert drifted.total == health.total
    assert drifted.relative_error == pytest.approx(1e-6 / (exact + 1e-6), rel=1e-6)


def test_update_priorities_sets_leaves_and_never_revives_a_slot() -> None:
    memory, source = prioritized(40, 95, alpha=0.6, priority_eps=1e-6)
    td_errors = np.linspace(-3.0, 3.0, 40)
    memory.update_priorities(np.arange(40), td_errors)
    sampleable = memory.sampleable(np.arange(40))
    np.testing.assert_allclose(
        memory.tree.leaves[sampleable], (np.abs(td_errors[sampleable]) + 1e-6) ** 0.6, rtol=1e-12
    )
    assert (memory.tree.leaves[~sampleable] == 0).all()

    oldest_sampleable = (memory.cursors[0] + np.arange(3, 6)) % 40
    play(memory, 3, source)  # these three become the oldest, whose stacks are overwritten
    memory.update_priorities(oldest_sampleable, np.ones(3))
    assert (memory.tree.leaves[oldest_sampleable] == 0).all()
    assert_leaves_match_sampleable(memory)


def test_new_transitions_get_the_max_priority() -> None:
    memory, _ = prioritized(40, 30, alpha=0.5, priority_eps=1e-6)
    assert memory.max_priority == 1.0
    memory.update_priorities(np.flatnonzero(memory.tree.leaves)[:1], np.array([99.0]))
    assert memory.max_priority == pytest.approx((99.0 + 1e-6) ** 0.5, rel=1e-12)
    slot = push_step(memory)
    assert memory.tree.leaves[slot - 1] == memory.max_priority


@pytest.mark.parametrize("n_step", [1, 3])
def test_a_push_keeps_the_learnt_priority_of_a_slot_that_was_already_sampleable(n_step: int) -> None:
    """A push refreshes the leaves of the slots around it, but only one that becomes sampleable gets the new
    transitions' priority: the oldest slots in reach of the pushes before the first wrap, and an n-step window that
    ended at a terminal step before it was whole, keep the priority learnt for them (they were reset to it)."""
    frame = np.zeros(FRAME_SHAPE, np.uint8)
    memory = PrioritizedReplayMemory(10, frame_shape=FRAME_SHAPE, seed=0, n_step=n_step)
    memory.push(frame, 0, 1.0, False, True)
    memory.push(frame, 0, 1.0, True, False)  # a lost life: slot 0's window ends at slot 1, and is sampleable
    memory.update_priorities(np.array([0]), np.array([0.25]))  # lower than the new transitions' 1
    learnt = memory.tree.leaves[0]
    assert learnt == pytest.approx((0.25 + 1e-6) ** 0.6, rel=1e-12)
    for slot in range(2, 10):  # within n_step of slot 0, then in reach of slots 7 to 9 (7 + 3 wraps to 0)
        push_step(memory)
        assert memory.tree.leaves[0] == (learnt if slot < 9 else 0.0), slot  # the memory full: among the oldest
    assert_leaves_match_sampleable(memory)


def test_an_outlier_priority_is_forgotten() -> None:
    memory, source = prioritized(200, 100, alpha=1.0, priority_eps=1e-6)
    period = memory.MAX_PRIORITY_PERIOD = 50  # a short period keeps the test fast
    outlier = np.flatnonzero(memory.tree.leaves)[:1]
    memory.update_priorities(outlier, np.array([1e6]))
    memory.update_priorities(outlier, np.array([0.5]))  # its leaf is lowered at once
    rng = np.random.default_rng(7)
    for call in range(3, 2 * period + 1):
        # More pushes than draws between updates leave new transitions that still hold
        # max_priority at every reset, as in training; they must not keep the outlier alive.
        play(memory, 10, source)
        batch = memory.sample(8)
        memory.update_priorities(batch.indices, rng.uniform(0.0, 2.0, 8))
        if call == period:
            assert memory.max_priority == pytest.approx(1e6)  # the outlier's own period
    assert memory.max_priority < 2.0 + 1e-6
    slot = push_step(memory)
    assert memory.tree.leaves[slot - 1] == memory.max_priority


def test_state_dict_round_trip_restores_tree_and_sampling() -> None:
    memory, _ = prioritized(60, 150, seed=8)
    rng = np.random.default_rng(8)
    for _ in range(30):
        batch = memory.sample(16)
        memory.update_priorities(batch.indices, rng.normal(size=16))
    buffer = io.BytesIO()
    torch.save(memory.state_dict(), buffer)
    buffer.seek(0)
    restored = PrioritizedReplayMemory(60, frame_shape=FRAME_SHAPE, seed=99)
    restored.load_state_dict(torch.load(buffer, weights_only=True))

    np.testing.assert_array_equal(restored.tree.nodes, memory.tree.nodes)
    assert restored.max_priority == memory.max_priority
    assert restored.priority_updates == memory.priority_updates
    assert restored.window_max_priority == memory.window_max_priority
    sources = {memory: game_steps(1), restored: game_steps(1)}
    for _ in range(20):
        td_errors = rng.normal(size=16)
        batches = []
        for replica, source in sources.items():
            play(replica, 1, source)
            batches.append(replica.sample(16, beta=0.5))
            replica.update_priorities(batches[-1].indices, td_errors)
        np.testing.assert_array_equal(batches[0].indices, batches[1].indices)
        torch.testing.assert_close(batches[0].weights, batches[1].weights, rtol=0, atol=0)
    np.testing.assert_array_equal(restored.tree.nodes, memory.tree.nodes)


def test_round_trip_of_a_partly_filled_memory() -> None:
    memory, _ = prioritized(60, 25)
    restored, _ = prioritized(60, 50, seed=3)  # leaves past 25 must be cleared by loading
    restored.load_state_dict(memory.state_dict())
    np.testing.assert_array_equal(restored.tree.nodes, memory.tree.nodes)


def test_round_trip_over_streams_restores_leaves_in_each_stripe() -> None:
    memory = PrioritizedReplayMemory(60, frame_shape=FRAME_SHAPE, streams=3)
    sources = [game_steps(stream) for stream in range(3)]
    for stream, steps in enumerate((30, 7, 0)):  # a wrapped stripe, a partly filled one, an empty one
        for _ in range(steps):
            memory.push(*next(sources[stream]), stream)
    batch = memory.sample(16)
    memory.update_priorities(batch.indices, np.random.default_rng(0).normal(size=16))
    restored = PrioritizedReplayMemory(60, frame_shape=FRAME_SHAPE, streams=3)
    restored.load_state_dict(memory.state_dict())
    np.testing.assert_array_equal(restored.tree.nodes, memory.tree.nodes)
    assert_leaves_match_sampleable(restored)


def test_nbytes_counts_the_tree_and_the_initial_td_errors() -> None:
    uniform = ReplayMemory(1000, frame_shape=FRAME_SHAPE)
    assert PrioritizedReplayMemory(1000, frame_shape=FRAME_SHAPE).nbytes == uniform.nbytes + (16 + 4) * 1000


def test_a_transition_pushed_with_its_td_error_starts_at_that_priority_and_keeps_it_on_reload() -> None:
    memory = PrioritizedReplayMemory(50, frame_shape=FRAME_SHAPE, n_step=2, alpha=0.5)
    errors = np.arange(20, dtype=np.float32) / 10
    for step, error in enumerate(errors):
        known = step % 3 != 0
        memory.push(np.zeros(FRAME_SHAPE, np.uint8), 0, 0.0, False, step == 0, td_error=error if known else np.nan)
    slots = np.arange(18)  # the newest two wait for their windows' frames
    assert np.all(memory.tree.leaves[18:] == 0)
    expected = np.where(slots % 3 != 0, (errors[slots] + memory.priority_eps) ** 0.5, memory.max_priority)
    assert np.allclose(memory.tree.leaves[slots], expected)
    restored = PrioritizedReplayMemory(50, frame_shape=FRAME_SHAPE, n_step=2, alpha=0.5)
    restored.load_state_dict(memory.state_dict())
    frame = np.zeros(FRAME_SHAPE, np.uint8)
    for copy in (memory, restored):
        copy.push(frame, 0, 0.0, False, False, td_error=0.25)
    assert np.array_equal(memory.tree.leaves, restored.tree.leaves) and restored.tree.leaves[18] > 0


def test_sampling_an_unsampleable_memory_raises() -> None:
    memory = PrioritizedReplayMemory(10, frame_shape=FRAME_SHAPE)
    with pytest.raises(ValueError):
        memory.sample(4)
    memory.push(np.zeros(FRAME_SHAPE, np.uint8), 0, 0.0, False, True)
    with pytest.raises(ValueError):
        memory.sample(4)


def test_rejects_a_priority_eps_that_allows_zero_priorities() -> None:
    with pytest.raises(ValueError):
        PrioritizedReplayMemory(10, frame_shape=FRAME_SHAPE, priority_eps=0.0)
