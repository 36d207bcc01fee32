"""Train Nature DQN (Mnih et al. 2015) on an Atari game: ``python main.py --env Breakout``.

This file is the only one that wires the modules together: the command line (utils_config),
the game (utils_env), the replay memory (utils_memory), the agent and its network (utils_drl,
utils_model), and the run folder (utils_run).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any, NamedTuple

# Before torch loads OpenMP (libgomp reads this once): its threads wait for each other at every
# barrier by spinning 300,000 times before they sleep. When another process holds a core, the
# spinning thread takes CPU time from the one it waits for, and a run falls to a third of its speed
# (see README, "Sharing a machine"); 1,000 spins keep it at half or more, for about 10% alone.
# Only in a process started to train: imported into someone else's program (dqn.py), this module
# leaves the process as it found it.
TRAINING_PROGRAMS = ("main.py", "dqn-train", "bench.py")
if Path(sys.argv[0]).name in TRAINING_PROGRAMS and not {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT"} & os.environ.keys():
    os.environ["GOMP_SPINCOUNT"] = "1000"

import numpy as np
import torch
from tqdm import tqdm

from dqn_atari.utils_apex import (
    ActorConfig,
    ActorPool,
    ApexError,
    RayStartError,
    export_weights,
    local_cpus_note,
    start_ray,
)
from dqn_atari.utils_config import (
    available_cpus,
    keep_freed_memory,
    learner_threads,
    learning_config,
    learning_defaults,
    memory_bytes,
    memory_on_device,
    parse_config,
    pick_device,
    program,
    use_threads,
)
from dqn_atari.utils_drl import Agent, linear_schedule
from dqn_atari.utils_env import (
    GYM_ENV_NOTE,
    AtariEnv,
    EmulatorStateError,
    EnvironmentFailed,
    EvaluationStopped,
    GymEnv,
    Player,
    SeededGames,
    SerialGames,
    atari_defaults_note,
    env_label,
    episode_steps,
    evaluate,
    input_shape,
    is_atari,
)
from dqn_atari.utils_heads import value_head
from dqn_atari.utils_memory import PrioritizedReplayMemory, ReplayMemory
from dqn_atari.utils_run import (
    EPISODES_FILE,
    HEALTH_FILE,
    HEALTH_HEADER,
    INTERRUPTED_CHECKPOINT,
    MEMORY_FILE,
    REWARDS_FILE,
    CheckpointError,
    OutputWithoutReader,
    RunFolderError,
    RunLock,
    RunLogError,
    TrackerError,
    Trackers,
    append_line,
    check_free_space,
    describe_os_error,
    episode_line,
    health_line,
    load_memory,
    load_newest_checkpoint,
    prune_checkpoints,
    reconcile_with_checkpoint,
    remove_leftovers,
    rewards_line,
    run_versions,
    save_checkpoint,
    save_config,
    save_memory,
    settle_memory,
    start_log,
    versions_note,
)
from dqn_atari.utils_types import Batch, EvalResult, FinishedGames, GameResult, Progress, RunEvent, StackRule
from dqn_atari.utils_workers import GameWorkers, RemoteGame

EvalMachine = AtariEnv | GymEnv | RemoteGame  # an evaluation's game machine: here, or in a worker process


class StopRequest:
    """Within its ``with`` block, turns the first Ctrl-C (or SIGTERM) into a flag the loop checks
    between steps, so the checkpoint it writes is consistent; a second Ctrl-C stops at once, a
    second SIGTERM does not (several senders may each send one: a dead parent's kernel, Ray's reaper)."""

    def __init__(self) -> None:
        self.requested = False
        self.quit_at_once = False  # while nothing is trained that a checkpoint would keep (see ``at_once``)
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is not threading.main_thread():
            return self  # only the main thread gets signals (dqn.train from a thread): its caller stops it
        for signum in (signal.SIGINT, signal.SIGTERM):
            self._previous[signum] = signal.signal(signum, self._handle)
        # A parent may have left them blocked (Ray's workers block SIGINT, and their children inherit it).
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
        return self

    def __exit__(self, *exception: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    @contextlib.contextmanager
    def at_once(self) -> Iterator[None]:
        """Within it, a stop quits at once (KeyboardInterrupt), as while thousands of games are being made: a stop
        flagged for the first step would wait for all of them."""
        if self.requested:
            raise KeyboardInterrupt
        self.quit_at_once = True
        try:
            yield
        finally:
            self.quit_at_once = False

    def _handle(self, signum: int, frame: Any) -> None:
        if self.quit_at_once:
            self.requested = True
            raise KeyboardInterrupt
        if self.requested:
            if signum == signal.SIGTERM:  # stopping already: another SIGTERM (a dead parent's, a reaper's) waits too
                return
            raise KeyboardInterrupt
        self.requested = True
        tqdm.write("Stopping after this step to save a checkpoint (Ctrl-C again to quit without saving).")


def run_evaluation(
    args: argparse.Namespace,
    agent: Agent,
    index: int,
    out: Path,
    stopped: Callable[[], bool],
    rule: StackRule,
    finished: FinishedGames | None = None,
    machines: list[EvalMachine] | None = None,
) -> EvalResult:
    """Evaluation ``index``: --eval-episodes games seeded by (seed, index), so that a resumed run
    evaluates identically, --eval-envs at a time, their stacks started by ``rule``; ``finished``: the
    games a stop's evaluation had finished, which it goes on from; ``machines``: game machines the
    evaluations share (making one takes a fifth of a second)."""
    entropy = [args.seed, index, 1]
    frame_dir = out / f"eval_{index:03d}" if args.render else None

    def play(finished: FinishedGames | None) -> EvalResult:
        if args.eval_games == "serial":  # one game machine seeded by (seed, index) plays them in turn
            seed = int(np.random.SeedSequence(entropy).generate_state(1)[0])
            games = SerialGames(make_env(args, seed, render=args.render), np.random.default_rng(seed))
        else:
            games = seeded_games(args, entropy, args.render, machines)
        return evaluate(
            agent.act_evaluating,
            games,
            args.eval_episodes,
            args.eval_epsilon,
            args.eval_envs,
            frame_dir,
            stopped,
            rule,
            show_progress=True,
            finished=finished,
        )

    if finished is not None:
        try:
            return play(finished)
        except EmulatorStateError as error:
            print(
                f"Note: the stopped evaluation cannot go on after its {len(finished.scores)} finished games, the "
                f"game's state is {error}; it starts again from its first game",
                flush=True,
            )
    return play(None)


def seeded_games(
    args: argparse.Namespace, entropy: list[int], render: bool, pool: list[EvalMachine] | None = None
) -> SeededGames:
    """Evaluation games each seeded from ``entropy`` and its number, the first rendering with ``render``, on the
    game machines of ``pool`` and new ones."""
    return SeededGames(lambda seed, render: make_env(args, seed, render), entropy, render, pool)


def evaluation_machines(args: argparse.Namespace, workers: GameWorkers | None) -> list[EvalMachine]:
    """With --env-workers, the game machines of seeded evaluations, as many as play at once, made in the ``workers``
    (each seeded again for every game it plays, as a machine made here would be) and stepped there at once; without,
    none yet: they are made here as they are needed."""
    if workers is None:
        return []
    return workers.add(list(range(min(args.eval_envs, args.eval_episodes))))  # each game's seed replaces these


class TrainSummary(NamedTuple):
    exit_code: int  # 0 when all steps ran, 130 when stopped by Ctrl-C, 1 when training failed
    steps: int
    learning_steps_per_second: float  # loop speed once learning started, evaluations excluded
    updates: int = 0  # gradient steps taken in this process


class TrainingDiverged(Exception):
    """The loss, the weights or the values stopped being finite; no checkpoint of them is written."""

    def __init__(self, message: str, advice: str = "Try a lower --lr, or a finite --grad-clip") -> None:
        super().__init__(message)
        self.advice = advice


def main(argv: list[str] | None = None) -> int:
    args, checkpoint = parse_config(argv)
    if args.evaluate is not None:
        try:
            return play_checkpoint(args, checkpoint)
        except OSError as error:
            print(f"{program('main.py')}: error: {describe_os_error(error)}", file=sys.stderr, flush=True)
            return 1
        except EnvironmentFailed as error:
            print(f"{program('main.py')}: error: {error}", file=sys.stderr, flush=True)
            return 1
    return train(args, checkpoint).exit_code


def play_checkpoint(args: argparse.Namespace, checkpoint: dict[str, Any]) -> int:
    """Play --eval-episodes games with the checkpoint's network, --eval-envs at a time, each seeded by
    (--seed, its number), and print each game's score."""
    use_threads(args.threads)
    env = make_env(args, args.seed)
    agent = Agent(env.n_actions, pick_device(args.device), seed=args.seed, **agent_options(args, env))
    try:
        agent.load_online(checkpoint["agent"].get("online"))
    except ValueError as error:
        print(f"{program('main.py')}: error: cannot evaluate {args.evaluate}: {error}", file=sys.stderr, flush=True)
        return 2
    print(
        f"Playing {env_label(args.env)} with {args.evaluate} (trained {checkpoint['run']['step']} steps): "
        f"{args.eval_episodes} games of up to {args.max_episode_frames:,} frames, epsilon {args.eval_epsilon}",
        flush=True,
    )
    frame_dir = None
    if args.render:
        source = Path(args.evaluate)
        folder = Path(args.out) if args.out else source.parent
        frame_dir = folder / f"playback_{source.stem}"
        suffix = 1
        while frame_dir.exists() or frame_dir.is_symlink():  # never replace frames a user has, nor follow a link
            frame_dir, suffix = folder / f"playback_{source.stem}_{suffix}", suffix + 1
    workers = GameWorkers(functools.partial(make_env, args), [], args.env_workers) if args.env_workers else None
    try:
        result = evaluate(
            agent.act_evaluating,
            seeded_games(args, [args.seed], args.render, evaluation_machines(args, workers)),
            args.eval_episodes,
            args.eval_epsilon,
            args.eval_envs,
            frame_dir,
            stack_rule=stack_rule(args, env),
            show_progress=True,
        )
    finally:
        if workers is not None:
            workers.close()
    for episode, score in enumerate(result.scores):
        print(f"Episode #{episode}: reward: {score:.1f}", flush=True)
    print(f"Mean reward over {len(result.scores)} episodes: {np.mean(result.scores):.1f}", flush=True)
    if frame_dir:
        print(f"Frames of episode #0: {frame_dir}", flush=True)
    return 0


