"""Train Nature DQN (Mnih et al. 2015) on an Atari game: ``python main.py --env Breakout``.

This file is the only one that wires the modules together: the game (utils_env), the
replay memory (utils_memory), the agent and its network (utils_drl, utils_model).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import math
import signal
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
from tqdm import tqdm

from utils_drl import Agent, CheckpointError, linear_schedule, load_checkpoint, save_checkpoint, write_atomically
from utils_env import AtariEnv, FrameStack, evaluate, game_name, resolve_env_id
from utils_memory import PrioritizedReplayMemory, ReplayMemory
from utils_run import (
    EPISODES_FILE,
    REWARDS_FILE,
    append_line,
    episode_line,
    logged_evaluations,
    rewards_line,
    start_episodes,
)
from utils_types import EvalResult, GameResult

MEMORY_FILE = "memory.pt"
INTERRUPTED_CHECKPOINT = "model_interrupted.pt"
# Options that may differ when a run is resumed; all others must match the saved run.
RESUMABLE_OPTIONS = {"steps", "device", "render", "save_memory", "tensorboard", "resume"}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Train Nature DQN on an Atari game.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add = parser.add_argument
    add("--env", default="Breakout", help="game name (Breakout, pong, space_invaders) or full id (ALE/Breakout-v5)")
    add("--steps", type=int, default=10_000_000, help="training agent steps (4 frames each)")
    add("--seed", type=int, default=0)
    add("--out", default=None, help="run folder (default: runs/<game>-seed<seed>[-per])")
    add("--device", default="auto", help="auto picks cuda, then mps, then cpu")
    add(
        "--resume",
        default=None,
        metavar="RUN_FOLDER",
        help="continue the run in this folder from its newest checkpoint",
    )
    add("--save-memory", action="store_true", help=f"also save the replay memory ({MEMORY_FILE}) at each checkpoint")
    # Preprocessing (Machado et al. 2018 protocol: --sticky-actions 0.25).
    add("--sticky-actions", type=float, default=0.0, help="probability of repeating the previous action")
    add("--max-episode-frames", type=int, default=108_000, help="cut episodes after this many frames")
    # Replay and learning: Mnih et al. 2015 defaults, with Adam (as CleanRL) in place of RMSProp.
    add("--memory-size", type=int, default=1_000_000)
    add("--batch-size", type=int, default=32)
    add("--learning-starts", type=int, default=50_000, help="random-policy steps before learning")
    add("--train-every", type=int, default=4, help="agent steps per gradient step")
    add("--target-every", type=int, default=10_000, help="agent steps between target network syncs")
    add("--lr", type=float, default=1e-4, help="Adam learning rate (CleanRL's; also with --prioritized)")
    add(
        "--adam-eps",
        type=float,
        default=1e-8,
        help="Adam epsilon (PyTorch's and CleanRL's; Dopamine's 1.5e-4 learns Breakout several times slower here)",
    )
    add("--gamma", type=float, default=0.99)
    add("--loss", choices=("huber", "mse"), default="huber", help="TD loss: Huber (Nature's error clip) or squared")
    add("--grad-clip", type=float, default=10.0, help="max gradient norm (Stable-Baselines3's; inf turns clipping off)")
    add("--eps-start", type=float, default=1.0)
    add("--eps-end", type=float, default=0.1)
    add("--eps-decay-steps", type=int, default=1_000_000)
    add("--double", action="store_true", help="Double DQN targets (van Hasselt et al. 2016)")
    add("--dueling", action="store_true", help="dueling network head (Wang et al. 2016)")
    # Prioritized replay (Schaul et al. 2016, proportional variant).
    add("--prioritized", action="store_true", help="proportional prioritized experience replay")
    add("--alpha", type=float, default=0.6, help="priority exponent")
    add("--beta0", type=float, default=0.4, help="initial importance-sampling exponent, annealed to 1")
    add("--priority-eps", type=float, default=1e-6, help="added to |TD error| so no priority is zero")
    # Evaluation.
    add("--eval-every", type=int, default=250_000, help="agent steps between evaluations")
    add("--eval-episodes", type=int, default=10)
    add("--eval-epsilon", type=float, default=0.05)
    add("--render", action="store_true", help="save each evaluation's first episode as eval_NNN/*.png")
    add("--tensorboard", action="store_true", help="log scalars under RUN/tensorboard (needs the tensorboard package)")
    add(
        "--evaluate",
        default=None,
        metavar="CHECKPOINT",
        help="play --eval-episodes games with a saved network instead of training",
    )
    return parser


def parse_config(argv: list[str] | None) -> tuple[argparse.Namespace, dict[str, Any] | None]:
    """Parse and check the flags; with --resume, merge them into the saved run's configuration."""
    parser = build_parser()
    args = parser.parse_args(argv)
    checkpoint = None
    if args.evaluate is not None:
        return playback_config(parser, args, argv)
    if args.resume is not None:
        try:
            checkpoint = load_checkpoint(newest_checkpoint(Path(args.resume)))
        except CheckpointError as error:
            parser.exit(2, f"{parser.prog}: error: cannot resume: {error}\n")
        saved = checkpoint["config"]
        given = explicit_options(parser, argv)
        if "env" in given:  # compare game ids, not spellings
            with contextlib.suppress(ValueError):
                given["env"] = resolve_env_id(given["env"])
        for name, value in given.items():
            if name not in RESUMABLE_OPTIONS and name != "out" and saved.get(name) != value:
                flag = "--" + name.replace("_", "-")
                parser.error(f"{flag} cannot change on resume (the run used {saved.get(name)!r})")
        args = saved_config(parser, saved, given, RESUMABLE_OPTIONS)
        args.out = args.resume
        if args.steps <= checkpoint["run"]["step"]:
            parser.error(f"--steps {args.steps} must exceed the checkpoint's step {checkpoint['run']['step']}")
    check_args(parser, args, resuming=checkpoint is not None)
    return args, checkpoint


