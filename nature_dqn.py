"""Nature DQN (Mnih et al. 2015) on an Atari game in one file, to read top to bottom (the game, the replay memories,
the network and its learning step, the loop): ``python nature_dqn.py [--prioritized]`` is ``python main.py
[--prioritized]`` (proportional prioritized replay, Schaul et al. 2016) with its defaults, less what a long run needs
besides the algorithm (checkpoints, resume, Ctrl-C, other games and recipes, GPU speed-ups): main.py has those.

Whose each setting is. Mnih et al. (2015), Extended Data Table 1 and Methods: the network, minibatch 32, memory 1M,
4 frames a step and 4 a state, gamma 0.99, learning every 4 steps from step 50,000, epsilon 1 to 0.1 over 1M steps,
up to 30 no-ops at a start, rewards clipped to their sign, the TD error clipped to [-1, 1] (the Huber loss's
gradient), evaluation at epsilon 0.05. DeepMind's code (github.com/deepmind/dqn, 9d9b1d1): the target synced every
10,000 agent steps (NeuralQLearner.lua line 356; the paper's table counts parameter updates), a lost life terminal
for learning (train_agent.lua lines 87, 119). This project's: Adam at 1e-4 (CleanRL's) for RMSProp at 2.5e-4, the
gradient-norm clip at 10 (Stable-Baselines3's, dqn/dqn.py line 97 at e05d2db), FIRE pressed to serve, the no-ops as
frames, games cut at 30 minutes (108,000 frames, Dopamine's cap) where the paper's evaluation stopped at 5.

A checked description: tests/test_nature_dqn.py runs this file (one torch thread) and main.py (--threads 1) with

    --env Breakout --seed 0 --steps 1200 --learning-starts 200 --train-every 2 --batch-size 8 --memory-size 500
    --eps-decay-steps 600 --target-every 301 --grad-clip 0.05 --max-episode-frames 600 --eval-every 600
    --eval-episodes 1 --device cpu

then both with --prioritized: the same training games, evaluations and final weights, bit for bit, while the memory
wraps, games are cut at the frame limit, the gradient clip acts and the priorities vary.
"""

import argparse
import os
import time
from argparse import Namespace
from pathlib import Path

import ale_py
import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

gym.register_envs(ale_py)

FRAME_SKIP = 4  # emulator frames per agent step, the action repeated
FRAME_SIZE = 84  # frames are resized to 84x84
STACK = 4  # the agent's state: its last 4 frames


