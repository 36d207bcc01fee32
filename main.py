"""Train Nature DQN (Mnih et al. 2015) on an Atari game: ``python main.py --env Breakout``.

This file is the only one that wires the modules together: the command line (utils_config),
the game (utils_env), the replay memory (utils_memory), the agent and its network (utils_drl,
utils_model), and the run folder (utils_run).
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple

# Before torch loads OpenMP (libgomp reads this once): its threads wait for each other at every
# barrier by spinning 300,000 times before they sleep. When another process holds a core, the
# spinning thread takes CPU time from the one it waits for, and a run falls to a third of its speed
# (see README, "Sharing a machine"); 1,000 spins keep it at half or more, for about 10% alone.
if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
    os.environ["GOMP_SPINCOUNT"] = "1000"

import numpy as np
import torch
from tqdm import tqdm

from utils_config import RESUMABLE_OPTIONS, parse_config, pick_device, use_threads
from utils_drl import Agent, CheckpointError, linear_schedule, save_checkpoint
from utils_env import AtariEnv, FrameStack, evaluate
from utils_memory import PrioritizedReplayMemory, ReplayMemory
from utils_run import (
    EPISODES_FILE,
    INTERRUPTED_CHECKPOINT,
    MEMORY_FILE,
    REWARDS_FILE,
    RunFolderError,
    RunLock,
    RunLogError,
    append_line,
    check_free_space,
    describe_os_error,
    episode_line,
    load_memory,
    load_newest_checkpoint,
    reconcile_with_checkpoint,
    remove_leftovers,
    rewards_line,
    save_memory,
    start_episodes,
)
from utils_types import EvalResult, GameResult


@dataclass
class Progress:
    """Counters that a checkpoint carries across a resume."""

    step: int = 0
    evaluations: int = 0  # evaluations done; the next one gets this index
    episodes: int = 0
    wall_seconds: float = 0.0
    last_score: float = float("nan")


class Player:
    """Plays the training game with the agent and pushes every step into the replay memory."""

    def __init__(self, env: AtariEnv, memory: ReplayMemory) -> None:  # any game with reset() and step()
        self.env = env
        self.memory = memory
        self.stack = FrameStack(memory.stack_depth, memory.frames.shape[1:])
        self.new_game()

    def new_game(self) -> None:
        self.state = self.stack.reset(self.env.reset())
        self.first = True  # the current frame starts a game
        self.episode_return = 0.0
        self.episode_length = 0

    def step(self, action: int) -> GameResult | None:
        """Play one agent step; return the game's raw score and length when it ended, else None."""
        result = self.env.step(action)
        learning_terminal = result.terminated or result.life_lost
        self.memory.push(self.state[-1], action, np.sign(result.reward), learning_terminal, self.first)
        self.first = False
        self.episode_return += result.reward
        self.episode_length += 1
        if result.terminated or result.truncated:
            finished = GameResult(self.episode_return, self.episode_length)
            self.new_game()
            return finished
        self.state = self.stack.push(result.frame)
        return None

    def state_dict(self) -> dict[str, Any]:
        return {
            "env": self.env.get_state(),
            "stack": torch.from_numpy(self.state.copy()),
            "first": self.first,
            "episode_return": self.episode_return,
            "episode_length": self.episode_length,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.env.set_state(state["env"])
        self.stack.frames[:] = state["stack"].numpy()
        self.first = state["first"]
        self.episode_return = state["episode_return"]
        self.episode_length = state.get("episode_length", 0)  # absent from older checkpoints


class StopRequest:
    """Within its ``with`` block, turns the first Ctrl-C (or SIGTERM) into a flag the loop checks
    between steps, so the checkpoint it writes is consistent; a second Ctrl-C stops at once."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopRequest:
        for signum in (signal.SIGINT, signal.SIGTERM):
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exception: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        tqdm.write("Stopping after this step to save a checkpoint (Ctrl-C again to quit without saving).")


def run_evaluation(args: argparse.Namespace, agent: Agent, index: int, out: Path) -> EvalResult:
    """Evaluate on a fresh game seeded by (seed, index), so a resumed run evaluates identically."""
    seed = int(np.random.SeedSequence([args.seed, index, 1]).generate_state(1)[0])
    env = AtariEnv(args.env, seed, args.sticky_actions, args.max_episode_frames)
    rng = np.random.default_rng(seed)
    frame_dir = out / f"eval_{index:03d}" if args.render else None
    return evaluate(
        lambda state, eps: agent.act(state, eps, rng), env, args.eval_episodes, args.eval_epsilon, frame_dir
    )


class TrainSummary(NamedTuple):
    exit_code: int  # 0 when all steps ran, 130 when stopped by Ctrl-C, 1 when training failed
    steps: int
    learning_steps_per_second: float  # loop speed once learning started, evaluations excluded


class TrainingDiverged(Exception):
    """The loss or the weights stopped being finite; no checkpoint of them is written."""


def main(argv: list[str] | None = None) -> int:
    args, checkpoint = parse_config(argv)
    if args.evaluate is not None:
        try:
            return play_checkpoint(args, checkpoint)
        except OSError as error:
            print(f"main.py: error: {describe_os_error(error)}", file=sys.stderr, flush=True)
            return 1
    return train(args, checkpoint).exit_code


def play_checkpoint(args: argparse.Namespace, checkpoint: dict[str, Any]) -> int:
    """Play --eval-episodes games with the checkpoint's network, printing each game's score."""
    use_threads(args.threads)
    env = AtariEnv(args.env, args.seed, args.sticky_actions, args.max_episode_frames)
    agent = Agent(env.n_actions, pick_device(args.device), dueling=args.dueling, seed=args.seed)
    agent.online.load_state_dict(checkpoint["agent"]["online"])
    print(
        f"Playing {args.env} with {args.evaluate} (trained {checkpoint['run']['step']} steps): "
        f"{args.eval_episodes} games, epsilon {args.eval_epsilon}",
        flush=True,
    )
    rng = np.random.default_rng(args.seed)
    frame_dir = None
    if args.render:
        source = Path(args.evaluate)
        folder = Path(args.out) if args.out else source.parent
        frame_dir = folder / f"playback_{source.stem}"
        suffix = 1
        while frame_dir.exists():  # never replace frames a user already has
            frame_dir, suffix = folder / f"playback_{source.stem}_{suffix}", suffix + 1
    scores = []
    for episode in range(args.eval_episodes):
        result = evaluate(
            lambda state, eps: agent.act(state, eps, rng),
            env,
            1,
            args.eval_epsilon,
            frame_dir if episode == 0 else None,
        )
        scores.append(result.scores[0])
        print(f"Episode #{episode}: reward: {scores[-1]:.1f}", flush=True)
    print(f"Mean reward over {len(scores)} episodes: {np.mean(scores):.1f}", flush=True)
    if frame_dir:
        print(f"Frames of episode #0: {frame_dir}", flush=True)
    return 0


def train(args: argparse.Namespace, checkpoint: dict[str, Any] | None) -> TrainSummary:
    """Train (or continue training) the run that ``parse_config`` set up, holding its folder's
    lock. A failure ends in one line on stderr, with the folder as the last checkpoint left it."""
    out = Path(args.out)
    try:
        with RunLock(out), StopRequest() as stop:
            return run_training(args, checkpoint, stop)
    except KeyboardInterrupt:  # the second Ctrl-C
        print(f"Quit without saving; {last_checkpoint(out)}", file=sys.stderr, flush=True)
        return TrainSummary(130, 0, math.nan)
    except TrainingDiverged as error:
        message = f"{error}; {last_checkpoint(out)}. Try a lower --lr, or a finite --grad-clip"
    except (RunFolderError, RunLogError) as error:
        message = str(error)
    except OSError as error:
        message = describe_os_error(error)
    print(f"main.py: error: {message}", file=sys.stderr, flush=True)
    return TrainSummary(1, 0, math.nan)


def last_checkpoint(out: Path) -> str:
    try:
        path, checkpoint, _ = load_newest_checkpoint(out)
    except CheckpointError:
        return "no checkpoint was written yet"
    return f"the last checkpoint is {path} (step {checkpoint['run']['step']})"


def learning_config(args: argparse.Namespace) -> dict[str, Any]:
    """The options that decide what the replay memory holds: all but those a resume may change."""
    return {k: v for k, v in vars(args).items() if k not in RESUMABLE_OPTIONS | {"out", "evaluate"}}


def run_training(args: argparse.Namespace, checkpoint: dict[str, Any] | None, stop: StopRequest) -> TrainSummary:
    out = Path(args.out)
    remove_leftovers(out)
    device = pick_device(args.device)
    use_threads(args.threads)
    print(f"Run folder: {out}  ({args.env}, device {device}, {torch.get_num_threads()} CPU threads)", flush=True)

    env = AtariEnv(args.env, args.seed, args.sticky_actions, args.max_episode_frames)
    agent = Agent(
        env.n_actions,
        device,
        lr=args.lr,
        adam_eps=args.adam_eps,
        loss=args.loss,
        grad_clip=args.grad_clip,
        double=args.double,
        dueling=args.dueling,
        seed=args.seed,
    )
    # A checkpoint holds the online and target weights and Adam's two moments.
    check_free_space(out, 4 * sum(p.numel() * p.element_size() for p in agent.online.parameters()))
    memory_type = PrioritizedReplayMemory if args.prioritized else ReplayMemory
    options = {"alpha": args.alpha, "priority_eps": args.priority_eps} if args.prioritized else {}
    memory = memory_type(
        args.memory_size, device=device, seed=args.seed, n_step=args.n_step, gamma=args.gamma, **options
    )
    player = Player(env, memory)
    progress = Progress()
    rewards_path = out / REWARDS_FILE
    episodes_path = out / EPISODES_FILE

    def save(path: Path, line: str | None) -> None:
        nonlocal saved_step
        if not agent.weights_finite():
            raise TrainingDiverged(f"training diverged: the weights are no longer finite at step {progress.step}")
        if args.save_memory:
            save_memory(out / MEMORY_FILE, memory.state_dict(), progress.step, learning_config(args))
        progress.wall_seconds = wall_base + time.perf_counter() - started
        config = {k: v for k, v in vars(args).items() if k != "resume"}
        save_checkpoint(
            path,
            {
                "config": config,
                "run": asdict(progress),
                "agent": agent.state_dict(),
                "player": player.state_dict(),
                "torch_rng": torch.get_rng_state(),
                "rewards_line": line,
            },
        )
        saved_step = progress.step

    def evaluate_and_save() -> None:
        nonlocal evaluation_seconds
        evaluation_start = time.perf_counter()
        index = progress.evaluations
        result = run_evaluation(args, agent, index, out)
        progress.evaluations += 1
        progress.last_score = float(np.mean(result.scores))
        if writer:
            writer.add_scalar("eval/score", progress.last_score, progress.step)
        line = rewards_line(index, progress.step, result, wall_base + time.perf_counter() - started)
        save(out / f"model_{index:03d}.pt", line)  # the checkpoint first: it carries the line
        append_line(rewards_path, line)
        evaluation_seconds += time.perf_counter() - evaluation_start

    started, wall_base, evaluation_seconds, saved_step = time.perf_counter(), 0.0, 0.0, 0

    def loop_clock() -> float:
        """Seconds of training so far in this process, evaluations left out, for steps/s."""
        return time.perf_counter() - evaluation_seconds

    if checkpoint is not None:
        progress = Progress(**checkpoint["run"])
        saved_step = progress.step
        agent.load_state_dict(checkpoint["agent"])
        player.load_state_dict(checkpoint["player"])
        torch.set_rng_state(checkpoint["torch_rng"])
        wall_base = progress.wall_seconds
        for note in reconcile_with_checkpoint(out, checkpoint):
            print(f"Note: {note}", flush=True)
    start_episodes(episodes_path, progress.step)
    writer = open_tensorboard(out) if args.tensorboard else None
    if checkpoint is None:
        evaluate_and_save()  # line 0: the untrained network's score
    else:
        restore_memory(args, out, progress, memory, agent, player, stop)

    loss = mean_q = float("nan")
    beta = args.beta0
    log_mark = learning_mark = (progress.step, loop_clock())  # (step, loop clock) to measure steps/s from
    bar = tqdm(total=args.steps, initial=progress.step, unit="step", dynamic_ncols=True, mininterval=1.0)
    try:
        while progress.step < args.steps and not stop.requested:
            epsilon = linear_schedule(progress.step, args.eps_start, args.eps_end, args.eps_decay_steps)
            game = player.step(agent.act(player.state, epsilon))
            progress.step += 1
            if game is not None:
                progress.episodes += 1
                append_line(episodes_path, episode_line(progress.step, game, epsilon))
                if writer:
                    writer.add_scalar("train/episode_score", game.score, progress.step)
                    writer.add_scalar("train/episode_length", game.length, progress.step)
            if progress.step > args.learning_starts and progress.step % args.train_every == 0:
                beta = linear_schedule(progress.step, args.beta0, 1.0, args.steps)
                batch = memory.sample(args.batch_size, beta)
                result = agent.learn(batch)
                if not math.isfinite(result.loss):
                    raise TrainingDiverged(f"training diverged: the loss became {result.loss} at step {progress.step}")
                memory.update_priorities(batch.indices, result.td_errors)
                loss = result.loss if np.isnan(loss) else 0.99 * loss + 0.01 * result.loss
                mean_q = result.mean_q if np.isnan(mean_q) else 0.99 * mean_q + 0.01 * result.mean_q
            if progress.step % args.target_every == 0:
                agent.sync_target()
            if progress.step == args.learning_starts:
                learning_mark = (progress.step, loop_clock())
            if progress.step % args.eval_every == 0:
                evaluate_and_save()
            bar.update()
            if progress.step % 100 == 0:
                bar.set_postfix(
                    eps=f"{epsilon:.3f}",
                    loss=f"{loss:.4f}",
                    episodes=progress.episodes,
                    eval=progress.last_score,
                    refresh=False,
                )
                if writer:
                    now = loop_clock()
                    scalars = {"epsilon": epsilon, "loss": loss, "mean_q": mean_q}
                    scalars["steps_per_second"] = (progress.step - log_mark[0]) / (now - log_mark[1])
                    if args.prioritized:
                        scalars["beta"] = beta
                    for name, value in scalars.items():
                        writer.add_scalar(f"train/{name}", value, progress.step)
                    log_mark = (progress.step, now)
    finally:
        bar.close()
        if writer:
            writer.close()
    first_step, first_time = learning_mark
    learning_sps = (
        (progress.step - first_step) / (loop_clock() - first_time) if progress.step > first_step else math.nan
    )
    if stop.requested:
        if progress.step > saved_step:  # else the last checkpoint already holds this state
            save(out / INTERRUPTED_CHECKPOINT, None)
        print(f"Interrupted at step {progress.step}; continue with: python main.py --resume {out}", flush=True)
        return TrainSummary(130, progress.step, learning_sps)
    if progress.step % args.eval_every != 0:
        evaluate_and_save()  # the final policy always gets a line
    print(f"Done: {progress.step} steps, last evaluation score {progress.last_score:.1f}", flush=True)
    return TrainSummary(0, progress.step, learning_sps)


def open_tensorboard(out: Path) -> Any:
    from torch.utils.tensorboard import SummaryWriter  # optional dependency, checked in check_values

    return SummaryWriter(str(out / "tensorboard"))


def restore_memory(
    args: argparse.Namespace,
    out: Path,
    progress: Progress,
    memory: ReplayMemory,
    agent: Agent,
    player: Player,
    stop: StopRequest,
) -> None:
    """Reload the saved replay memory if it belongs to the checkpoint, else refill it by playing
    ``learning_starts`` steps with the current policy (not counted as training steps)."""
    state, reason = load_memory(out / MEMORY_FILE, progress.step, learning_config(args))
    if state is not None:
        try:
            memory.load_state_dict(state)
        except (ValueError, KeyError, RuntimeError) as error:
            reason = f"{out / MEMORY_FILE} cannot be used ({error})"
        else:
            if len(memory) or player.first:
                return
            reason = f"{out / MEMORY_FILE} is empty, but the checkpoint is in the middle of a game"
    if reason:
        print(f"Note: {reason}; refilling the replay memory instead", flush=True)
    epsilon = linear_schedule(progress.step, args.eps_start, args.eps_end, args.eps_decay_steps)
    player.new_game()  # an empty memory must start with the first frame of a game
    for _ in tqdm(range(args.learning_starts), desc="refilling replay memory", unit="step", mininterval=1.0):
        if stop.requested:
            break
        player.step(agent.act(player.state, epsilon))


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # outside training, e.g. while a checkpoint loads or a game is played back
        print("Stopped.", file=sys.stderr)
        sys.exit(130)