def playback_config(
    parser: argparse.ArgumentParser, args: argparse.Namespace, argv: list[str] | None
) -> tuple[argparse.Namespace, dict[str, Any]]:
    """--evaluate: the checkpoint's configuration, with the playback options the user gave."""
    if args.resume is not None:
        parser.error("--evaluate plays a checkpoint; it does not go with --resume")
    try:
        checkpoint = load_checkpoint(Path(args.evaluate))
    except CheckpointError as error:
        parser.exit(2, f"{parser.prog}: error: cannot evaluate: {error}\n")
    given = explicit_options(parser, argv)
    playback = {"evaluate", "eval_episodes", "eval_epsilon", "render", "device", "seed"}
    args = saved_config(parser, checkpoint["config"], given, playback)
    args.out = given.get("out")
    if args.eval_episodes <= 0 or not 0.0 <= args.eval_epsilon <= 1.0:
        parser.error("--eval-episodes must be positive and --eval-epsilon within [0, 1]")
    return args, checkpoint


def saved_config(
    parser: argparse.ArgumentParser, saved: dict[str, Any], given: dict[str, Any], overridable: set[str]
) -> argparse.Namespace:
    """A checkpoint's configuration, over the defaults (for options newer than the saved run),
    under the ``overridable`` options the user typed."""
    defaults = vars(parser.parse_args([]))
    return argparse.Namespace(**{**defaults, **saved, **{k: v for k, v in given.items() if k in overridable}})


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace, resuming: bool) -> None:
    try:
        args.env = resolve_env_id(args.env)
    except ValueError as error:
        parser.error(f"--env: {error}")
    positive = ("steps", "memory_size", "batch_size", "train_every", "target_every", "eval_every", "eval_episodes")
    for name in positive:
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    if args.batch_size > args.memory_size:
        parser.error(f"--batch-size {args.batch_size} exceeds --memory-size {args.memory_size}")
    if args.learning_starts < args.batch_size:
        parser.error(f"--learning-starts {args.learning_starts} must be at least --batch-size {args.batch_size}")
    if args.learning_starts >= args.steps and not resuming:
        parser.error(f"--learning-starts {args.learning_starts} must be below --steps {args.steps}")
    if args.learning_starts > args.memory_size:
        parser.error(f"--learning-starts {args.learning_starts} exceeds --memory-size {args.memory_size}")
    for name in ("eps_start", "eps_end", "eval_epsilon", "sticky_actions", "beta0"):
        if not 0.0 <= getattr(args, name) <= 1.0:
            parser.error(f"--{name.replace('_', '-')} must be within [0, 1], got {getattr(args, name)}")
    if args.alpha < 0 or args.priority_eps <= 0:
        parser.error("--alpha must be non-negative and --priority-eps positive")
    if getattr(args, "tensorboard", False) and importlib.util.find_spec("tensorboard") is None:
        parser.error("--tensorboard needs the tensorboard package: pip install tensorboard")
    if args.out is None:
        args.out = f"runs/{game_name(args.env)}-seed{args.seed}{'-per' if args.prioritized else ''}"
    out = Path(args.out)
    if not resuming and ((out / REWARDS_FILE).exists() or any(out.glob("model_*.pt"))):
        parser.error(f"{out} already holds a run: continue it with --resume {out}, or choose another --out")


