"""Nature DQN (Mnih et al. 2015) on an Atari game, the whole algorithm in one file: ``python nature_dqn.py``.

Read it top to bottom: the game, the replay memory, the network and its learning step, the loop. It is ``python
main.py`` with its defaults, less all that a long run needs besides the algorithm (checkpoints, resume, Ctrl-C, other
games and recipes, GPU speed-ups): run main.py for those. Adam stands in for RMSProp, as in main.py and CleanRL.

A checked description: tests/test_nature_dqn.py runs this file (on one torch thread) and main.py (--threads 1) with

    --env Breakout --seed 0 --steps 5000 --learning-starts 1000 --train-every 16 --batch-size 8 --memory-size 2000
    --eps-decay-steps 2000 --target-every 500 --eval-every 2500 --eval-episodes 1 --device cpu

and asserts that both play the same training games (episodes.csv: the step each ended at, its score, its length),
score the same in each evaluation (rewards.txt) and end with the same weights, bit for bit.
"""

import argparse
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
    """The paper's settings (Extended Data Table 1) as flags; the defaults are main.py's."""
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
    add("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="where the network learns")
    add("--out", default="runs/nature_dqn", help="folder of episodes.csv and rewards.txt, as main.py writes them")
    return parser.parse_args(argv)


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
    pixel-wise max of the last two (sprites flicker from frame to frame), in grayscale, resized to 84x84. A game
    starts with random no-ops, so that its start varies, and FIRE is pressed where the game waits for it to serve
    (at the start and after each lost life), which a random policy would take long to find."""

    def __init__(self, game: str, seed: int, noop_max: int, max_frames: int) -> None:
        # One frame per ale.act(): the skip and the max are done here. No sticky actions: the no-op starts vary games.
        env = gym.make(
            f"ALE/{game}-v5", frameskip=1, repeat_action_probability=0.0, max_num_frames_per_episode=max_frames
        ).unwrapped
        env.reset(seed=seed)  # seeds the emulator
        self.ale, self.actions, meanings = env.ale, list(env._action_set), env.get_action_meanings()
        self.fire = self.actions[meanings.index("FIRE")] if "FIRE" in meanings and len(self.actions) >= 3 else None
        self.noop_max, self.max_frames = noop_max, max_frames
        self.rng = np.random.default_rng(seed)  # the no-op starts' draws
        self.screens = np.zeros((2, *self.ale.getScreenDims()), dtype=np.uint8)
        self.rows = area_weights(self.screens.shape[1], FRAME_SIZE)
        self.columns = area_weights(self.screens.shape[2], FRAME_SIZE).T.contiguous()
        self.lives = 0

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


def first_stack(frame: np.ndarray) -> np.ndarray:
    """A game's first state: its first frame four times over."""
    return np.repeat(frame[None], STACK, axis=0)


def next_stack(stack: np.ndarray, frame: np.ndarray) -> np.ndarray:
    return np.concatenate([stack[1:], frame[None]])


class ReplayMemory:
    """Uniform replay of one frame per step, not four: slot t holds the newest frame of the state at step t, the
    action taken, the reward clipped to its sign, whether the step was terminal for learning (a lost life or the
    game's end), and whether the frame is a game's first. A state is rebuilt at sampling from frames t-3..t; walking
    back, it stops at a game's first frame and repeats it, as the player's stack started. A 1M-step memory is then
    7 GB, not 28."""

    def __init__(self, capacity: int, seed: int) -> None:
        self.capacity, self.cursor, self.size = capacity, 0, 0
        self.frames = np.zeros((capacity, FRAME_SIZE, FRAME_SIZE), dtype=np.uint8)
        self.actions, self.rewards = np.zeros(capacity, dtype=np.int64), np.zeros(capacity, dtype=np.float32)
        self.dones, self.starts = np.zeros(capacity, dtype=bool), np.zeros(capacity, dtype=bool)
        self.rng = np.random.default_rng(seed)  # the sampling's draws

    def push(self, frame: np.ndarray, action: int, reward: float, done: bool, first: bool) -> None:
        slot = self.cursor
        self.frames[slot], self.actions[slot], self.rewards[slot] = frame, action, reward
        self.dones[slot], self.starts[slot] = done, first
        self.cursor, self.size = (slot + 1) % self.capacity, min(self.size + 1, self.capacity)

    def sample(self, batch_size: int, device: torch.device) -> tuple[torch.Tensor, ...]:
        """A uniform batch: states, actions, rewards, whether terminal, next states."""
        # A full memory has overwritten the frames before its oldest slot: the 3 oldest slots' stacks would reach
        # them. The newest slot has no next frame yet.
        skipped = STACK - 1 if self.size == self.capacity else 0
        start, count = (self.cursor - self.size + skipped) % self.capacity, self.size - 1 - skipped
        slots = (start + self.rng.integers(0, count, size=batch_size)) % self.capacity
        while True:  # the last step of a game cut at the frame limit is not terminal, and has no next frame: redraw
            cut = ~self.dones[slots] & self.starts[(slots + 1) % self.capacity]
            if not cut.any():
                break
            slots[cut] = (start + self.rng.integers(0, count, size=int(cut.sum()))) % self.capacity
        columns = [(slots + 1) % self.capacity, slots]  # the next frame, this one, then back to t-3
        for _ in range(STACK - 1):
            later = columns[-1]
            columns.append(np.where(self.starts[later], later, (later - 1) % self.capacity))
        frames = torch.from_numpy(self.frames[np.stack(columns[::-1], axis=1)]).to(device)  # (B, 5, 84, 84)
        scalars = (self.actions[slots], self.rewards[slots], self.dones[slots].astype(np.float32))
        actions, rewards, dones = (torch.from_numpy(values).to(device) for values in scalars)
        return frames[:, :STACK], actions, rewards, dones, frames[:, 1:]


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
    online: QNetwork, target: QNetwork, optimizer: torch.optim.Adam, memory: ReplayMemory, args: Namespace
) -> None:
    """One gradient step on the Huber loss of the TD errors: Huber's gradient is the paper's clipping of the error
    to [-1, 1]. The targets come from the target network, a copy of the online one that moves only at syncs, so
    that a step does not chase its own change; a terminal step's target is its reward alone."""
    states, actions, rewards, dones, next_states = memory.sample(args.batch_size, next(online.parameters()).device)
    q = online(states).gather(1, actions.unsqueeze(1)).squeeze(1)
    with torch.no_grad():
        targets = rewards + args.gamma * (1 - dones) * target(next_states).max(dim=1).values
    loss = F.smooth_l1_loss(q, targets)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    nn.utils.clip_grad_norm_(online.parameters(), args.grad_clip)
    optimizer.step()