def train(
    args: argparse.Namespace, checkpoint: dict[str, Any] | None, callback: Callable[[RunEvent], Any] | None = None
) -> TrainSummary:
    """Train (or continue training) the run that ``parse_config`` set up, holding its folder's
    lock. A failure ends in one line on stderr, with the folder as the last checkpoint left it. ``callback`` (the
    Python API's) is told of each finished game, evaluation and checkpoint; where it returns False, the run stops
    as at a Ctrl-C (a checkpoint, exit code 130)."""
    out = Path(args.out)
    keep_freed_memory()  # for every tensor the learning step allocates (see utils_config)
    try:
        with RunLock(out), StopRequest() as stop:
            return run_training(args, checkpoint, stop, callback)
    except KeyboardInterrupt:  # the second Ctrl-C
        print(f"Quit without saving; {last_checkpoint(out)}", file=sys.stderr, flush=True)
        return TrainSummary(130, 0, math.nan)
    except TrainingDiverged as error:
        message = f"{error}; {last_checkpoint(out)}. {error.advice}"
    except torch.OutOfMemoryError as error:  # the GPU's memory, taken by something else meanwhile
        reason = str(error).split(".")[0]
        message = f"the device ran out of memory ({reason}); {last_checkpoint(out)}. Try --memory-device host"
    except RayStartError as error:
        message = str(error)
    except (ApexError, EnvironmentFailed) as error:
        message = f"{error}; {last_checkpoint(out)}"
    except (RunFolderError, RunLogError, CheckpointError, TrackerError) as error:
        message = str(error)
    except OSError as error:
        message = describe_os_error(error)
    print(f"{program('main.py')}: error: {message}", file=sys.stderr, flush=True)
    return TrainSummary(1, 0, math.nan)