def parse_args(argv: list[str] | None) -> Namespace:
    """The settings as flags, the defaults main.py's (whose each is: see above); a bad value is refused in one line."""
    parser = argparse.ArgumentParser(formatter_class=argparse.ArgumentDefaultsHelpFormatter)  # --help shows them
    add = parser.add_argument
    add("--env", default="Breakout", help="the Atari game, as ALE names it (ALE/<env>-v5)")
    add("--seed", type=int, default=0, help="seeds the game, the network, exploration and replay sampling")
    add("--steps", type=int, default=10_000_000, help="training agent steps (4 frames each)")
    add("--memory-size", type=int, default=1_000_000, help="replay memory capacity, in agent steps")
    add("--batch-size", type=int, default=32, help="transitions per gradient step")
    add("--learning-starts", type=int, default=50_000, help="steps played before the first gradient step")
    add("--train-every", type=int, default=4, help="agent steps per gradient step")
    add("--target-every", type=int, default=10_000, help="agent steps between target network syncs")
    add("--lr", type=float, default=1e-4, help="Adam's learning rate")
    add("--adam-eps", type=float, default=1e-8, help="Adam's epsilon")
    add("--gamma", type=float, default=0.99, help="discount factor")
    add("--grad-clip", type=float, default=10.0, help="largest gradient norm")
    add("--eps-start", type=float, default=1.0, help="exploration epsilon at the start")
    add("--eps-end", type=float, default=0.1, help="exploration epsilon after its linear decay")
    add("--eps-decay-steps", type=int, default=1_000_000, help="agent steps over which epsilon decays")
    add("--noop-max", type=int, default=30, help="each game starts with 1 to this many no-op frames (at least 1)")
    add("--max-episode-frames", type=int, default=108_000, help="a game is cut after this many frames (30 minutes)")
    add("--eval-every", type=int, default=250_000, help="agent steps between evaluations")
    add("--eval-episodes", type=int, default=10, help="games per evaluation")
    add("--eval-epsilon", type=float, default=0.05, help="exploration epsilon of evaluation games")
    add("--prioritized", action="store_true", help="proportional prioritized replay, as main.py --prioritized")
    add("--alpha", type=float, default=0.6, help="priority exponent: p = (|TD error| + --priority-eps) ** alpha")
    add("--priority-eps", type=float, default=1e-6, help="added to |TD error|, so that no priority is 0")
    add("--beta0", type=float, default=0.4, help="importance-sampling exponent at the start, linear to 1 at --steps")
    add("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="where the network learns")
    add("--out", help="a new folder for episodes.csv and rewards.txt (default runs/nature_dqn-<env>-seed<seed>[-per])")
    args = parser.parse_args(argv)
    for names, rule, meaning in [  # each bad value in one line, before anything is written (nan fails every rule)
        ("steps memory_size batch_size train_every target_every eps_decay_steps noop_max eval_every eval_episodes",
         lambda v: v >= 1, "1 or more"),
        ("learning_starts", lambda v: args.batch_size <= v < args.steps, "from --batch-size to below --steps"),
        ("memory_size", lambda v: v > STACK + 1, f"more than {STACK + 1}"),
        ("max_episode_frames", lambda v: v >= args.noop_max + 17 * FRAME_SKIP, "at least --noop-max + 68 frames"),
        ("gamma eps_start eps_end eval_epsilon beta0", lambda v: 0 <= v <= 1, "within [0, 1]"),
        ("lr adam_eps priority_eps grad_clip alpha", lambda v: 0 < v < np.inf, "positive and finite"),
    ]:  # fmt: skip
        for name in names.split():
            if not rule(getattr(args, name)):
                parser.error(f"--{name.replace('_', '-')} must be {meaning}, got {getattr(args, name)}")
    if f"ALE/{args.env}-v5" not in gym.registry:
        parser.error(f"--env {args.env}: ALE has no game ALE/{args.env}-v5 (Breakout, Pong, SpaceInvaders, ...)")
    try:
        torch.empty(0, device=args.device)
    except (RuntimeError, AssertionError) as error:  # no such device, or a torch built without it
        parser.error(f"--device {args.device}: {str(error).splitlines()[0]}")
    args.out = Path(args.out or f"runs/nature_dqn-{args.env}-seed{args.seed}{'-per' if args.prioritized else ''}")
    if held := [name for name in ("episodes.csv", "rewards.txt", "config.json") if os.path.lexists(args.out / name)]:
        parser.error(f"--out {args.out} holds a run ({', '.join(held)}): give a new folder")  # this file's or main.py's
    return args


def area_weights(n_in: int, n_out: int) -> torch.Tensor:
    """The (n_out, n_in) matrix of area interpolation (OpenCV's INTER_AREA): each output pixel is the mean of the
    input pixels it covers, each weighted by the fraction of it covered."""
    scale = n_in / n_out
    edges = np.arange(n_out + 1) * scale
    low = np.maximum(edges[:-1, None], np.arange(n_in)[None, :])
    high = np.minimum(edges[1:, None], np.arange(1, n_in + 1)[None, :])
    return torch.from_numpy((np.clip(high - low, 0.0, None) / scale).astype(np.float32))


class AtariGame:
    """One ALE game with the paper's preprocessing: each agent step repeats its action for 4 frames and sees the
    pixel-wise max of the last two (sprites flicker from frame to frame), in grayscale, resized to 84x84. This
    project's besides: a game starts with 1 to --noop-max no-op frames, so that starts vary, and FIRE is pressed where
    the game waits for it to serve (at the start, after a lost life), which a random policy would take long to find."""

    def __init__(self, args: Namespace, seed: int) -> None:
        # One frame per ale.act(): the skip and the max are done here. No sticky actions: the no-op starts vary games.
        self.noop_max, self.max_frames = args.noop_max, args.max_episode_frames
        env = gym.make(
            f"ALE/{args.env}-v5", frameskip=1, repeat_action_probability=0, max_num_frames_per_episode=self.max_frames
        ).unwrapped
        env.reset(seed=seed)  # seeds the emulator
        self.ale, self.actions, meanings = env.ale, list(env._action_set), env.get_action_meanings()
        self.fire = self.actions[meanings.index("FIRE")] if "FIRE" in meanings and len(self.actions) >= 3 else None
        self.rng = np.random.default_rng(seed)  # the no-op starts' draws
        self.screens = np.zeros((2, *self.ale.getScreenDims()), dtype=np.uint8)
        self.rows = area_weights(self.screens.shape[1], FRAME_SIZE)
        self.columns = area_weights(self.screens.shape[2], FRAME_SIZE).T.contiguous()

    def reset(self) -> np.ndarray:
        """A new game: 1 to noop_max no-op frames, then FIRE where needed; its first frame."""
        self.ale.reset_game()
        for _ in range(int(self.rng.integers(1, self.noop_max + 1))):
            self.ale.act(self.actions[0])
            if self.ale.game_over(with_truncation=False):
                self.ale.reset_game()
        self.ale.getScreenGrayscale(self.screens[0])
        self.screens[1] = self.screens[0]
        self.lives = self.ale.lives()
        if self.fire is not None:
            self.repeat(self.fire)
        return self.frame()

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, bool]:
        """One agent step: its frame, the game's reward, whether a life was lost, the game is over, or cut."""
        reward = self.repeat(self.actions[action])
        game_over = self.ale.game_over(with_truncation=False)
        life_lost, self.lives = self.ale.lives() < self.lives, self.ale.lives()
        if life_lost and not game_over and self.fire is not None:
            reward += self.repeat(self.fire)
            game_over = self.ale.game_over(with_truncation=False)
        cut = not game_over and self.ale.getEpisodeFrameNumber() >= self.max_frames
        return self.frame(), reward, life_lost, game_over, cut

    def repeat(self, action: ale_py.Action) -> float:
        """``action`` for FRAME_SKIP frames, keeping the screens of the last two; their reward."""
        reward = 0.0
        for k in range(FRAME_SKIP):
            reward += self.ale.act(action)
            if self.ale.game_over(with_truncation=False):  # the last screen is the game's end, twice
                self.ale.getScreenGrayscale(self.screens[0])
                self.screens[1] = self.screens[0]
                break
            if k >= FRAME_SKIP - 2:
                self.ale.getScreenGrayscale(self.screens[k - FRAME_SKIP + 2])
        return reward

    def frame(self) -> np.ndarray:
        """The max of the last two screens, area-resized to 84x84 (two matrix products), as uint8."""
        pooled = torch.from_numpy(np.maximum(self.screens[0], self.screens[1])).float()
        return torch.round(self.rows @ pooled @ self.columns).to(torch.uint8).numpy()