def evaluate(network: QNetwork, args: Namespace, index: int, step: int, started: float) -> str:
    """Evaluation ``index``, at ``step``: --eval-episodes whole games (every life) at --eval-epsilon; its line of
    rewards.txt (raw scores). Game k is played on a game of its own seeded by (seed, index, 1, k), its exploration
    drawn from a generator of that seed: an evaluation draws nothing from training's generators (main.py's seeds)."""
    scores = np.zeros(args.eval_episodes)
    for number in range(args.eval_episodes):
        seed = int(np.random.SeedSequence([args.seed, index, 1, number]).generate_state(1)[0])
        game, rng = AtariGame(args.env, seed, args.noop_max, args.max_episode_frames), np.random.default_rng(seed)
        state, score, game_over, cut = first_stack(game.reset()), 0.0, False, False
        while not (game_over or cut):
            frame, reward, _, game_over, cut = game.step(act(network, state, args.eval_epsilon, rng))
            state, score = next_stack(state, frame), score + reward
        scores[number] = score
    line = f"{index:3d} {step:8d} {scores.mean():.1f} {scores.std():.1f} {scores.min():.1f} {scores.max():.1f}"
    return f"{line} {len(scores)} {time.perf_counter() - started:.0f}\n"  # the run's seconds so far


def epsilon_at(step: int, args: Namespace) -> float:
    """Linear from --eps-start at step 0 to --eps-end at --eps-decay-steps, then constant."""
    if step >= args.eps_decay_steps:
        return args.eps_end
    return args.eps_start + step / args.eps_decay_steps * (args.eps_end - args.eps_start)


def main(argv: list[str] | None = None) -> QNetwork:
    """Train as the flags say; the trained network."""
    args = parse_args(argv)
    device, out = torch.device(args.device), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    game = AtariGame(args.env, args.seed, args.noop_max, args.max_episode_frames)
    # The weights are torch's draws from the seed; exploration and sampling have numpy generators of their own.
    torch.manual_seed(args.seed)
    online = QNetwork(len(game.actions)).to(device, memory_format=torch.channels_last)
    target = QNetwork(len(game.actions)).to(device, memory_format=torch.channels_last).requires_grad_(False)
    target.load_state_dict(online.state_dict())
    optimizer = torch.optim.Adam(online.parameters(), lr=args.lr, eps=args.adam_eps, fused=True)
    memory, explore = ReplayMemory(args.memory_size, args.seed), np.random.default_rng(args.seed)
    started = time.perf_counter()
    with open(out / "episodes.csv", "w", 1) as episodes, open(out / "rewards.txt", "w", 1) as rewards:  # by line
        episodes.write("step,score,length,epsilon,seconds\n")
        rewards.write(evaluate(online, args, 0, 0, started))  # the untrained network's score first
        state, first, score, length = first_stack(game.reset()), True, 0.0, 0
        for step in range(1, args.steps + 1):  # ``step``: the count of steps once this one is played
            epsilon = epsilon_at(step - 1, args)
            action = act(online, state, epsilon, explore)
            frame, reward, life_lost, game_over, cut = game.step(action)
            # Learning sees the reward's sign alone, one scale for every game, and a lost life as an end: the value
            # of a state is what the agent scores before it loses a life. The score is the game's own.
            memory.push(state[-1], action, np.sign(reward), life_lost or game_over, first)
            first, score, length = False, score + reward, length + 1
            if game_over or cut:
                episodes.write(f"{step},{score:g},{length},{epsilon:.4f},{time.perf_counter() - started:.1f}\n")
                state, first, score, length = first_stack(game.reset()), True, 0.0, 0
            else:
                state = next_stack(state, frame)
            if step > args.learning_starts and step % args.train_every == 0:
                learn(online, target, optimizer, memory, args)
            if step % args.target_every == 0:
                target.load_state_dict(online.state_dict())
            if step % args.eval_every == 0:
                rewards.write(evaluate(online, args, step // args.eval_every, step, started))
        if args.steps % args.eval_every:  # the final network always gets a line
            rewards.write(evaluate(online, args, args.steps // args.eval_every + 1, args.steps, started))
    return online


if __name__ == "__main__":
    main()