def explicit_options(parser: argparse.ArgumentParser, argv: list[str] | None) -> dict[str, Any]:
    """The options the user actually typed, with their parsed values."""
    quiet = argparse.ArgumentParser(add_help=False)
    for action in parser._actions:
        if action.option_strings and action.dest != "help":
            kwargs = {"dest": action.dest, "default": argparse.SUPPRESS}
            if action.nargs == 0:
                kwargs["action"] = "store_true"
            else:
                kwargs["type"] = action.type
            quiet.add_argument(*action.option_strings, **kwargs)
    return vars(quiet.parse_known_args(argv)[0])


def newest_checkpoint(run_dir: Path) -> Path:
    """The run's checkpoint with the highest step: the last evaluation's or an interrupted one."""
    if not run_dir.is_dir():
        raise CheckpointError(f"no run folder {run_dir}")
    evaluations = sorted(
        (p for p in run_dir.glob("model_*.pt") if p.stem.removeprefix("model_").isdigit()),
        key=lambda p: int(p.stem.removeprefix("model_")),
    )
    candidates = evaluations[-1:] + [p for p in [run_dir / INTERRUPTED_CHECKPOINT] if p.exists()]
    if not candidates:
        raise CheckpointError(f"{run_dir} holds no checkpoint (model_NNN.pt)")
    return max(candidates, key=lambda path: load_checkpoint(path)["run"]["step"])


def pick_device(name: str) -> torch.device:
    if name != "auto":
        return torch.device(name)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


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
    exit_code: int  # 0 when all steps ran, 130 when stopped by Ctrl-C
    steps: int
    learning_steps_per_second: float  # loop speed once learning started, evaluations excluded


def main(argv: list[str] | None = None) -> int:
    args, checkpoint = parse_config(argv)
    if args.evaluate is not None:
        return play_checkpoint(args, checkpoint)
    return train(args, checkpoint).exit_code


def play_checkpoint(args: argparse.Namespace, checkpoint: dict[str, Any]) -> int:
    """Play --eval-episodes games with the checkpoint's network, printing each game's score."""
    env = AtariEnv(args.env, args.seed, args.sticky_actions, args.max_episode_frames)
    agent = Agent(env.n_actions, pick_device(args.device), dueling=args.dueling, seed=args.seed)
    agent.online.load_state_dict(checkpoint["agent"]["online"])
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
    """Train (or continue training) the run that ``parse_config`` set up."""
    with StopRequest() as stop:
        return run_training(args, checkpoint, stop)