def stacked(frame: np.ndarray, stack: np.ndarray | None = None) -> np.ndarray:
    """The state that ends with ``frame``: the last 4 frames; a game's first frame, four times over."""
    return np.repeat(frame[None], STACK, axis=0) if stack is None else np.concatenate([stack[1:], frame[None]])


class ReplayMemory:
    """Uniform replay of one frame per step, not four: slot t holds the newest frame of the state at step t, the
    action taken, the reward clipped to its sign, whether the step was terminal for learning (a lost life or the
    game's end), and whether the frame is a game's first. A state is rebuilt at sampling from frames t-3..t, back to
    a game's first frame, which it repeats, as the player's stack started: a 1M-step memory is 7 GB, not 28."""

    def __init__(self, args: Namespace) -> None:
        capacity, self.capacity, self.cursor, self.size = args.memory_size, args.memory_size, 0, 0
        self.frames = np.zeros((capacity, FRAME_SIZE, FRAME_SIZE), dtype=np.uint8)
        self.actions, self.rewards = np.zeros(capacity, dtype=np.int64), np.zeros(capacity, dtype=np.float32)
        self.dones, self.starts = np.zeros(capacity, dtype=bool), np.zeros(capacity, dtype=bool)
        self.rng = np.random.default_rng(args.seed)  # the sampling's draws

    def push(self, frame: np.ndarray, action: int, reward: float, done: bool, first: bool) -> None:
        slot = self.cursor
        self.frames[slot], self.actions[slot], self.rewards[slot] = frame, action, reward
        self.dones[slot], self.starts[slot] = done, first
        self.cursor, self.size = (slot + 1) % self.capacity, min(self.size + 1, self.capacity)

    def sample(self, batch_size: int, device: torch.device, beta: float) -> tuple[tuple[torch.Tensor, ...], ...]:
        """A uniform batch (see ``batch``), its importance weights (all 1: ``beta`` is prioritized replay's), slots."""
        # A full memory has overwritten the frames before its oldest slot: the 3 oldest slots' stacks would reach
        # them. The newest slot has no next frame yet.
        skipped = STACK - 1 if self.size == self.capacity else 0
        start, count = (self.cursor - self.size + skipped) % self.capacity, self.size - 1 - skipped
        slots = (start + self.rng.integers(0, count, size=batch_size)) % self.capacity
        # The last step of a game cut at the frame limit is not terminal, and has no next frame: drawn again.
        while (cut := ~self.dones[slots] & self.starts[(slots + 1) % self.capacity]).any():
            slots[cut] = (start + self.rng.integers(0, count, size=int(cut.sum()))) % self.capacity
        return self.batch(slots, device), torch.ones(batch_size, device=device), slots

    def batch(self, slots: np.ndarray, device: torch.device) -> tuple[torch.Tensor, ...]:
        """The transitions of ``slots``: states, actions, rewards, whether terminal, next states."""
        columns = [(slots + 1) % self.capacity, slots]  # the next frame, this one, then back to t-3
        for _ in range(STACK - 1):
            later = columns[-1]
            columns.append(np.where(self.starts[later], later, (later - 1) % self.capacity))
        frames = torch.from_numpy(self.frames[np.stack(columns[::-1], axis=1)]).to(device)  # (B, 5, 84, 84)
        scalars = (self.actions[slots], self.rewards[slots], self.dones[slots].astype(np.float32))
        actions, rewards, dones = (torch.from_numpy(values).to(device) for values in scalars)
        return frames[:, :STACK], actions, rewards, dones, frames[:, 1:]


