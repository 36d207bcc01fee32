"""Replay memories that store each 84x84 frame once and rebuild frame stacks at sample time.

Slot ``t`` holds the frame the agent saw at step t (the newest frame of its state), the
action it took, the clipped reward it got, whether that step was terminal for learning
(game over or a lost life) and whether the frame is the first of a game. The state at
``t`` is frames t-3..t, so one transition costs one frame (7,056 bytes) plus 7 bytes,
instead of the 4 or 8 frames of a naive memory.

With ``n_step`` = n, the transition of slot ``t`` is its n-step window (Sutton and Barto
2018, ch. 7): the return ``r_t + g r_t+1 + ... + g^(m-1) r_t+m-1`` over the next m = n steps,
or fewer when a step of the window is terminal (a lost life counts) and the sum stops
there; the discount ``g^m`` of the bootstrap, 0 after a terminal step; and the next state,
frames t+n-3..t+n. Nothing beyond the one frame per step is stored: windows are read from
consecutive slots at sample time. n = 1 is Nature DQN's transition.

A stack never mixes two games: walking back from ``t``, it stops at the first frame of
the game and repeats it, exactly as ``utils_env.FrameStack`` starts a game. Under a
``StackRule`` with ``per_life`` it also stops at the first frame after a terminal step (a
lost life), and with ``zero_fill`` the frames before the stop are zeros, not repeats. A slot is
*sampleable* only when its whole transition is in memory and intact:

- it is not the newest slot (its next frame is not written yet), and every step of its
  window that is not terminal has its next frame written;
- when the memory is full, it is not one of the 3 oldest slots, whose stacks would reach
  back into slots the write pointer has overwritten with new frames;
- no step of its window before a terminal one is the last step of a game cut by the frame
  limit: that step is not terminal, so the window needs the next frame, which the game
  never produced.

Windows that end with a terminal step are sampleable: their next state is never used (its
discount is 0).

Where the frames live: in host RAM (numpy), or with ``frames_on_device`` on the training device
(a GPU), where a batch's stacks are gathered without crossing the host-device link. The 7 bytes
of scalars per step stay on the host either way: every push decides from them which slots are
sampleable (and, prioritized, their leaves in the sum tree), so the host needs them at each step;
what crosses per batch is then its slot indices and scalars, 2.3 KB at batch 32, not 1.1 MB of frames.
"""

from __future__ import annotations

import math
from typing import Any

import numba
import numpy as np
import torch

from dqn_atari.utils_types import NATURE_STACKS, Batch, MemoryHealth, StackRule