def run_training(args: argparse.Namespace, checkpoint: dict[str, Any] | None, stop: StopRequest) -> TrainSummary:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = pick_device(args.device)
    print(f"Run folder: {out}  ({args.env}, device {device})", flush=True)

    env = AtariEnv(args.env, args.seed, args.sticky_actions, args.max_episode_frames)
    agent = Agent(
        env.n_actions,
        device,
        lr=args.lr,
        adam_eps=args.adam_eps,
        gamma=args.gamma,
        loss=args.loss,
        grad_clip=args.grad_clip,
        double=args.double,
        dueling=args.dueling,
        seed=args.seed,
    )
    memory_type = PrioritizedReplayMemory if args.prioritized else ReplayMemory
    options = {"alpha": args.alpha, "priority_eps": args.priority_eps} if args.prioritized else {}
    memory = memory_type(args.memory_size, device=device, seed=args.seed, **options)
    player = Player(env, memory)
    progress = Progress()
    rewards_path = out / REWARDS_FILE
    episodes_path = out / EPISODES_FILE
    writer = open_tensorboard(out) if args.tensorboard else None

    def save(path: Path, line: str | None) -> None:
        if args.save_memory:
            payload = {"step": progress.step, "memory": memory.state_dict()}
            write_atomically(out / MEMORY_FILE, lambda temporary: torch.save(payload, temporary))
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

    started, wall_base, evaluation_seconds = time.perf_counter(), 0.0, 0.0

    def loop_clock() -> float:
        """Seconds of training so far in this process, evaluations left out, for steps/s."""
        return time.perf_counter() - evaluation_seconds

    if checkpoint is None:
        evaluate_and_save()  # line 0: the untrained network's score
    else:
        progress = Progress(**checkpoint["run"])
        agent.load_state_dict(checkpoint["agent"])
        player.load_state_dict(checkpoint["player"])
        torch.set_rng_state(checkpoint["torch_rng"])
        wall_base = progress.wall_seconds
        if checkpoint["rewards_line"] and logged_evaluations(rewards_path) < progress.evaluations:
            append_line(rewards_path, checkpoint["rewards_line"])  # stopped between checkpoint and line
        restore_memory(args, out, progress, memory, agent, player, stop)
    start_episodes(episodes_path, progress.step)

    loss = mean_q = float("nan")
    beta = args.beta0
    log_mark = learning_mark = (progress.step, loop_clock())  # (step, loop clock) to measure steps/s from
    bar = tqdm(total=args.steps, initial=progress.step, unit="step", dynamic_ncols=True, mininterval=1.0)
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
    bar.close()
    if writer:
        writer.close()
    first_step, first_time = learning_mark
    learning_sps = (
        (progress.step - first_step) / (loop_clock() - first_time) if progress.step > first_step else math.nan
    )
    if stop.requested:
        save(out / INTERRUPTED_CHECKPOINT, None)
        print(f"Interrupted at step {progress.step}; continue with: python main.py --resume {out}", flush=True)
        return TrainSummary(130, progress.step, learning_sps)
    if progress.step % args.eval_every != 0:
        evaluate_and_save()  # the final policy always gets a line
    print(f"Done: {progress.step} steps, last evaluation score {progress.last_score:.1f}", flush=True)
    return TrainSummary(0, progress.step, learning_sps)


def open_tensorboard(out: Path) -> Any:
    from torch.utils.tensorboard import SummaryWriter  # optional dependency, checked in check_args

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
    """Reload the saved replay memory if it matches the checkpoint, else refill it by playing
    ``learning_starts`` steps with the current policy (not counted as training steps)."""
    saved = out / MEMORY_FILE
    if saved.exists():
        state = torch.load(saved, map_location="cpu", weights_only=True, mmap=True)
        if state["step"] == progress.step:
            memory.load_state_dict(state["memory"])
            return
    epsilon = linear_schedule(progress.step, args.eps_start, args.eps_end, args.eps_decay_steps)
    player.new_game()  # an empty memory must start with the first frame of a game
    for _ in tqdm(range(args.learning_starts), desc="refilling replay memory", unit="step", mininterval=1.0):
        if stop.requested:
            break
        player.step(agent.act(player.state, epsilon))


if __name__ == "__main__":
    sys.exit(main())