class SumTree:
    """Priorities in a binary tree of sums, so that a draw in proportion to them takes log2(capacity) steps, not
    capacity: node 1 is the root, node i's children are 2i and 2i + 1, and slot s's priority is node capacity + s."""

    def __init__(self, capacity: int) -> None:
        self.capacity, self.nodes = capacity, np.zeros(2 * capacity)

    def set(self, slot: int, priority: float) -> None:
        node = self.capacity + slot
        self.nodes[node] = priority
        while node > 1:  # each sum above it, from its two children again: adding differences would drift
            node //= 2
            self.nodes[node] = self.nodes[2 * node] + self.nodes[2 * node + 1]

    def find(self, value: float) -> int:
        """The slot of a value in [0, total): down from the root, left where the value is below the left sum, else
        right, less that sum. Rounding can leave a value at a sum's edge: an empty subtree is never entered."""
        node = 1
        while node < self.capacity:
            left, right = self.nodes[2 * node], self.nodes[2 * node + 1]
            if (value < left and left > 0) or right <= 0:
                node = 2 * node
            else:
                value, node = value - left, 2 * node + 1
        return node - self.capacity


class PrioritizedMemory(ReplayMemory):
    """Proportional prioritized replay, as main.py --prioritized: slot i drawn with probability p_i / sum(p), p_i =
    (|TD error| + eps) ** alpha, and 0 where it cannot be (the newest, a full memory's 3 oldest, a cut game's last
    step); a new transition gets the largest priority written lately, so that it is replayed soon."""

    def __init__(self, args: Namespace) -> None:
        super().__init__(args)
        self.tree, self.alpha, self.priority_eps = SumTree(self.capacity), args.alpha, args.priority_eps
        self.new_priority, self.largest_lately, self.updates = 1.0, 0.0, 0

    def push(self, frame: np.ndarray, action: int, reward: float, done: bool, first: bool) -> None:
        super().push(frame, action, reward, done, first)
        slot, before = (self.cursor - 1) % self.capacity, (self.cursor - 2) % self.capacity  # slot's priority: 0
        if self.size == self.capacity:  # the 3 oldest slots' stacks now reach overwritten frames
            for k in range(1, STACK):
                self.tree.set((slot + k) % self.capacity, 0.0)
        if self.size > 1 and (self.dones[before] or not first):  # the step before has its next frame now
            self.tree.set(before, self.new_priority)

    def sample(self, batch_size: int, device: torch.device, beta: float) -> tuple[tuple[torch.Tensor, ...], ...]:
        """A batch drawn by priority, a draw in each of ``batch_size`` equal parts of [0, total), and its importance
        weights (N P(i)) ** -beta, undoing drawing's bias at beta 1, over the batch's largest: they only scale down."""
        total = self.tree.nodes[1]
        values = (np.arange(batch_size) + self.rng.random(batch_size)) * (total / batch_size)
        slots = np.array([self.tree.find(value) for value in values])
        drawable = self.size - 1 - (STACK - 1 if self.size == self.capacity else 0)  # N
        weights = (drawable * self.tree.nodes[self.capacity + slots] / total) ** -beta
        weights = torch.from_numpy((weights / weights.max()).astype(np.float32)).to(device)
        return self.batch(slots, device), weights, slots

    def update(self, slots: np.ndarray, td_errors: np.ndarray) -> None:
        """Priorities from |TD errors|; a new transition's rises with them, and every 1,000 updates falls to theirs."""
        priorities = [(abs(float(error)) + self.priority_eps) ** self.alpha for error in td_errors]
        for slot, priority in zip(slots, priorities, strict=True):
            self.tree.set(slot, priority)
        self.new_priority = max(self.new_priority, *priorities)
        self.largest_lately = max(self.largest_lately, *priorities)
        self.updates += 1
        if self.updates % 1000 == 0:
            self.new_priority, self.largest_lately = self.largest_lately, 0.0