def run_training(
    args: argparse.Namespace,
    checkpoint: dict[str, Any] | None,
    stop: StopRequest,
    callback: Callable[[RunEvent], Any] | None = None,
) -> TrainSummary:
    run = Trainer(args, checkpoint, stop, callback)
    summary = None
    try:
        if not args.actors:
            try:
                run.begin(refill=lambda count: refill_by_playing(run, count))
                play_and_learn(run)
                summary = run.finish()
                return summary
            except EnvironmentFailed:  # the step it failed in is not taken: the checkpoint is the run before it
                run.save_interrupted()
                raise
        started_ray = start_ray(args.ray_address, max(args.actors, available_cpus()))
        pool = ActorPool(actor_config(args, run.env), args.actors, args.actor_timeout, report=tqdm.write)
        try:
            pool.publish(export_weights(run.agent.online, run.progress.step))
            run.begin(refill=lambda count: refill_from_actors(run, pool, count))
            learn_from_actors(run, pool)
        except ApexError:
            run.save_interrupted()
            raise
        finally:
            pool.close(shutdown=started_ray)
        summary = run.finish()
        return summary
    finally:
        run.close(failed=summary is None)


def play_and_learn(run: Trainer) -> None:
    """Nature DQN: this process plays --envs games epsilon-greedy, annealing epsilon, their actions
    from one forward pass, and learns every --train-every steps (counted over all games) from the
    replay memory. A round steps every game, then counts each step in the games' order. With
    --learn-while-playing the round's learning steps come first, while its games play."""
    args, agent, players, progress = run.args, run.agent, run.players, run.progress
    ahead = args.learn_while_playing
    meanwhile = functools.partial(run.learn_round, len(players)) if ahead else None
    while progress.step < args.steps and not run.stop.requested:
        epsilon = exploration(args, progress.step)
        actions = agent.act_all(np.stack([player.state for player in players]), epsilon)
        # The games (or the weights) ahead of the step count: no checkpoint until the round ends.
        run.in_round = len(players) > 1 or ahead
        games = play_round(run, actions, meanwhile)
        if not ahead:
            run.draw_batches(len(games))  # the round's learning steps' batches at once, where they may be drawn ahead
        for game in games:
            run.step_done(game, epsilon, learn=True)
        run.in_round = False


def learn_from_actors(run: Trainer, pool: ActorPool) -> None:
    """Ape-X: the actors play, each with its own epsilon; each of their steps goes into the
    actor's stream of the replay memory and counts as a training step. With --replay-ratio
    fixed the learner learns every --train-every steps, as the single loop does, and waits for
    steps when it is ahead; with free it learns whenever no steps are waiting. The actors get
    the newest weights every --weights-every steps."""
    args, progress = run.args, run.progress
    fixed_ratio = args.replay_ratio == "fixed"
    published = progress.step
    while progress.step < args.steps and not run.stop.requested:
        learning = not fixed_ratio and progress.step > args.learning_starts
        chunk = pool.next_chunk(wait=not learning)
        run.status["actors"] = pool.live
        for index in range(len(chunk) if chunk else 0):
            if progress.step >= args.steps or run.stop.requested:
                break
            chunk.push(run.memory, index)
            run.step_done(chunk.games.get(index), chunk.epsilon, learn=fixed_ratio)
        if learning:
            run.learn(progress.step)
        if progress.step - published >= args.weights_every:
            pool.publish(export_weights(run.agent.online, progress.step))
            published = progress.step