class HostBuffer:
    """A host buffer whose contents go to ``device`` without the host waiting for the copy. On CUDA
    it is page-locked (pinned), sent with ``non_blocking``, and handed out again only once the copy
    that last read it has finished (an event, long past by then). Elsewhere each ``get`` is a fresh
    array: a copy to the CPU would share it, and what was sent must not change."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.pinned = device.type == "cuda"
        self.buffer = torch.empty(0, dtype=torch.uint8)
        self.sent: torch.cuda.Event | None = None

    def get(self, nbytes: int) -> np.ndarray:
        """``nbytes`` writable host bytes, for the next ``send``."""
        if not self.pinned:
            self.buffer = torch.empty(nbytes, dtype=torch.uint8)
        else:
            if self.sent is not None:
                self.sent.synchronize()
            if self.buffer.numel() < nbytes:
                self.buffer = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        return self.buffer[:nbytes].numpy()

    def send(self, nbytes: int) -> torch.Tensor:
        """The first ``nbytes`` written since ``get``, on the device."""
        on_device = self.buffer[:nbytes].to(self.device, non_blocking=True)
        if self.pinned:
            self.sent = torch.cuda.Event()
            self.sent.record()
        return on_device


class ReplayMemory:
    """Circular uniform replay memory; sampled batches are on ``device`` at once.

    With ``streams`` = N the capacity is split into N stripes of ``capacity // N`` slots, each a
    circular memory of its own with its own cursor, for N players whose steps arrive interleaved
    (stacks and windows walk through consecutive slots, so one player's steps must stay
    together). Every rule above holds within each stripe; sampling draws over the sampleable
    slots of all stripes. One stream is the plain circular memory.
    """

    _arrays = ("frames", "actions", "rewards", "dones", "starts")
    STAGING_ROWS = 64
    draws_ahead = True  # its batches do not depend on the learning steps between them: see sample_batches

    def __init__(
        self,
        capacity: int,
        stack_depth: int = 4,
        frame_shape: tuple[int, ...] = (84, 84),
        device: str | torch.device = "cpu",
        seed: int = 0,
        n_step: int = 1,
        gamma: float = 0.99,
        streams: int = 1,
        stack_rule: StackRule = NATURE_STACKS,
        frames_on_device: bool = False,
    ) -> None:
        if n_step < 1 or streams < 1:
            raise ValueError(f"n_step ({n_step}) and streams ({streams}) must be 1 or more")
        self.stripe = capacity // streams  # slots per stream
        if self.stripe <= stack_depth + n_step:
            raise ValueError(
                f"memory capacity {capacity} over {streams} streams leaves {self.stripe} slots per stream, "
                f"not more than the stack depth {stack_depth} plus n_step {n_step}"
            )
        self.capacity = self.stripe * streams
        self.streams = streams
        self.stack_depth = stack_depth
        self.stack_rule = stack_rule
        self.n_step = n_step
        self.gamma = np.float32(gamma)
        self.device = torch.device(device)
        self.frames_on_device = frames_on_device
        self.frames: np.ndarray | torch.Tensor = (
            torch.zeros((self.capacity, *frame_shape), dtype=torch.uint8, device=self.device)
            if frames_on_device
            else np.zeros((self.capacity, *frame_shape), dtype=np.uint8)
        )
        self.batch_buffer = HostBuffer(self.device)  # a batch's frames (or slots) and scalars
        # Pushed frames wait in a host buffer and go to the device together, before a batch is
        # drawn or the buffer is full: one copy every few steps rather than one per step. Fewer
        # rows than a stripe's slots, so no slot can be pushed twice into the same copy.
        self.staging = HostBuffer(self.device)
        self.staging_rows = min(self.STAGING_ROWS, self.stripe)
        self.staged = 0  # frames waiting in the staging buffer
        self.staged_slots: np.ndarray | None = None  # their slots
        self.staged_frames: np.ndarray | None = None
        self.actions = np.zeros(self.capacity, dtype=np.uint8)
        self.rewards = np.zeros(self.capacity, dtype=np.float32)
        self.dones = np.zeros(self.capacity, dtype=bool)
        self.starts = np.zeros(self.capacity, dtype=bool)
        self.cursors = np.zeros(streams, dtype=np.int64)  # per stream: the offset the next push writes
        self.sizes = np.zeros(streams, dtype=np.int64)  # per stream: steps held
        self.rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        return int(self.sizes.sum())

    @property
    def nbytes(self) -> int:
        """Bytes of all arrays this memory allocated (grows in subclasses that add some)."""
        return sum(getattr(self, name).nbytes for name in self._arrays)

    @property
    def frame_shape(self) -> tuple[int, ...]:
        return tuple(self.frames.shape[1:])

    def push(
        self,
        frame: np.ndarray,
        action: int,
        reward: float,
        done: bool,
        first: bool,
        stream: int = 0,
        td_error: float = math.nan,
    ) -> int:
        """Store one step of ``stream``; ``first`` marks the first frame of a game. Returns the slot.
        ``td_error``, the transition's TD error where the player knows it, only matters to the
        prioritized memory."""
        size, cursor = int(self.sizes[stream]), int(self.cursors[stream])
        if size == 0 and not first:
            raise ValueError("the first step stored must start a game (first=True)")
        slot = stream * self.stripe + cursor
        if self.frames_on_device:
            if self.staged_slots is None:  # the buffer holds the slots (int64), then the frames
                buffer = self.staging.get(self.staging_rows * (8 + frame.nbytes))
                self.staged_slots = buffer[: 8 * self.staging_rows].view(np.int64)
                self.staged_frames = buffer[8 * self.staging_rows :].reshape(self.staging_rows, *self.frame_shape)
            self.staged_slots[self.staged] = slot
            self.staged_frames[self.staged] = frame
            self.staged += 1
            if self.staged == self.staging_rows:
                self.flush()
        else:
            self.frames[slot] = frame
        self.actions[slot] = action
        self.rewards[slot] = reward
        self.dones[slot] = done
        self.starts[slot] = first
        self.cursors[stream] = (cursor + 1) % self.stripe
        self.sizes[stream] = min(size + 1, self.stripe)
        return slot

    def flush(self) -> None:
        """Write the staged frames into the device's frames (one copy there, one scatter)."""
        if not self.staged:
            return
        rows = self.staging_rows
        on_device = self.staging.send(rows * 8 + self.staged_frames.nbytes)
        slots = on_device[: 8 * rows].view(torch.int64)[: self.staged]
        frames = on_device[8 * rows :].view(self.staged_frames.shape)[: self.staged]
        self.frames.index_copy_(0, slots, frames)
        self.staged, self.staged_slots, self.staged_frames = 0, None, None

    def sampleable(self, slots: np.ndarray) -> np.ndarray:
        """Boolean mask: which ``slots`` hold a complete, intact transition (see module doc)."""
        return self._windows(slots)[0]

    def _shift(self, slots: np.ndarray, steps: int | np.ndarray) -> np.ndarray:
        """The slots ``steps`` later (earlier when negative) in the same stripe, wrapping around it."""
        if self.streams == 1:  # the common case, on the sampling path: half the work
            return (slots + steps) % self.stripe
        base = slots - slots % self.stripe
        return base + (slots - base + steps) % self.stripe

    def _windows(self, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For each slot: whether its n-step window is sampleable, its discounted return, and the
        discount of its bootstrap (0 when the window ends with a terminal step), as float32."""
        slots = np.asarray(slots, dtype=np.int64)
        sampleable = np.empty(len(slots), dtype=bool)
        returns, discounts = np.empty(len(slots), dtype=np.float32), np.empty(len(slots), dtype=np.float32)
        _window_values(
            slots, self.stripe, self.stack_depth, self.n_step, self.gamma, self.cursors, self.sizes,
            self.rewards, self.dones, self.starts, sampleable, returns, discounts,
        )  # fmt: skip
        return sampleable, returns, discounts

    def sample(self, batch_size: int, beta: float = 1.0) -> Batch:
        """A uniform batch. ``beta`` is ignored: with equal priorities every weight is 1."""
        return self.sample_batches(1, batch_size)[0]

    def sample_batches(self, count: int, batch_size: int) -> list[Batch]:
        """``count`` uniform batches: the slots ``count`` calls of ``sample`` would draw, one batch after another,
        gathered and sent to the device together (one transfer, one gather) for the learning steps of a round of
        games, between which nothing is pushed."""
        slots, windows = self._uniform_slots(batch_size, count)
        batch = self._batch(slots, np.ones(len(slots), dtype=np.float32), windows)
        if count == 1:  # sample's one batch, drawn at every learning step: nothing to split
            return [batch]
        return [Batch(*(field[k * batch_size : (k + 1) * batch_size] for field in batch)) for k in range(count)]

    def update_priorities(self, slots: np.ndarray, td_errors: np.ndarray | torch.Tensor) -> None:
        """Uniform replay has no priorities; present so both memories share one interface (and
        never reads ``td_errors``, which may still be on the device)."""

    def transitions(self, slots: np.ndarray) -> Batch:
        """The transitions of these sampleable ``slots``, as a batch with weights 1."""
        return self._batch(slots, np.ones(len(slots), dtype=np.float32))

    def stack_slots(self, slots: np.ndarray) -> np.ndarray:
        """(B, depth + n) frame slots, oldest first: the state is [:, :depth], the next state
        [:, n:]. Past ``t`` the window runs on through t+1..t+n, the frames of the next state of a
        sampleable window that goes on (no game starts there); after a terminal step they are
        whatever the slots hold, never used. Where a stack stops, its earlier columns repeat the
        slot it stopped at (``_batch`` puts zeros there under ``stack_rule.zero_fill``)."""
        columns = [self._shift(slots, k) for k in range(self.n_step, 0, -1)] + [slots]
        current = slots
        for _ in range(self.stack_depth - 1):
            earlier = self._shift(current, -1)
            stop = self.starts[current] | (self.dones[earlier] if self.stack_rule.per_life else False)
            current = np.where(stop, current, earlier)
            columns.append(current)
        return np.stack(columns[::-1], axis=1)

    def state_dict(self) -> dict[str, Any]:
        """All contents as tensors, for ``torch.save``: each stream's filled slots, in turn; views of the memory
        where those are its first slots, so save them before it changes."""
        if self.frames_on_device:
            self.flush()
        filled = self._filled_index()
        arrays = {name: torch.from_numpy(getattr(self, name)[filled]) for name in self._arrays if name != "frames"}
        arrays["frames"] = (
            self.frames[filled if isinstance(filled, slice) else torch.from_numpy(filled).to(self.device)].cpu()
            if self.frames_on_device
            else torch.from_numpy(self.frames[filled])
        )
        return {
            **arrays,
            "capacity": self.capacity,
            "streams": self.streams,
            "sizes": torch.from_numpy(self.sizes.copy()),
            "cursors": torch.from_numpy(self.cursors.copy()),
            "rng": self.rng.bit_generator.state,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``state_dict``'s contents; a state that does not fit this memory raises
        ValueError (or KeyError) and leaves the memory as it was."""
        arrays = {name: state[name].numpy() for name in self._arrays}
        sizes, cursors = state["sizes"].numpy().astype(np.int64), state["cursors"].numpy().astype(np.int64)
        # Slot positions only mean the same thing in a memory of the same capacity and streams.
        if (state["capacity"], state["streams"]) != (self.capacity, self.streams):
            raise ValueError("the saved replay memory has another capacity or number of streams than this one")
        if arrays["frames"].shape[1:] != self.frames.shape[1:]:
            raise ValueError("the saved replay memory has another frame shape than this one")
        full = sizes == self.stripe
        cursors_valid = np.where(full, (cursors >= 0) & (cursors < self.stripe), cursors == sizes)
        if (
            sizes.shape != (self.streams,)
            or (sizes < 0).any()
            or (sizes > self.stripe).any()
            or not cursors_valid.all()
        ):
            raise ValueError("the saved replay memory's sizes and cursors disagree")
        if any(len(array) != sizes.sum() for array in arrays.values()):
            raise ValueError("the saved replay memory's arrays and sizes disagree")
        offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        if any(
            0 < size < self.stripe and not arrays["starts"][offset] for size, offset in zip(sizes, offsets, strict=True)
        ):
            raise ValueError("the saved replay memory does not begin with the first step of a game")
        self.sizes[:], self.cursors[:] = sizes, cursors
        self.staged, self.staged_slots, self.staged_frames = 0, None, None  # the loaded frames replace them
        filled = self._filled_slots()
        for name, array in arrays.items():
            if name == "frames" and self.frames_on_device:
                self.frames[torch.from_numpy(filled).to(self.device)] = torch.from_numpy(array).to(self.device)
            else:
                getattr(self, name)[filled] = array
        self.rng.bit_generator.state = state["rng"]

    def _filled_slots(self) -> np.ndarray:
        """The slots that hold a step: the first ``size`` of each stripe, stripe after stripe."""
        return np.concatenate([stream * self.stripe + np.arange(size) for stream, size in enumerate(self.sizes)])

    def _filled_index(self) -> slice | np.ndarray:
        """``_filled_slots`` as an index that takes a view where they are the first slots (a full memory, or one
        stream): a copy of a full 1M-step memory's frames held a second 7 GB while it was saved, which put two runs
        on one 24 GB machine past its memory when their evaluations came at once."""
        filled = self._filled_slots()
        return slice(len(filled)) if not len(filled) or filled[-1] == len(filled) - 1 else filled

    def _oldest(self) -> np.ndarray:
        """Per stream: the offset of its oldest step."""
        return (self.cursors - self.sizes) % self.stripe

    def _sampleable_range(self) -> tuple[np.ndarray, np.ndarray]:
        """Per stream: the first and last sampleable position, counted from its oldest slot."""
        first = np.where(self.sizes == self.stripe, self.stack_depth - 1, 0)
        return first, self.sizes - 2

    def _range_sizes(self) -> np.ndarray:
        """Per stream: how many positions its sampleable range spans."""
        first, last = self._sampleable_range()
        return np.maximum(last - first + 1, 0)

    def _uniform_slots(self, batch_size: int, count: int) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
        """``count`` batches of uniformly drawn sampleable slots, one after another, with their ``_windows``
        (computed once, for ``_batch`` too)."""
        counts = self._range_sizes()
        total = int(counts.sum())
        if total == 0:
            raise ValueError(f"the memory holds {len(self)} steps, too few to sample from")
        batches = []
        for _ in range(count):
            slots = self._range_slots(self.rng.integers(0, total, size=batch_size), counts)
            # Only the rare last steps of frame-limited games fail inside the range: redraw them.
            for _ in range(1000):
                windows = self._windows(slots)
                rejected = ~windows[0]
                if not rejected.any():
                    break
                slots[rejected] = self._range_slots(self.rng.integers(0, total, size=int(rejected.sum())), counts)
            else:
                raise RuntimeError("could not draw sampleable transitions; are all games cut by the frame limit?")
            batches.append((slots, *windows))
        slots, *windows = (np.concatenate(column) for column in zip(*batches, strict=True))
        return slots, tuple(windows)

    def _range_slots(self, draws: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """Map draws in [0, sum(counts)) to slots: the streams' sampleable ranges laid end to end."""
        ends = np.cumsum(counts)
        stream = np.searchsorted(ends, draws, side="right")
        first, _ = self._sampleable_range()
        position = first[stream] + draws - (ends[stream] - counts[stream])
        return stream * self.stripe + (self._oldest()[stream] + position) % self.stripe

    def _batch(self, slots: np.ndarray, weights: np.ndarray, windows: tuple[np.ndarray, ...] | None = None) -> Batch:
        """Gather the batch into one host buffer and move it to the device in a single transfer:
        the frames (with ``frames_on_device``, only their slots, gathered there), then actions,
        returns, discounts and weights as float32."""
        if self.frames_on_device:
            self.flush()
        n, depth = len(slots), self.stack_depth
        _, returns, discounts = self._windows(slots) if windows is None else windows
        stacks = self.stack_slots(slots)
        frames_shape = (n, depth + self.n_step, *self.frame_shape)
        head_bytes = stacks.nbytes if self.frames_on_device else math.prod(frames_shape)
        scalars_at = -(-head_bytes // 4) * 4  # float32 alignment
        buffer = self.batch_buffer.get(scalars_at + 4 * 4 * n)
        if self.frames_on_device:
            buffer[:head_bytes].view(np.int64)[:] = stacks.reshape(-1)
        else:
            frames_out = buffer[:head_bytes].reshape(frames_shape)
            np.take(self.frames, stacks, axis=0, out=frames_out, mode="clip")  # "clip": no extra buffered copy
            if self.stack_rule.zero_fill:  # a column that repeats the next one lies before the stack's start
                frames_out[:, : depth - 1][stacks[:, : depth - 1] == stacks[:, 1:depth]] = 0
        scalars = buffer[scalars_at:].view(np.float32).reshape(4, n)
        scalars[:] = [self.actions[slots], returns, discounts, weights]
        on_device = self.batch_buffer.send(len(buffer))
        if self.frames_on_device:
            stacks_on_device = on_device[:head_bytes].view(torch.int64).view(stacks.shape)
            frames = self.frames[stacks_on_device]
            if self.stack_rule.zero_fill:
                before_start = stacks_on_device[:, : depth - 1] == stacks_on_device[:, 1:depth]
                frames[:, : depth - 1].masked_fill_(
                    before_start.view(*before_start.shape, *(1,) * len(self.frame_shape)), 0
                )
        else:
            frames = on_device[:head_bytes].view(frames_shape)
        actions, returns_on_device, discounts_on_device, weights_on_device = (
            on_device[scalars_at:].view(torch.float32).view(4, n)
        )
        flat = (n, -1, *self.frame_shape[-2:])  # multi-channel frames: depth x channels channels
        return Batch(
            states=frames[:, :depth].reshape(flat),
            actions=actions.long(),
            returns=returns_on_device,
            next_states=frames[:, self.n_step :].reshape(flat),
            discounts=discounts_on_device,
            weights=weights_on_device,
            indices=slots,
        )


@numba.njit(cache=True)
def _window_values(
    slots: np.ndarray,
    stripe: int,
    depth: int,
    n_step: int,
    gamma: np.float32,
    cursors: np.ndarray,
    sizes: np.ndarray,
    rewards: np.ndarray,
    dones: np.ndarray,
    starts: np.ndarray,
    sampleable: np.ndarray,
    returns: np.ndarray,
    discounts: np.ndarray,
) -> None:
    """``ReplayMemory._windows`` slot by slot (a push asks it of 5 or 6 slots, where numpy's
    per-call cost would be most of the work), in float32 as the batch is."""
    for i in range(slots.size):
        base = slots[i] - slots[i] % stripe
        offset, stream = slots[i] - base, slots[i] // stripe
        size = sizes[stream]
        position = (offset - (cursors[stream] - size)) % stripe  # counted from the stream's oldest slot
        first = depth - 1 if size == stripe else 0  # a full stripe's 3 oldest stacks reach overwritten frames
        ok = first <= position <= size - 2  # the newest slot's next frame is not written yet
        total, discount = np.float32(0.0), np.float32(1.0)
        for k in range(n_step):
            step = base + (offset + k) % stripe
            total += discount * rewards[step]
            if dones[step]:  # the window stops at a terminal step: no next state needed
                discount = np.float32(0.0)
                break
            discount *= gamma
            # A step that goes on needs its next frame, written and of the same game.
            ok = ok and position + k + 1 <= size - 1 and not starts[base + (offset + k + 1) % stripe]
        sampleable[i], returns[i], discounts[i] = ok, total, discount


@numba.njit(cache=True)
def _set_leaves(nodes: np.ndarray, slots: np.ndarray, values: np.ndarray) -> None:
    capacity = nodes.size // 2
    for k in range(slots.size):
        nodes[capacity + slots[k]] = values[k]
    # Recompute sums from the children rather than adding deltas: deltas accumulate rounding
    # error over millions of updates, recomputing keeps every node exact. A node shared by
    # several paths ends right because the last path through it sees final children.
    for k in range(slots.size):
        node = (capacity + slots[k]) >> 1
        while node >= 1:
            nodes[node] = nodes[2 * node] + nodes[2 * node + 1]
            node >>= 1


@numba.njit(cache=True)
def _sum_children(nodes: np.ndarray) -> None:
    for node in range(nodes.size // 2 - 1, 0, -1):
        nodes[node] = nodes[2 * node] + nodes[2 * node + 1]


@numba.njit(cache=True)
def _find_leaves(nodes: np.ndarray, uniforms: np.ndarray, slots: np.ndarray) -> None:
    capacity = nodes.size // 2
    segment = nodes[1] / uniforms.size
    values = (np.arange(uniforms.size) + uniforms) * segment
    slots[:] = 1  # the node each descent is at, the root first
    # All descents go down one level together: their loads are independent, so the CPU
    # overlaps the cache misses of a large tree instead of waiting for each in turn.
    descending = True
    while descending:
        descending = False
        for k in range(slots.size):
            node = slots[k]
            if node >= capacity:
                continue
            descending = True
            left = nodes[2 * node]
            right = nodes[2 * node + 1]
            # Rounding can leave a value at or past a subtree's sum; entering only subtrees
            # with a positive sum guarantees the descent ends on a positive leaf.
            if (values[k] < left and left > 0) or right <= 0:
                slots[k] = 2 * node
            else:
                values[k] -= left
                slots[k] = 2 * node + 1
    slots -= capacity


@numba.njit(cache=True)
def _priority(td_error: float, priority_eps: float, alpha: float) -> float:
    """The priority of one TD error: (|error| + priority_eps) ** alpha, in float64."""
    return (abs(np.float64(td_error)) + priority_eps) ** alpha


@numba.njit(cache=True)
def _priorities(td_errors: np.ndarray, priority_eps: float, alpha: float, priorities: np.ndarray) -> None:
    for k in range(td_errors.size):
        priorities[k] = _priority(td_errors[k], priority_eps, alpha)


@numba.njit(cache=True)
def _refresh_pushed_leaves(
    nodes: np.ndarray,
    slot: int,
    offsets: np.ndarray,
    initial_td_errors: np.ndarray,
    max_priority: float,
    priority_eps: float,
    alpha: float,
    stripe: int,
    depth: int,
    n_step: int,
    gamma: np.float32,
    cursors: np.ndarray,
    sizes: np.ndarray,
    rewards: np.ndarray,
    dones: np.ndarray,
    starts: np.ndarray,
) -> None:
    """``PrioritizedReplayMemory.push``'s leaves in one call (as numpy calls they were a prioritized
    step's largest extra cost): each slot ``offsets`` from ``slot`` in its stripe gets 0 where it is
    not sampleable; one that becomes sampleable gets the priority of the TD error it was pushed with,
    or ``max_priority``; one that was already keeps the priority it has (learnt, perhaps)."""
    affected = np.empty(offsets.size, dtype=np.int64)
    base = slot - slot % stripe
    for k in range(offsets.size):
        affected[k] = base + (slot - base + offsets[k]) % stripe
    sampleable = np.empty(offsets.size, dtype=np.bool_)
    returns, discounts = np.empty(offsets.size, dtype=np.float32), np.empty(offsets.size, dtype=np.float32)
    _window_values(
        affected, stripe, depth, n_step, gamma, cursors, sizes, rewards, dones, starts, sampleable, returns, discounts
    )
    values = np.zeros(offsets.size)
    capacity = nodes.size // 2
    for k in range(offsets.size):
        if sampleable[k]:
            error = initial_td_errors[affected[k]]
            values[k] = nodes[capacity + affected[k]]  # a sampleable slot's leaf is positive, a new one's 0
            if values[k] == 0.0:
                values[k] = max_priority if np.isnan(error) else _priority(error, priority_eps, alpha)
    _set_leaves(nodes, affected, values)


class SumTree:
    """Binary sum tree over ``capacity`` non-negative leaves, for proportional sampling.

    One float64 array of 2 * capacity nodes (16 bytes per leaf): node 0 is unused, node i
    has children 2i and 2i + 1, and the leaf of slot s is node capacity + s. Every node
    below ``capacity`` then has exactly two children, so any capacity works; leaves sit at
    two depths when it is not a power of two, which is harmless since sampling only needs
    some partition of [0, total) into one interval per leaf.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.nodes = np.zeros(2 * capacity, dtype=np.float64)

    @property
    def total(self) -> float:
        return float(self.nodes[1])

    @property
    def leaves(self) -> np.ndarray:
        """Writable view of the leaves in slot order; call ``rebuild`` after writing to it."""
        return self.nodes[self.capacity :]

    @property
    def nbytes(self) -> int:
        return self.nodes.nbytes

    def update(self, slots: np.ndarray, values: np.ndarray) -> None:
        """Set the leaves of ``slots`` to ``values`` (the last wins for a repeated slot)."""
        _set_leaves(self.nodes, np.asarray(slots, dtype=np.int64), np.asarray(values, dtype=np.float64))

    def rebuild(self) -> None:
        """Recompute every internal node from the leaves."""
        _sum_children(self.nodes)

    def sample(self, batch_size: int, rng: np.random.Generator) -> np.ndarray:
        """``batch_size`` slots drawn with probability leaf / total, stratified: one uniform
        draw in each of ``batch_size`` equal segments of [0, total), which lowers the variance
        of a batch. Never returns a zero leaf."""
        if not self.total > 0:
            raise ValueError("cannot sample from a sum tree whose leaves are all zero")
        slots = np.empty(batch_size, dtype=np.int64)
        _find_leaves(self.nodes, rng.random(batch_size), slots)
        return slots


class PrioritizedReplayMemory(ReplayMemory):
    """Proportional prioritized replay (Schaul et al. 2016) over the uniform memory's frames.

    Slot i is drawn with probability p_i / sum(p), p_i = (|TD error_i| + priority_eps) ** alpha,
    from a sum tree whose leaf is 0 exactly where a slot is not ``sampleable``, so the uniform
    memory's rule alone decides what may be drawn. New transitions get ``max_priority``, so
    each is likely replayed soon after it arrives, before its TD error is known; a transition
    pushed with its TD error (Ape-X actors compute it) gets the priority of that error instead.

    ``max_priority`` rises at once with any larger priority written by ``update_priorities``,
    and every ``MAX_PRIORITY_PERIOD`` calls it is reset to the largest priority written during
    those calls, so one early outlier cannot inflate new transitions' priorities forever. It is
    not reset to the largest leaf: the training loop pushes between updates, so the newest,
    not yet replayed, transitions always hold the current ``max_priority`` and the largest
    leaf would never fall below it.
    """

    MAX_PRIORITY_PERIOD = 1000
    draws_ahead = False  # each batch is drawn by the priorities the learning step before it wrote

    def __init__(self, capacity: int, *, alpha: float = 0.6, priority_eps: float = 1e-6, **options: Any) -> None:
        """``options`` are ReplayMemory's (stack_depth, frame_shape, device, seed, ...)."""
        if alpha < 0 or priority_eps <= 0:
            raise ValueError(f"alpha ({alpha}) must be non-negative and priority_eps ({priority_eps}) positive")
        super().__init__(capacity, **options)
        self.alpha = alpha
        self.priority_eps = priority_eps
        self.tree = SumTree(self.capacity)
        self.max_priority = 1.0
        self.priority_updates = 0  # calls of update_priorities so far
        self.window_max_priority = 0.0  # largest priority written in the current period
        # Per slot: the TD error it was pushed with (nan: unknown), the leaf it gets once sampleable.
        self.initial_td_errors = np.full(self.capacity, np.nan, dtype=np.float32)
        # A push at slot s changes whether these slots are sampleable: s - n .. s - 1 get one
        # more frame of their windows, s becomes the newest, and once the memory is full
        # s + 1 .. s + depth - 1 become the oldest, whose stacks reach into overwritten frames.
        self._push_offsets = np.arange(-self.n_step, self.stack_depth)

    @property
    def nbytes(self) -> int:
        return super().nbytes + self.tree.nbytes + self.initial_td_errors.nbytes

    def priority(self, td_errors: np.ndarray) -> np.ndarray:
        """(|TD error| + priority_eps) ** alpha, as float64."""
        errors = np.asarray(td_errors, dtype=np.float64)
        priorities = np.empty(errors.shape)  # C-ordered, so that its ravel() is a view to fill
        _priorities(errors.ravel(), self.priority_eps, self.alpha, priorities.ravel())
        return priorities

    def push(
        self,
        frame: np.ndarray,
        action: int,
        reward: float,
        done: bool,
        first: bool,
        stream: int = 0,
        td_error: float = math.nan,
    ) -> int:
        """Store one step like ``ReplayMemory.push`` and refresh the leaves it affects."""
        slot = super().push(frame, action, reward, done, first, stream)
        self.initial_td_errors[slot] = td_error
        _refresh_pushed_leaves(
            self.tree.nodes, slot, self._push_offsets, self.initial_td_errors, self.max_priority,
            self.priority_eps, self.alpha, self.stripe, self.stack_depth, self.n_step, self.gamma,
            self.cursors, self.sizes, self.rewards, self.dones, self.starts,
        )  # fmt: skip
        return slot

    def sample(self, batch_size: int, beta: float = 1.0) -> Batch:
        """A batch drawn in proportion to priority, weighted by w_i = (N * P(i)) ** -beta.

        The weights are divided by the largest weight in the batch, as in Algorithm 1 of
        Schaul et al.: they then only ever scale a step down, and no min-tree is needed to
        find the largest weight over the whole memory.
        """
        total = self.tree.total
        if not total > 0:
            raise ValueError(f"the memory holds {len(self)} steps, too few to sample from")
        slots = self.tree.sample(batch_size, self.rng)
        # N, the sampleable ranges, also counts the rare last steps of games cut by the frame
        # limit. That does not matter: N cancels in the division by the largest weight, and
        # is kept so the weights before it read as the paper's.
        weights = (self._range_sizes().sum() * self.tree.leaves[slots] / total) ** -beta
        return self._batch(slots, (weights / weights.max()).astype(np.float32))

    def health(self, beta: float) -> MemoryHealth | None:
        """What shows drift or a collapse of the priorities over a long run: the tree's total against an exact
        sum of its leaves, the smallest and largest priority of a sampleable slot, and the largest importance
        weight over the whole memory before ``sample`` divides by a batch's largest, (N * min P(i)) ** -beta.
        None while no slot is sampleable."""
        leaves = self.tree.leaves
        live = leaves[leaves > 0]
        if not live.size:
            return None
        total, exact = self.tree.total, math.fsum(live)  # fsum: correctly rounded, whatever the order
        smallest, largest = float(live.min()), float(live.max())
        weight = (float(self._range_sizes().sum()) * smallest / exact) ** -beta
        error = abs(total - exact) / exact
        return MemoryHealth(total, exact, error, smallest, largest, self.max_priority, beta, weight, live.size)

    def sample_batches(self, count: int, batch_size: int) -> list[Batch]:
        raise TypeError("prioritized batches are drawn one at a time, each by the priorities the last step wrote")

    def update_priorities(self, slots: np.ndarray, td_errors: np.ndarray | torch.Tensor) -> None:
        """Set the priorities of sampled ``slots`` from their TD errors (a device tensor is read
        here: the one host read of the loop that the algorithm needs). A slot that stopped being
        sampleable since it was drawn (pushes in between) keeps its zero leaf."""
        slots = np.asarray(slots, dtype=np.int64)
        if isinstance(td_errors, torch.Tensor):
            td_errors = td_errors.cpu().numpy()
        priorities = self.priority(td_errors)
        alive = self.tree.leaves[slots] > 0
        slots, priorities = slots[alive], priorities[alive]
        self.tree.update(slots, priorities)
        if priorities.size:
            largest = float(priorities.max())
            self.max_priority = max(self.max_priority, largest)
            self.window_max_priority = max(self.window_max_priority, largest)
        self.priority_updates += 1
        if self.priority_updates % self.MAX_PRIORITY_PERIOD == 0:
            if self.window_max_priority > 0:  # else no priority was written: nothing to go by
                self.max_priority = self.window_max_priority
            self.window_max_priority = 0.0

    def state_dict(self) -> dict[str, Any]:
        """The uniform memory's state plus the leaves (the sums are rebuilt on loading)."""
        filled = self._filled_index()
        return {
            **super().state_dict(),
            "priorities": torch.from_numpy(self.tree.leaves[filled]),
            "initial_td_errors": torch.from_numpy(self.initial_td_errors[filled]),
            "max_priority": self.max_priority,
            "priority_updates": self.priority_updates,
            "window_max_priority": self.window_max_priority,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        priorities = state["priorities"].numpy()
        filled = len(state["frames"])
        initial_td_errors = state.get("initial_td_errors", torch.full((filled,), math.nan)).numpy()
        counters = (float(state["max_priority"]), int(state["priority_updates"]), float(state["window_max_priority"]))
        if not len(priorities) == len(initial_td_errors) == filled:
            raise ValueError("the saved priorities do not match the saved transitions")
        super().load_state_dict(state)
        leaves = self.tree.leaves
        leaves[:] = 0.0  # slots that hold no step
        leaves[self._filled_slots()] = priorities
        self.initial_td_errors[:] = np.nan
        self.initial_td_errors[self._filled_slots()] = initial_td_errors
        self.tree.rebuild()
        self.max_priority, self.priority_updates, self.window_max_priority = counters