class QNetwork(nn.Module):
    """The paper's network: three convolutions (32 8x8 filters of stride 4, 64 4x4 of stride 2, 64 3x3 of stride
    1), 512 hidden units, one Q-value per action. Takes uint8 stacks and scales them to [0, 1] itself."""

    def __init__(self, n_actions: int) -> None:
        super().__init__()
        self.n_actions = n_actions
        self.layers = nn.Sequential(
            nn.Conv2d(STACK, 32, 8, 4), nn.ReLU(), nn.Conv2d(32, 64, 4, 2), nn.ReLU(), nn.Conv2d(64, 64, 3, 1),
            nn.ReLU(), nn.Flatten(), nn.Linear(64 * 7 * 7, 512), nn.ReLU(), nn.Linear(512, n_actions),
        )  # fmt: skip

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        # Channels last, as the weights (see main): the CPU's convolutions are about 20% faster so.
        return self.layers(frames.contiguous(memory_format=torch.channels_last) / 255.0)


def act(network: QNetwork, state: np.ndarray, epsilon: float, rng: np.random.Generator) -> int:
    """Epsilon-greedy: a random action with probability epsilon, else the one of the highest Q-value."""
    if rng.random() < epsilon:
        return int(rng.integers(network.n_actions))
    with torch.inference_mode():
        device = next(network.parameters()).device
        return int(network(torch.from_numpy(state[None]).to(device)).argmax(dim=1).item())


def learn(
    online: QNetwork, target: QNetwork, optimizer: torch.optim.Adam, memory: ReplayMemory, args: Namespace, beta: float
) -> None:
    """One gradient step on the Huber loss of the TD errors (its gradient is the paper's error clipped to [-1, 1]). The
    targets come from the target network, which moves only at syncs: a step does not chase its own change."""
    (states, actions, rewards, dones, next_states), weights, slots = memory.sample(args.batch_size, args.device, beta)
    q = online(states).gather(1, actions.unsqueeze(1)).squeeze(1)
    with torch.no_grad():
        targets = rewards + args.gamma * (1 - dones) * target(next_states).max(dim=1).values  # terminal: r
    loss = (weights * F.smooth_l1_loss(q, targets, reduction="none")).mean()  # uniform replay's weights are 1
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    nn.utils.clip_grad_norm_(online.parameters(), args.grad_clip)
    optimizer.step()
    if args.prioritized:  # the priorities of the slots learnt from: their new |TD errors|
        memory.update(slots, (targets - q.detach()).abs().cpu().numpy())