def refill_by_playing(run: Trainer, count: int) -> None:
    """Play ``count`` steps into the memory with the current policy, not counted as training."""
    args, agent, players = run.args, run.agent, run.players
    epsilon = exploration(args, run.progress.step)
    for player in players:
        player.new_game()  # an empty memory must start with the first frame of a game
    rounds = -(-count // len(players))
    for _ in tqdm(range(rounds), desc="refilling replay memory", unit="round", mininterval=1.0):
        if run.stop.requested:
            break
        play_round(run, agent.act_all(np.stack([player.state for player in players]), epsilon))


def play_round(
    run: Trainer, actions: np.ndarray, meanwhile: Callable[[], None] | None = None
) -> list[GameResult | None]:
    """One step of every training game with its action (with --env-workers, in their processes at once), each
    pushed into its stream of the memory; the games each ended. ``meanwhile``: what this process does while the
    games step, before any of their steps is pushed (with the games in this process: before they step)."""
    if run.workers is not None:
        run.workers.step(actions, meanwhile)
    elif meanwhile is not None:
        meanwhile()  # on a GPU its learning steps run there while the games step here
    return [player.step(int(action)) for player, action in zip(run.players, actions, strict=True)]


def refill_from_actors(run: Trainer, pool: ActorPool, count: int) -> None:
    """Push the actors' steps into the memory until it holds ``count``, not counted as training."""
    with tqdm(total=count, desc="refilling replay memory", unit="step", mininterval=1.0) as bar:
        # The live actors' stripes may hold fewer than count (--memory-size / N slots each).
        while len(run.memory) < min(count, run.memory.stripe * pool.live) and not run.stop.requested:
            chunk = pool.next_chunk(wait=True)
            for index in range(len(chunk) if chunk else 0):
                chunk.push(run.memory, index)
            bar.update(len(chunk) if chunk else 0)


class Trainer:
    """The learner's side of a run, the same for the single loop and Ape-X: the agent and the
    replay memory, the run folder's checkpoints and logs, and what each agent step brings
    (learning on schedule, target syncs, evaluations, the progress bar)."""

    def __init__(
        self,
        args: argparse.Namespace,
        checkpoint: dict[str, Any] | None,
        stop: StopRequest,
        callback: Callable[[RunEvent], Any] | None = None,
    ) -> None:
        self.args, self.stop, self.checkpoint, self.callback = args, stop, checkpoint, callback
        self.out = out = Path(args.out)
        remove_leftovers(out)
        device = pick_device(args.device)
        threads = use_threads(learner_threads(args))
        self.versions = run_versions(threads)
        note = versions_note(checkpoint.get("versions"), self.versions) if checkpoint is not None else None
        if note:
            print(f"Note: {note}", flush=True)
        frames_on_device = memory_on_device(args)
        where = f"replay memory on {device}" if frames_on_device else "replay memory in host RAM"
        print(
            f"Run folder: {out}  ({env_label(args.env)}, device {device}, {where}, {threads} CPU threads)", flush=True
        )
        if args.actors and args.ray_address is None and args.replay_ratio == "free":
            note = local_cpus_note(args.actors, available_cpus())
            if note:
                print(f"Note: {note}", flush=True)
        env = make_env(args, args.seed)
        if isinstance(env, GymEnv):
            print(f"Note: {GYM_ENV_NOTE}", flush=True)
            note = atari_defaults_note(vars(args), learning_defaults()) if args.preset is None else None
            if note:
                print(f"Note: {note}", flush=True)
        self.agent = Agent(env.n_actions, device, seed=args.seed, **agent_options(args, env))
        # A checkpoint holds the online and target weights and Adam's two moments; with --save-memory, the
        # new replay memory (up to a full one) is written before the old one is deleted.
        needed = 4 * sum(p.numel() * p.element_size() for p in self.agent.online.parameters())
        if args.save_memory:
            needed += memory_bytes(args.memory_size, env.frame_shape)
        check_free_space(out, needed)
        self.memory = build_memory(args, device, frames_on_device, env)
        self.env = env
        self.workers = None  # --env-workers: the processes that step the games
        with stop.at_once():
            if args.actors:
                games = []  # Ape-X: the actors play
            elif args.env_workers:
                seeds = [training_seed(args.seed, game) for game in range(args.envs)]
                self.workers = GameWorkers(functools.partial(make_env, args), seeds, args.env_workers)
                games = self.workers.games
            else:
                games = [env, *(make_env(args, training_seed(args.seed, game)) for game in range(1, args.envs))]
            # The evaluations' game machines, seeded for each game (with --env-workers, in the workers); a serial
            # evaluation makes its one machine itself.
            self.eval_machines = evaluation_machines(args, self.workers) if args.eval_games == "seeded" else []
        self.players = [Player(game, self.memory, args.clip_rewards, stream) for stream, game in enumerate(games)]
        self.in_round = False  # some games of --envs have stepped beyond the steps counted
        self.progress = Progress()
        self.updates = 0  # gradient steps taken in this process
        self.drawn: collections.deque[Batch] = collections.deque()  # batches drawn ahead for the learning steps due
        self.evaluation_stopped = False  # a stop cut an evaluation short in this process: its games are unsaved
        self.averages: torch.Tensor | None = None  # the loss and mean Q, exponential averages, on the device
        self.beta = args.beta0
        self.status: dict[str, Any] = {}  # shown on the progress bar: what the loop knows beyond the steps
        self.started, self.wall_base, self.evaluation_seconds = time.perf_counter(), 0.0, 0.0
        if checkpoint is not None:
            if set(checkpoint["agent"]) == {"online"}:  # what dqn's TrainedAgent.save writes
                raise CheckpointError(
                    "cannot resume: the checkpoint holds a released agent, its network alone (no optimizer or target "
                    "network): --evaluate plays it; nothing was changed"
                )
            self.progress = Progress(**checkpoint["run"])
            try:  # load_checkpoint checked the parts' kinds; the network's shapes are this run's
                self.agent.load_state_dict(checkpoint["agent"])
                torch.set_rng_state(checkpoint["torch_rng"])
            except (KeyError, TypeError, ValueError, RuntimeError) as error:
                reason = " ".join(str(error).split())[:200]  # load_state_dict's lists span lines
                raise CheckpointError(
                    f"cannot resume: the checkpoint's agent does not fit this run ({type(error).__name__}: {reason}); "
                    "nothing was changed"
                ) from None
            saved_players = checkpoint["players"]
            if self.players and saved_players is not None:
                try:
                    if len(saved_players) != len(self.players):
                        raise ValueError(f"{len(saved_players)} games were saved")
                    for player, state in zip(self.players, saved_players, strict=True):
                        player.load_state_dict(state)
                except (EmulatorStateError, ValueError) as error:  # ValueError: a stack of another shape
                    why = "frame stacks are not this game's"
                    if isinstance(error, EmulatorStateError):
                        why = f"emulator state is {error}"
                    print(
                        f"Note: the checkpoint's games cannot be continued, their {why}; training "
                        "goes on from new games, so the run is no longer the one it would have been",
                        flush=True,
                    )
                    for player in self.players:
                        player.new_game()
            self.wall_base = self.progress.wall_seconds
            for note in reconcile_with_checkpoint(out, checkpoint):
                print(f"Note: {note}", flush=True)
            if self.progress.threads not in (0, threads):
                print(
                    f"Note: the run used {self.progress.threads} CPU threads and goes on with {threads}: it is no "
                    "longer bit for bit the run it would have been (the thread count changes the numerics)",
                    flush=True,
                )
        self.progress.threads = threads
        self.saved_step = self.progress.step
        self.config = {k: v for k, v in vars(args).items() if k != "resume"}
        try:  # before the folder's files are written: a failure leaves them as they were
            self.trackers = Trackers(args, self.progress, self.config, self.versions)
        except TrackerError:
            if self.workers is not None:
                self.workers.close()
            raise
        save_config(out, {**self.config, "versions": self.versions})
        start_log(out / EPISODES_FILE, self.progress.step)
        if isinstance(self.memory, PrioritizedReplayMemory):
            start_log(out / HEALTH_FILE, self.progress.step, HEALTH_HEADER)
        self.bar: tqdm | None = None

    def wall_seconds(self) -> float:
        """The run's wall time so far, across resumes."""
        return self.wall_base + time.perf_counter() - self.started

    def loop_clock(self) -> float:
        """Seconds of training so far in this process, evaluations left out, for steps/s."""
        return time.perf_counter() - self.evaluation_seconds

    def begin(self, refill: Callable[[int], None]) -> None:
        """Evaluate the untrained network (rewards.txt line 0), or on a resume restore the replay
        memory (``refill(count)`` puts ``count`` steps in it when the saved one cannot be used)."""
        if self.checkpoint is None:
            self.evaluate_and_save()
        else:
            self.restore_memory(refill)
            if self.progress.evaluation_due and self.progress.step < self.args.steps:
                self.evaluate_and_save()  # the one a stop interrupted (a final one is finish's)
        self.learning_mark = self.log_mark = (self.progress.step, self.loop_clock())  # (step, clock) for steps/s
        self.rate_mark = (self.progress.step, self.updates, time.perf_counter())  # for the bar's Ape-X figures
        self.bar = tqdm(
            total=self.args.steps, initial=self.progress.step, unit="step", dynamic_ncols=True, mininterval=1.0
        )

    def step_done(self, game: GameResult | None, epsilon: float, learn: bool) -> None:
        """Count one agent step just pushed into the memory (``game``: the game it ended), and do
        what falls due at it: a gradient step (when ``learn``), a target sync, an evaluation."""
        args, progress = self.args, self.progress
        progress.step += 1
        if game is not None:
            if not math.isfinite(game.score):  # finite rewards that add up to more than a float holds
                raise EnvironmentFailed(f"a training game's score became {game.score}, its rewards too large to add")
            progress.episodes += 1
            append_line(self.out / EPISODES_FILE, episode_line(progress.step, game, epsilon, self.wall_seconds()))
            self.trackers.scalars(
                {"train/episode_score": game.score, "train/episode_length": game.length}, progress.step
            )
            self.tell("game", scores=(game.score,))
        if not args.learn_while_playing:  # else done as the step's round played (learn_round)
            self.learn_and_sync(progress.step, learn)
        if progress.step == args.learning_starts:
            self.learning_mark = (progress.step, self.loop_clock())
        if progress.step % args.eval_every == 0:
            self.evaluate_and_save()
        self.bar.update()
        if progress.step % 100 == 0:
            self.show_progress(epsilon)

    def draw_batches(self, steps: int) -> None:
        """Draw the batches of the learning steps due in the next ``steps`` steps (a round of games) together, where
        the memory's draws do not depend on the learning between them: the batches drawn one at a time, gathered and
        sent to the device at once."""
        args, step = self.args, self.progress.step
        due = (step + steps) // args.train_every - max(step, args.learning_starts) // args.train_every
        if due > 1 and self.memory.draws_ahead:
            self.drawn.extend(self.memory.sample_batches(due, args.batch_size))

    def learn_and_sync(self, step: int, learn: bool) -> None:
        """What falls due to the networks at agent step ``step``: a gradient step (when ``learn``), a target sync."""
        if learn and step > self.args.learning_starts and step % self.args.train_every == 0:
            self.learn(step)
        if step % self.args.target_every == 0:
            self.agent.sync_target()

    def learn_round(self, steps: int) -> None:
        """--learn-while-playing: the gradient steps and target syncs due at the next ``steps`` steps, in their order,
        on the memory as it stands before those steps are pushed (their games step meanwhile)."""
        self.draw_batches(steps)
        for step in range(self.progress.step + 1, self.progress.step + steps + 1):
            self.learn_and_sync(step, learn=True)

    def learn(self, step: int) -> None:
        """One gradient step on a sampled batch (prioritized replay's beta as at agent step ``step``), and the
        priorities of its transitions."""
        self.beta = linear_schedule(step, self.args.beta0, self.args.beta_end, self.args.steps)
        batch = self.drawn.popleft() if self.drawn else self.memory.sample(self.args.batch_size, self.beta)
        result = self.agent.learn(batch)
        self.memory.update_priorities(batch.indices, result.priorities)  # uniform: never read
        self.updates += 1
        # Averages kept on the device, read when shown: a read per step would make the host wait
        # for every learning step on a GPU. A loss that stops being finite stays so in its average.
        if self.averages is None:
            self.averages = torch.stack([result.loss, result.mean_q])
        else:
            self.averages.lerp_(torch.stack([result.loss, result.mean_q]), 0.01)

    def read_averages(self) -> tuple[float, float]:
        """The loss and mean Q averages (nan before learning); a loss gone infinite or nan is divergence."""
        if self.averages is None:
            return math.nan, math.nan
        loss, mean_q = self.averages.tolist()
        if not math.isfinite(loss):
            raise TrainingDiverged(f"training diverged: the loss became {loss} by step {self.progress.step}")
        return loss, mean_q

    def show_progress(self, epsilon: float) -> None:
        progress = self.progress
        loss, mean_q = self.read_averages()
        postfix = {"loss": f"{loss:.4f}", "episodes": progress.episodes}
        if not self.args.actors:
            postfix["eps"] = f"{epsilon:.3f}"
        else:  # each actor has its own epsilon; env steps/s is the bar's own rate
            step, updates, clock = self.rate_mark
            now = time.perf_counter()
            postfix["updates/s"] = f"{(self.updates - updates) / (now - clock):.1f}"
            postfix["ratio"] = f"{(self.updates - updates) / (progress.step - step):.3f}"
            self.rate_mark = (progress.step, self.updates, now)
        self.bar.set_postfix(**postfix, **self.status, eval=progress.last_score, refresh=False)
        if self.trackers.active:
            now = self.loop_clock()
            scalars = {"train/epsilon": epsilon, "train/loss": loss, "train/mean_q": mean_q}
            scalars["train/steps_per_second"] = (progress.step - self.log_mark[0]) / (now - self.log_mark[1])
            if self.args.prioritized:
                scalars["train/beta"] = self.beta
            self.trackers.scalars(scalars, progress.step)
            self.log_mark = (progress.step, now)

    def save(self, path: Path, line: str | None) -> None:
        args, progress = self.args, self.progress
        self.read_averages()  # a diverged loss is never saved
        if not self.agent.values_finite():
            if progress.step == 0:  # nothing learnt yet: the settings make the values overflow
                raise TrainingDiverged(
                    "the untrained network's values are not finite",
                    "Its settings overflow float32: try a smaller --noisy-sigma0 or a narrower --v-min/--v-max",
                )
            raise TrainingDiverged(
                f"training diverged: the weights or values are no longer finite at step {progress.step}"
            )
        if args.save_memory:  # under its own name until the checkpoint is written: see settle_memory
            save_memory(self.out, self.memory.state_dict(), progress.step, learning_config(vars(args)))
        progress.wall_seconds = self.wall_seconds()
        save_checkpoint(
            path,
            {
                "config": self.config,
                "run": asdict(progress),
                "agent": self.agent.state_dict(),
                "players": [player.state_dict() for player in self.players] or None,  # Ape-X: actors start new games
                "torch_rng": torch.get_rng_state(),
                "rewards_line": line,
                "versions": self.versions,
            },
        )
        if args.save_memory:
            settle_memory(self.out, progress.step)
        self.saved_step = progress.step
        self.tell("checkpoint", checkpoint=path)

    def save_interrupted(self) -> None:
        if self.in_round:  # a failure inside a round: its games (or its learning) have moved past the step count
            games = self.args.envs
            within = f"a round of {games} games" if games > 1 else "a round whose learning ran ahead of its step"
            print(f"Note: a game failed within {within}; {last_checkpoint(self.out)}", flush=True)
            return
        if self.progress.step > self.saved_step or self.evaluation_stopped:  # else the last checkpoint holds it
            self.save(self.out / INTERRUPTED_CHECKPOINT, None)

    def evaluate_and_save(self) -> None:
        """Evaluate, then write the checkpoint and the rewards.txt line. When a stop cuts the
        evaluation short, neither is written: the checkpoint the stop writes keeps the
        evaluation due, with the games it finished, and a resume goes on from the next game
        first, as the run would have."""
        evaluation_start = time.perf_counter()
        progress = self.progress
        index = progress.evaluations
        progress.evaluation_due = True
        finished = FinishedGames(**progress.evaluation_games) if progress.evaluation_games else None
        episodes = self.args.eval_episodes
        if finished and (  # --eval-episodes lowered on resume
            len(finished.scores) >= episodes or any(number >= episodes for number in finished.numbers or ())
        ):
            print(
                f"Note: the stopped evaluation had finished {len(finished.scores)} games, --eval-episodes is now "
                f"{episodes}: it starts again from its first game",
                flush=True,
            )
            finished = None
        try:
            rule = stack_rule(self.args, self.env)
            result = run_evaluation(
                self.args, self.agent, index, self.out, lambda: self.stop.requested, rule, finished, self.eval_machines
            )
        except EvaluationStopped as stop:
            progress.evaluation_games = stop.finished._asdict()
            self.evaluation_stopped = True
            return
        finally:
            self.evaluation_seconds += time.perf_counter() - evaluation_start
        scores = np.asarray(result.scores)
        if not np.isfinite([scores.mean(), scores.std()]).all():  # finite rewards, too large to add up
            raise EnvironmentFailed(f"evaluation {index}'s scores are too large to add up ({scores.max()})")
        progress.evaluation_due, progress.evaluation_games = False, None
        progress.evaluations += 1
        progress.last_score = float(np.mean(result.scores))
        self.trackers.scalars({"eval/score": progress.last_score}, progress.step)
        if self.args.render:
            self.trackers.video("eval/video", self.out / f"eval_{index:03d}", progress.step)
        line = rewards_line(index, progress.step, result, self.wall_seconds())
        self.save(self.out / f"model_{index:03d}.pt", line)  # the checkpoint first: it carries the line
        append_line(self.out / REWARDS_FILE, line)
        if isinstance(self.memory, PrioritizedReplayMemory):
            self.log_memory_health()
        if self.args.keep_checkpoints:
            prune_checkpoints(self.out, self.args.keep_checkpoints)
        self.tell("evaluation", scores=tuple(map(float, result.scores)))

    def tell(self, kind: str, **details: Any) -> None:
        """Tell the callback (``dqn.train``'s) what happened; where it returns False, stop as at a Ctrl-C."""
        if (
            self.callback is not None
            and self.callback(RunEvent(kind, self.progress.step, self.out, **details)) is False
        ):
            self.stop.requested = True

    def log_memory_health(self) -> None:
        """The prioritized memory checked at an evaluation (memory_health.csv, standard output, TensorBoard), so
        that a sum tree drifting from its leaves or priorities collapsing show within hours of a long run."""
        step = self.progress.step
        beta = linear_schedule(step, self.args.beta0, self.args.beta_end, self.args.steps)  # the next batch's
        health = self.memory.health(beta)
        if health is None:  # nothing played yet
            return
        append_line(self.out / HEALTH_FILE, health_line(step, health))
        print(
            f"Memory health at step {step}: sum tree total {health.total:.6g}, relative error "
            f"{health.relative_error:.1e} against its leaves summed again; priorities {health.min_priority:.3g} to "
            f"{health.max_priority:.3g} over {health.sampleable} slots (a new one gets {health.new_priority:.3g}); "
            f"beta {beta:.3f}; largest importance weight {health.max_weight:.3g}",
            flush=True,
        )
        names = ("relative_error", "min_priority", "max_priority", "max_weight")
        self.trackers.scalars({f"memory/{name}": getattr(health, name) for name in names}, step)

    def restore_memory(self, refill: Callable[[int], None]) -> None:
        """Reload the saved replay memory if it belongs to the checkpoint, else refill it with
        ``learning_starts`` steps of the current policy (not counted as training steps)."""
        args, memory, out = self.args, self.memory, self.out
        settle_memory(out, self.progress.step)  # a crash may have come between a checkpoint and its memory's rename
        if self.progress.step == 0:
            return  # stopped in the untrained network's evaluation: nothing was played into the memory yet
        config = learning_config(vars(args))
        state, reason = load_memory(out / MEMORY_FILE, self.progress.step, config, learning_defaults())
        if state is not None:
            try:
                memory.load_state_dict(state)
            except (ValueError, KeyError, RuntimeError, TypeError, AttributeError) as error:
                reason = f"{out / MEMORY_FILE} cannot be used ({type(error).__name__}: {error})"
            else:
                if len(memory) or all(player.first for player in self.players):  # Ape-X actors start new games
                    return
                reason = f"{out / MEMORY_FILE} is empty, but the checkpoint is in the middle of a game"
        reason = reason or "the replay memory was not saved with the checkpoint (--save-memory saves it)"
        held = min(self.progress.step, args.memory_size)
        print(
            f"Note: {reason}; refilling it with {args.learning_starts:,} steps of the current policy: the run is no "
            f"longer the one it would have been (its memory held up to {held:,} steps)",
            flush=True,
        )
        refill(args.learning_starts)

    def finish(self) -> TrainSummary:
        """Close the loop: a checkpoint when stopped, else a last evaluation; the summary."""
        if self.bar is not None:
            self.bar.close()  # the trackers stay open for the last evaluation
        progress = self.progress
        first_step, first_time = self.learning_mark
        learning_sps = (
            (progress.step - first_step) / (self.loop_clock() - first_time) if progress.step > first_step else math.nan
        )
        if not self.stop.requested and (progress.evaluation_due or progress.step % self.args.eval_every != 0):
            self.evaluate_and_save()  # the final policy always gets a line
        if self.stop.requested:
            self.save_interrupted()
            print(f"Interrupted at step {progress.step}; continue with: python main.py --resume {self.out}", flush=True)
            return TrainSummary(130, progress.step, learning_sps, self.updates)
        # The final checkpoint holds all a stop's checkpoint did: left, it would read as a run still to resume.
        (self.out / INTERRUPTED_CHECKPOINT).unlink(missing_ok=True)
        print(f"Done: {progress.step} steps, last evaluation score {progress.last_score:.1f}", flush=True)
        return TrainSummary(0, progress.step, learning_sps, self.updates)

    def close(self, failed: bool) -> None:
        if self.workers is not None:
            self.workers.close()
        if self.bar is not None:
            self.bar.close()
        self.trackers.close(exit_code=1 if failed else 0)  # a stop to resume later is no failure


def last_checkpoint(out: Path) -> str:
    try:
        path, checkpoint, _ = load_newest_checkpoint(out)
    except CheckpointError:
        return "no checkpoint was written yet"
    return f"the last checkpoint is {path} (step {checkpoint['run']['step']})"


# The flags become the game, the agent and the replay memory here, and only here.


def make_env(args: argparse.Namespace, seed: int, render: bool = False) -> AtariEnv | GymEnv:
    """The game of --env, seeded with ``seed``: an Atari game with the flags' settings, or a
    gymnasium environment as it is made (``render``: it renders rgb_array images, for --render), its
    episodes cut at --max-episode-frames / 4 steps."""
    if is_atari(args.env):
        return AtariEnv(seed=seed, **env_options(args))
    return GymEnv(args.env, seed, render, episode_steps(args.max_episode_frames))


def training_seed(seed: int, game: int) -> int:
    """The seed of training game ``game`` of --envs: --seed itself for the first (one game plays as it always has)."""
    return seed if game == 0 else int(np.random.SeedSequence([seed, game, 2]).generate_state(1)[0])


def env_options(args: argparse.Namespace) -> dict[str, Any]:
    """AtariEnv's keyword arguments but the seed (each game gets its own)."""
    return {
        "env_id": args.env,
        "sticky_actions": args.sticky_actions,
        "max_episode_frames": args.max_episode_frames,
        "noop_max": args.noop_max,
        "noop_unit": args.noop_unit,
        "fire_reset": args.fire_reset,
        "life_loss_terminal": args.life_loss_terminal,
        "full_action_space": args.full_action_space,
    }


def agent_options(args: argparse.Namespace, env: AtariEnv | GymEnv) -> dict[str, Any]:
    """Agent's keyword arguments but the device and the seed; the network's input is ``env``'s states."""
    return {
        "input_shape": input_shape(env),
        "lr": args.lr,
        "adam_eps": args.adam_eps,
        "head": value_head(args),
        "grad_clip": args.grad_clip,
        "double": args.double,
        "dueling": args.dueling,
        "network": args.network,
        "noisy_sigma0": args.noisy_sigma0 if args.noisy else None,
        "separate_target": args.target_every > 1,  # a target updated every step is the online network
        "augment": args.augment,
        "cuda_graphs": args.cuda_graphs,
    }


def build_memory(
    args: argparse.Namespace, device: torch.device, frames_on_device: bool, env: AtariEnv | GymEnv
) -> ReplayMemory:
    """The replay memory of ``env``'s frames (one per step, stacked as ``env``'s states are)."""
    memory_type = PrioritizedReplayMemory if args.prioritized else ReplayMemory
    options = {"alpha": args.alpha, "priority_eps": args.priority_eps} if args.prioritized else {}
    return memory_type(
        args.memory_size,
        stack_depth=env.stack_depth,
        frame_shape=env.frame_shape,
        device=device,
        seed=args.seed,
        n_step=args.n_step,
        gamma=args.gamma,
        streams=args.actors or args.envs,  # one stream per Ape-X actor, or per game of --envs
        stack_rule=stack_rule(args, env),
        frames_on_device=frames_on_device,
        **options,
    )


def stack_rule(args: argparse.Namespace, env: AtariEnv | GymEnv | None = None) -> StackRule:
    """How a frame stack starts: as a gymnasium environment's own stacks do, else as the flags say."""
    if isinstance(env, GymEnv):
        return env.stack_rule
    return StackRule(zero_fill=args.stack_fill == "zeros", per_life=args.stack_per_life)


def exploration(args: argparse.Namespace, step: int) -> float:
    """The training epsilon: --eps-start for --eps-decay-start steps, then linearly to --eps-end
    over --eps-decay-steps; 0 with --noisy, whose networks explore by their noise (Fortunato et al. 2018,
    and Rainbow, Hessel et al. 2018)."""
    if args.noisy:
        return 0.0
    return linear_schedule(max(0, step - args.eps_decay_start), args.eps_start, args.eps_end, args.eps_decay_steps)


def actor_config(args: argparse.Namespace, env: AtariEnv) -> ActorConfig:
    return ActorConfig(
        env=env_options(args),
        agent=agent_options(args, env),
        seed=args.seed,
        n_step=args.n_step,
        gamma=args.gamma,
        chunk_steps=args.chunk_steps,
        weights_every=args.weights_every,
        td_errors=args.prioritized,  # initial priorities
        stack_rule=stack_rule(args, env),
        clip_rewards=args.clip_rewards,
    )


def cli() -> None:
    """``python main.py``, or the ``dqn-train`` command of ``pip install -e .``."""
    sys.stdout = OutputWithoutReader(sys.stdout)
    sys.stderr = OutputWithoutReader(sys.stderr)  # the progress bar's: `2>&1 | tee log` and the tee dies
    try:
        code = main()
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # on the way out: a late second Ctrl-C is no traceback
    except KeyboardInterrupt:  # outside training, e.g. while a checkpoint loads or a game is played back
        print("Stopped.", file=sys.stderr)
        sys.exit(130)
    sys.exit(code)


if __name__ == "__main__":
    cli()