def evaluate(network: QNetwork, args: Namespace, index: int, step: int, started: float) -> str:
    """Evaluation ``index``, at ``step``: --eval-episodes whole games (every life) at --eval-epsilon; its rewards.txt
    line (raw scores). Game k is seeded, and explores, by (seed, index, 1, k), as main.py's: training's draws stay."""
    scores = np.zeros(args.eval_episodes)
    for number in range(args.eval_episodes):
        seed = int(np.random.SeedSequence([args.seed, index, 1, number]).generate_state(1)[0])
        game, rng = AtariGame(args, seed), np.random.default_rng(seed)
        state, score, game_over, cut = stacked(game.reset()), 0.0, False, False
        while not (game_over or cut):
            frame, reward, _, game_over, cut = game.step(act(network, state, args.eval_epsilon, rng))
            state, score = stacked(frame, state), score + reward
        scores[number] = score
    line = f"{index:3d} {step:8d} {scores.mean():.1f} {scores.std():.1f} {scores.min():.1f} {scores.max():.1f}"
    return f"{line} {len(scores)} {time.perf_counter() - started:.0f}\n"  # the run's seconds so far


def linear(step: int, start: float, end: float, duration: int) -> float:
    """``start`` at step 0, moving linearly to ``end`` at ``duration``, then constant: epsilon, and beta."""
    return end if step >= duration else start + step / duration * (end - start)


def main(argv: list[str] | None = None) -> QNetwork:
    """Train as the flags say; the trained network."""
    args = parse_args(argv)
    device, out = torch.device(args.device), args.out
    out.mkdir(parents=True, exist_ok=True)  # (a new folder, or one without a run: see parse_args)
    game = AtariGame(args, args.seed)
    # The weights are torch's draws from the seed; exploration and sampling have numpy generators of their own.
    torch.manual_seed(args.seed)
    online = QNetwork(len(game.actions)).to(device, memory_format=torch.channels_last)
    target = QNetwork(len(game.actions)).to(device, memory_format=torch.channels_last).requires_grad_(False)
    target.load_state_dict(online.state_dict())
    optimizer = torch.optim.Adam(online.parameters(), lr=args.lr, eps=args.adam_eps, fused=True)
    memory = PrioritizedMemory(args) if args.prioritized else ReplayMemory(args)
    explore, started = np.random.default_rng(args.seed), time.perf_counter()
    # Written line by line; "x" creates each file, and never writes through a link someone put in its place.
    with open(out / "episodes.csv", "x", 1) as episodes, open(out / "rewards.txt", "x", 1) as rewards:
        episodes.write("step,score,length,epsilon,seconds\n")
        rewards.write(evaluate(online, args, 0, 0, started))  # the untrained network's score first
        state, first, score, length = stacked(game.reset()), True, 0.0, 0
        for step in range(1, args.steps + 1):  # ``step``: the count of steps once this one is played
            epsilon = linear(step - 1, args.eps_start, args.eps_end, args.eps_decay_steps)
            action = act(online, state, epsilon, explore)
            frame, reward, life_lost, game_over, cut = game.step(action)
            # Learning sees the reward's sign alone, one scale for every game, and a lost life as an end: the value
            # of a state is what the agent scores before it loses a life. The score is the game's own.
            memory.push(state[-1], action, np.sign(reward), life_lost or game_over, first)
            first, score, length = False, score + reward, length + 1
            if game_over or cut:
                episodes.write(f"{step},{score:g},{length},{epsilon:.4f},{time.perf_counter() - started:.1f}\n")
                state, first, score, length = stacked(game.reset()), True, 0.0, 0
            else:
                state = stacked(frame, state)
            if step > args.learning_starts and step % args.train_every == 0:
                learn(online, target, optimizer, memory, args, linear(step, args.beta0, 1.0, args.steps))
            if step % args.target_every == 0:
                target.load_state_dict(online.state_dict())
            if step % args.eval_every == 0:
                rewards.write(evaluate(online, args, step // args.eval_every, step, started))
        if args.steps % args.eval_every:  # the final network always gets a line
            rewards.write(evaluate(online, args, args.steps // args.eval_every + 1, args.steps, started))
    return online


if __name__ == "__main__":
    main()
