"""Measure the speed and memory of each part of the training loop on this machine, or how fast
the defaults learn Breakout beside CleanRL's reference.

    python bench.py           # a few minutes: a table
    python bench.py --json    # the same figures as one JSON object
    python bench.py --quick   # under a minute, rougher (used by the tests)
    python bench.py --apex    # Ape-X's parts: actors, learner, object store (needs ray)
    python bench.py --at-once # about 25 minutes: --eval-envs' evaluations and --envs' training loop
    python bench.py --learning --steps 150000 [--prioritized]   # about 25 minutes: learning speed
    python bench.py --gpu --cleanrl DQN_ATARI [--cleanrl-path SITE]  # on a GPU: scripts/gpu_check.sh

A DQN loop on a CPU is bounded by one gradient step every ``train_every`` agent steps plus
one forward pass and one emulator step per agent step. ``bound_uniform_sps`` is that limit, timed
as the loop must do that work: in its order (a sampled batch and a learning step, then
``train_every`` actions, emulator steps and pushes into the memory), without the loop's
bookkeeping; ``bound_prioritized_sps`` the same with the prioritized memory, whose priority
updates are necessary work too. Each loop's ``efficiency`` is its
measured steps/s divided by it: the share of time spent on necessary work rather than
bookkeeping. ``bound_isolated_sps`` adds up the three parts timed each on its own, which misses
what alternating them costs (an action right after a learning step finds the weights out of the
caches). All figures come from the project's own modules.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import unittest.mock
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from dqn_atari import main  # first: it sets OpenMP's spin count, which torch reads when it is imported

# isort: split
import ale_py
import numpy as np
import torch

from dqn_atari import plot
from dqn_atari.utils_config import (
    available_cpus,
    keep_freed_memory,
    parse_config,
    pick_device,
    threads_option,
    use_threads,
)
from dqn_atari.utils_drl import Agent
from dqn_atari.utils_env import AtariEnv, evaluate, game_name, is_atari, resolve_env_id
from dqn_atari.utils_memory import PrioritizedReplayMemory, ReplayMemory, SumTree
from dqn_atari.utils_results import (
    MAIN_JOB,
    SCORE_THRESHOLD,
    SCORE_WINDOW,
    at_once_markdown,
    beside_figure,
    beside_markdown,
    beside_report,
    gpu_tables,
    learning_report,
    learning_table,
    main_job_figure,
    main_job_markdown,
    main_job_report,
    seeds_table,
)
from dqn_atari.utils_run import (
    REWARDS_FILE,
    CheckpointError,
    RunLogError,
    load_checkpoint,
    load_newest_checkpoint,
)
from dqn_atari.utils_types import Batch, EvalResult
from dqn_atari.utils_workers import GameWorkers

CAPACITY = 1_000_000
BATCH = 32


def median_seconds(fn: Callable[[], Any], repeats: int, warmup: int = 3) -> float:
    """The median wall time of ``fn`` with the work it left queued on a GPU done."""
    synchronize = torch.cuda.synchronize if torch.cuda.is_available() else lambda: None
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        synchronize()
        start = time.perf_counter()
        fn()
        synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def random_batch(rng: np.random.Generator, n_actions: int, device: torch.device) -> Batch:
    frames = torch.from_numpy(rng.integers(0, 256, (BATCH, 5, 84, 84), dtype=np.uint8)).to(device)
    return Batch(
        states=frames[:, :-1],
        actions=torch.from_numpy(rng.integers(0, n_actions, BATCH)).to(device),
        returns=torch.from_numpy(rng.integers(-1, 2, BATCH).astype(np.float32)).to(device),
        next_states=frames[:, 1:],
        discounts=torch.full((BATCH,), 0.99, device=device),
        weights=torch.ones(BATCH, device=device),
        indices=np.arange(BATCH),
    )


def bench_network(n_actions: int, device: torch.device, repeats: int) -> dict[str, float]:
    agent = Agent(n_actions, device, cuda_graphs=False)  # the eager step (run_gpu times the graphed one)
    rng = np.random.default_rng(0)
    batch = random_batch(rng, n_actions, device)
    state = rng.integers(0, 256, (4, 84, 84), dtype=np.uint8)
    return {
        "train_step_ms": 1e3 * median_seconds(lambda: agent.learn(batch), repeats),
        "act_ms": 1e3 * median_seconds(lambda: agent.act(state, 0.0), repeats * 10),
    }


def loop_work(
    env_id: str,
    device: torch.device,
    prioritized: bool,
    train_every: int,
    frames_on_device: bool = False,
    seconds: dict[str, float] | None = None,
    cuda_graphs: bool = True,
) -> Callable[[], None]:
    """One cycle of the work a training loop cannot skip, in its order: a batch sampled from the
    replay memory, a learning step on it and the batch's new priorities, then ``train_every``
    greedy actions, emulator steps and pushes into the memory. Each part is labelled for
    torch.profiler; with ``seconds``, each part's wall time is added there, its GPU work included
    (a wait for the GPU after each part, which the loop itself does not have)."""
    env = AtariEnv(env_id, seed=0)
    env.reset()
    agent = Agent(env.n_actions, device, cuda_graphs=cuda_graphs)
    memory_type = PrioritizedReplayMemory if prioritized else ReplayMemory
    memory = memory_type(CAPACITY, device=device, frames_on_device=frames_on_device)
    filled_memory(memory, 4_000)  # the loop benchmark's memory when it ends
    state = memory.sample(1).states[0].cpu().numpy()
    synchronize = torch.cuda.synchronize if device.type == "cuda" else lambda: None

    @contextlib.contextmanager
    def part(name: str) -> Any:
        start = time.perf_counter()
        with torch.profiler.record_function(name):
            yield
        if seconds is not None:
            synchronize()
            seconds[name] = seconds.get(name, 0.0) + time.perf_counter() - start

    def cycle() -> None:
        with part("sample"):
            batch = memory.sample(BATCH, 0.4)
        with part("learn"):
            result = agent.learn(batch)
        with part("priorities"):
            memory.update_priorities(batch.indices, result.priorities)
        for _ in range(train_every):
            with part("act"):
                action = agent.act(state, 0.0)
            with part("env step"):
                result = env.step(action)
            with part("push"):
                memory.push(result.frame, action, result.reward, result.terminated, False)
            if result.terminated or result.truncated:
                env.reset()

    return cycle


def bench_work_in_loop_order(
    env_id: str, device: torch.device, prioritized: bool, train_every: int, repeats: int
) -> float:
    """Milliseconds of one ``loop_work`` cycle."""
    return 1e3 * median_seconds(loop_work(env_id, device, prioritized, train_every), repeats)


def bench_env(env_id: str, steps: int) -> float:
    env = AtariEnv(env_id, seed=0)
    env.reset()
    actions = np.random.default_rng(0).integers(env.n_actions, size=steps)
    times = []
    for action in actions:
        start = time.perf_counter()
        result = env.step(int(action))
        times.append(time.perf_counter() - start)
        if result.terminated or result.truncated:
            env.reset()  # resets are rarer than steps in real play and left out of the median
    return 1e3 * statistics.median(times)


def bench_loop(
    env_id: str,
    prioritized: bool,
    learning_starts: int,
    steps: int,
    train_every: int,
    threads: str | int = "auto",
    extra: tuple[str, ...] | list[str] = (),
) -> main.TrainSummary:
    """The real training loop (main.train, evaluations excluded); its summary's
    ``learning_steps_per_second`` is the loop's steps/s once learning started. ``extra``: more main.py flags."""
    with tempfile.TemporaryDirectory() as folder:
        argv = [
            "--env", game_name(env_id) if is_atari(env_id) else env_id,  # a game as a user names it: no ALE id note
            "--steps", str(learning_starts + steps), "--learning-starts", str(learning_starts),
            "--train-every", str(train_every), "--eval-every", str(10**9), "--eval-episodes", "1",
            "--max-episode-frames", "20000", "--out", str(Path(folder) / "run"), "--threads", str(threads),
            "--eps-start", "0", "--eps-end", "0",  # a forward pass every step, as the limit assumes
        ]  # fmt: skip
        if prioritized:
            argv.append("--prioritized")
        args, _ = parse_config([*argv, *extra])
        errors = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(errors):
            summary = main.train(args, None)
        if summary.exit_code != 0:
            raise RuntimeError(f"the training loop failed: {errors.getvalue().strip().splitlines()[-1:]}")
        return summary


# Games at once. The evaluation: the Atari 100k preset's (100 games, epsilon 0.001, Dopamine's network) on
# AT_ONCE_GAME with an untrained agent, whose games all last about 800 steps (lost 21-0), at each number of
# games at once, in turn, every round; the speed-up is the best number's against one at a time, and every number
# must play the same games. The training loop: --envs 2 against 1 at the default settings, in turn.
AT_ONCE_GAME = "Pong"
AT_ONCE_EVAL_ENVS = (1, 16, 32, 100)
AT_ONCE_TRAIN_ENVS = (1, 2)
AT_ONCE_WORKERS = 2  # evaluation machines in worker processes (--env-workers): this machine's two cores


def bench_at_once(quick: bool) -> dict[str, Any]:
    """Evaluations of --eval-envs games at a time, and the training loop at --envs 1 and 2 (threads: 1, as the
    sweeps run; the evaluation also with 2, and with its game machines in AT_ONCE_WORKERS processes)."""
    games, rounds = (8, 1) if quick else (100, 2)
    lanes = sorted({min(m, games) for m in AT_ONCE_EVAL_ENVS})
    args = parse_config(["--preset", "atari100k", "--env", AT_ONCE_GAME, "--out", "unused", "--threads", "1"])[0]
    threads = use_threads(1)
    env = main.make_env(args, 0)
    agent = Agent(env.n_actions, "cpu", seed=0, **main.agent_options(args, env))
    rule = main.stack_rule(args, env)

    def evaluation(at_once: int, workers: int = 0) -> tuple[float, list[float]]:
        """Seconds and scores; with ``workers``, the machines in that many processes, started before the clock."""
        processes = GameWorkers(functools.partial(main.make_env, args), [], workers) if workers else None
        try:
            machines = main.evaluation_machines(
                argparse.Namespace(**{**vars(args), "eval_envs": at_once, "eval_episodes": games}), processes
            )
            start = time.perf_counter()
            with contextlib.redirect_stderr(io.StringIO()):
                games_played = main.seeded_games(args, [0], False, machines)
                result = evaluate(
                    agent.act_evaluating, games_played, games, args.eval_epsilon, at_once, stack_rule=rule
                )
            return time.perf_counter() - start, result.scores
        finally:
            if processes is not None:
                processes.close()

    seconds: dict[int, list[float]] = {m: [] for m in lanes}
    scores: dict[int, list[float]] = {}
    for _ in range(rounds):
        for at_once in lanes:
            took, scores[at_once] = evaluation(at_once)
            seconds[at_once].append(took)
    best = min(lanes[1:], key=lambda m: statistics.mean(seconds[m]))
    use_threads(2)
    both_cores, _ = evaluation(best)
    use_threads(threads)
    in_workers, scores_in_workers = evaluation(best, AT_ONCE_WORKERS)
    steps, learning_starts = (1000, 500) if quick else (4000, 2000)
    loop: dict[int, list[float]] = {n: [] for n in AT_ONCE_TRAIN_ENVS}
    for _ in range(rounds):
        for envs in AT_ONCE_TRAIN_ENVS:
            summary = bench_loop(env_id="Breakout", prioritized=False, learning_starts=learning_starts,
                                 steps=steps, train_every=4, threads=1, extra=["--envs", str(envs)])  # fmt: skip
            loop[envs].append(summary.learning_steps_per_second)
    return {
        "eval_game": AT_ONCE_GAME,
        "eval_games": games,
        "eval_seconds": {str(m): took for m, took in seconds.items()},
        "eval_best_envs": best,
        "eval_speedup": statistics.mean(seconds[1]) / statistics.mean(seconds[best]),
        "eval_speedup_rounds": [one / many for one, many in zip(seconds[1], seconds[best], strict=True)],
        "eval_both_cores_speedup": statistics.mean(seconds[1]) / both_cores,
        "eval_workers": AT_ONCE_WORKERS,
        "eval_workers_speedup": statistics.mean(seconds[1]) / in_workers,
        "eval_workers_games_differing": sum(a != b for a, b in zip(scores_in_workers, scores[1], strict=True)),
        "eval_games_differing": {str(m): sum(a != b for a, b in zip(scores[m], scores[1], strict=True)) for m in lanes},
        "eval_mean_score": statistics.mean(scores[1]),
        "loop_sps": {str(n): sps for n, sps in loop.items()},
        "loop_ratio": statistics.mean(loop[2]) / statistics.mean(loop[1]),
        "loop_ratio_rounds": [two / one for one, two in zip(loop[1], loop[2], strict=True)],
        "rounds": rounds,
        "cpu": platform.processor() or platform.machine(),
        "cpus": available_cpus(),
        "torch": torch.__version__,
        "ale_py": ale_py.__version__,
        "quick": quick,
    }


def filled_memory(memory: ReplayMemory, steps: int) -> ReplayMemory:
    frame = np.random.default_rng(0).integers(0, 256, (84, 84), dtype=np.uint8)
    for step in range(steps):
        memory.push(frame, step % 4, 0.0, step % 500 == 499, step % 500 == 0)
    return memory


def bench_memories(fill: int, repeats: int) -> dict[str, float]:
    rng = np.random.default_rng(0)
    frame = rng.integers(0, 256, (84, 84), dtype=np.uint8)
    uniform = filled_memory(ReplayMemory(CAPACITY), fill)
    three_step = filled_memory(ReplayMemory(CAPACITY, n_step=3), fill)
    prioritized = filled_memory(PrioritizedReplayMemory(CAPACITY), fill)
    sampled = prioritized.sample(BATCH).indices
    td_errors = rng.random(BATCH).astype(np.float32)

    tree = SumTree(CAPACITY)
    tree.leaves[:] = rng.random(CAPACITY)
    tree.rebuild()
    push_slots = [rng.integers(0, CAPACITY, 5) for _ in range(4)]
    push_values = rng.random(5)
    batch_values = rng.random(BATCH)

    def priority_cycle() -> None:
        for slots in push_slots:  # a push refreshes 5 leaves
            tree.update(slots, push_values)
        tree.update(tree.sample(BATCH, rng), batch_values)

    return {
        "memory_push_us": 1e6 * median_seconds(lambda: uniform.push(frame, 1, 0.0, False, False), repeats * 10),
        "memory_push_prioritized_us": 1e6
        * median_seconds(lambda: prioritized.push(frame, 1, 0.0, False, False), repeats * 10),
        "memory_sample_us": 1e6 * median_seconds(lambda: uniform.sample(BATCH), repeats * 10),
        "memory_sample_3step_us": 1e6 * median_seconds(lambda: three_step.sample(BATCH), repeats * 10),
        "memory_sample_prioritized_us": 1e6 * median_seconds(lambda: prioritized.sample(BATCH, 0.5), repeats * 10),
        "priority_update_us": 1e6
        * median_seconds(lambda: prioritized.update_priorities(sampled, td_errors), repeats * 10),
        "priority_cycle_us": 1e6 * median_seconds(priority_cycle, repeats * 10),
        "bytes_per_transition_uniform": ReplayMemory(CAPACITY).nbytes / CAPACITY,
        "bytes_per_transition_prioritized": PrioritizedReplayMemory(CAPACITY).nbytes / CAPACITY,
    }


def loop_process(env_id: str, steps: tuple[int, int], train_every: int, threads: int) -> subprocess.Popen:
    """``bench_loop`` in a process of its own, as a separate training run would be; it prints its steps/s."""
    learning_starts, loop_steps = steps
    argv = ["--loop", "--env", env_id, "--train-every", str(train_every), "--threads", str(threads)]
    argv += ["--loop-steps", str(learning_starts), str(loop_steps)]
    return subprocess.Popen([sys.executable, __file__, *argv], stdout=subprocess.PIPE, text=True)


def loop_result(process: subprocess.Popen) -> float:
    stdout, _ = process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"a benchmark loop process failed with exit status {process.returncode}")
    return float(stdout.strip().splitlines()[-1])


def bench_shared(env_id: str, quick: bool, train_every: int, threads: str | int = "auto") -> dict[str, float]:
    """The uniform loop's steps/s alone, beside a single-threaded busy loop, and the total of two
    loops at once with half the threads each; every loop runs in a fresh process."""
    steps = (100, 100) if quick else (1000, 3000)
    cpus = available_cpus() if threads == "auto" else int(threads)
    figures = {"sps_alone": loop_result(loop_process(env_id, steps, train_every, cpus))}
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        figures["sps_beside_busy_core"] = loop_result(loop_process(env_id, steps, train_every, cpus))
    finally:
        busy.kill()
        busy.wait()
    pair = [loop_process(env_id, steps, train_every, max(1, cpus // 2)) for _ in range(2)]
    figures["sps_two_runs_total"] = sum(loop_result(process) for process in pair)
    figures["busy_core_over_alone"] = figures["sps_beside_busy_core"] / figures["sps_alone"]
    figures["two_runs_over_alone"] = figures["sps_two_runs_total"] / figures["sps_alone"]
    return figures


def bench_apex(env_id: str, quick: bool) -> dict[str, Any]:
    """Ape-X's parts on this machine: steps/s that 1 and 2 actors deliver with nothing else
    running (the learner only takes their chunks), an actor's cost of computing TD errors, the
    learner's updates/s alone, one chunk's bytes and object-store round trip, and whole Ape-X
    runs (2 actors and the learner, fixed and free replay ratio)."""
    import ray

    from dqn_atari.utils_apex import ActorConfig, ActorPool, Chunk, export_weights, start_ray

    started = start_ray(None, max(2, available_cpus()))
    figures: dict[str, Any] = {}
    seconds = 5.0 if quick else 20.0
    try:
        for actors, td_errors in ((1, False), (2, False), (1, True)):
            config = ActorConfig({"env_id": env_id}, {}, 0, 1, 0.99, 50, 100, td_errors)
            pool = ActorPool(config, actors, timeout=120.0, report=print)
            pool.publish(export_weights(Agent(AtariEnv(env_id, 0).n_actions).online, 0))
            chunk = None
            while chunk is None:  # the actors' start-up is not part of their speed
                chunk = pool.next_chunk(wait=True)
            steps, start = 0, time.perf_counter()
            while time.perf_counter() - start < seconds:
                chunk = pool.next_chunk(wait=True)
                steps += len(chunk) if chunk else 0
            name = f"actor_sps_{actors}" + ("_td_errors" if td_errors else "")
            figures[name] = steps / (time.perf_counter() - start)
            pool.close(shutdown=False)
        chunk = Chunk(
            0, 0, 0, 0.4, np.zeros((50, 84, 84), np.uint8), np.zeros(50, np.uint8), np.zeros(50, np.float32),
            np.zeros(50, bool), np.zeros(50, bool), np.zeros(50, np.float32),
        )  # fmt: skip
        figures["chunk_bytes"] = len(ray.cloudpickle.dumps(chunk))
        figures["chunk_transfer_us_per_step"] = 1e6 * median_seconds(lambda: ray.get(ray.put(chunk)), 50) / 50
    finally:
        if started:
            ray.shutdown()
    learning_starts, steps = (200, 1000) if quick else (1000, 4000)
    for ratio in ("fixed", "free"):
        summary = bench_loop(env_id, False, learning_starts, steps, 4, extra=["--actors", "2", "--replay-ratio", ratio])
        figures[f"apex_sps_2_actors_{ratio}"] = summary.learning_steps_per_second
        figures[f"apex_replay_ratio_{ratio}"] = summary.updates / steps
    memory = filled_memory(ReplayMemory(CAPACITY), 20_000)
    agent = Agent(AtariEnv(env_id, 0).n_actions, pick_device("auto"))
    figures["learner_updates_per_second"] = 1 / median_seconds(lambda: agent.learn(memory.sample(BATCH)), 20)
    return figures


def run(env: str, quick: bool, train_every: int, threads: str | int = "auto") -> dict[str, Any]:
    env_id = resolve_env_id(env)
    device = pick_device("auto")
    learning_starts, loop_steps = (100, 100) if quick else (1000, 3000)
    figures: dict[str, Any] = {}
    figures.update(bench_network(AtariEnv(env_id, 0).n_actions, device, repeats=10 if quick else 50))
    figures["env_step_ms"] = bench_env(env_id, 300 if quick else 3000)
    figures["bound_isolated_sps"] = 1e3 / (
        figures["train_step_ms"] / train_every + figures["act_ms"] + figures["env_step_ms"]
    )
    # Alternate the limits and the loops over rounds so that drifts of a noisy machine hit all alike.
    rounds: dict[str, list[float]] = {}
    for _ in range(1 if quick else 3):
        for name in ("uniform", "prioritized"):
            work = bench_work_in_loop_order(env_id, device, name == "prioritized", train_every, 20 if quick else 100)
            rounds.setdefault(f"work_in_loop_order_{name}_ms", []).append(work)
            loop = bench_loop(
                env_id, name == "prioritized", learning_starts, loop_steps, train_every, threads
            ).learning_steps_per_second
            rounds.setdefault(name, []).append(loop)
    for name in ("uniform", "prioritized"):
        figures[f"work_in_loop_order_{name}_ms"] = statistics.mean(rounds[f"work_in_loop_order_{name}_ms"])
        figures[f"bound_{name}_sps"] = 1e3 * train_every / figures[f"work_in_loop_order_{name}_ms"]
        figures[f"sps_{name}"] = statistics.mean(rounds[name])
        figures[f"efficiency_{name}"] = figures[f"sps_{name}"] / figures[f"bound_{name}_sps"]
    figures["sps_rounds"] = rounds
    figures["prioritized_over_uniform"] = figures["sps_prioritized"] / figures["sps_uniform"]
    figures.update(bench_memories(fill=2_000 if quick else 20_000, repeats=20 if quick else 100))
    figures.update(bench_shared(env_id, quick, train_every, threads))
    figures["settings"] = {
        "game": env_id,
        "loop_steps": loop_steps,
        "learning_starts": learning_starts,
        "train_every": train_every,
        "batch_size": BATCH,
        "memory_capacity": CAPACITY,
        "device": str(device),
        "torch_threads": torch.get_num_threads(),
        "available_cpus": available_cpus(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "(not set)"),
        "quick": quick,
        "torch": torch.__version__,
        "ale_py": ale_py.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "cpu": platform.processor() or platform.machine(),
    }
    return figures


SHARED_ROWS = [
    ("sps_alone", "uniform loop alone, own process (steps/s)", ".1f"),
    ("sps_beside_busy_core", "the same beside a busy single-threaded process", ".1f"),
    ("sps_two_runs_total", "two loops at once, half the threads each: total", ".1f"),
    ("busy_core_over_alone", "beside a busy core / alone (target 0.5)", ".3f"),
    ("two_runs_over_alone", "two runs' total / alone (target 0.9)", ".3f"),
]
ROWS = [
    ("train_step_ms", "one learning step, batch 32 (ms)", ".2f"),
    ("act_ms", "one greedy action, batch 1 (ms)", ".3f"),
    ("env_step_ms", "one preprocessed env step (ms)", ".3f"),
    ("bound_isolated_sps", "loop limit from the three above (steps/s)", ".1f"),
    ("work_in_loop_order_uniform_ms", "sample + learn, then 4 (act, env step, push), in order, uniform (ms)", ".2f"),
    ("work_in_loop_order_prioritized_ms", "the same with the prioritized memory (ms)", ".2f"),
    ("bound_uniform_sps", "uniform loop limit from that (steps/s)", ".1f"),
    ("bound_prioritized_sps", "prioritized loop limit from that (steps/s)", ".1f"),
    ("sps_uniform", "training loop, uniform replay (steps/s)", ".1f"),
    ("sps_prioritized", "training loop, prioritized replay (steps/s)", ".1f"),
    ("efficiency_uniform", "uniform loop / its limit", ".3f"),
    ("efficiency_prioritized", "prioritized loop / its limit", ".3f"),
    ("prioritized_over_uniform", "prioritized / uniform steps/s", ".3f"),
    ("bytes_per_transition_uniform", "uniform memory, bytes per transition", ".1f"),
    ("bytes_per_transition_prioritized", "prioritized memory, bytes per transition", ".1f"),
    ("memory_push_us", "push one step, uniform (µs)", ".1f"),
    ("memory_push_prioritized_us", "push one step, prioritized (µs)", ".1f"),
    ("memory_sample_us", "sample batch 32, uniform (µs)", ".1f"),
    ("memory_sample_prioritized_us", "sample batch 32, prioritized (µs)", ".1f"),
    ("memory_sample_3step_us", "sample batch 32, uniform, --n-step 3 (µs)", ".1f"),
    ("priority_update_us", "update 32 priorities, memory (µs)", ".1f"),
    ("priority_cycle_us", "priority cycle: 4 adds + sample + update (µs)", ".1f"),
    *SHARED_ROWS,
]


APEX_ROWS = [
    ("actor_sps_1", "1 actor alone, steps/s delivered", ".1f"),
    ("actor_sps_2", "2 actors alone, steps/s delivered", ".1f"),
    ("actor_sps_1_td_errors", "1 actor computing TD errors (--prioritized)", ".1f"),
    ("learner_updates_per_second", "learner alone: sample + learn, batch 32 (updates/s)", ".1f"),
    ("chunk_bytes", "one chunk of 50 steps (bytes)", ".0f"),
    ("chunk_transfer_us_per_step", "object store put + get, per step (µs)", ".1f"),
    ("apex_sps_2_actors_fixed", "Ape-X, 2 actors + learner, --replay-ratio fixed (steps/s)", ".1f"),
    ("apex_replay_ratio_fixed", "its gradient steps per environment step (1 / --train-every)", ".3f"),
    ("apex_sps_2_actors_free", "Ape-X, 2 actors + learner, --replay-ratio free (steps/s)", ".1f"),
    ("apex_replay_ratio_free", "its gradient steps per environment step", ".3f"),
]


def table(figures: dict[str, Any], rows: list[tuple[str, str, str]] = ROWS) -> str:
    width = max(len(label) for _, label, _ in rows)
    lines = [f"{label:<{width}}  {figures[key]:>10{fmt}}" for key, label, fmt in rows if key in figures]
    if "settings" not in figures:
        return "\n".join(lines)
    settings = figures["settings"]
    lines.append(
        f"({settings['game']}, loops: mean of {len(figures['sps_rounds']['uniform'])} runs of "
        f"{settings['loop_steps']} steps after {settings['learning_starts']}, "
        f"train every {settings['train_every']}, {settings['device']}, {settings['torch_threads']} torch threads, "
        f"torch {settings['torch']}, ale-py {settings['ale_py']}; memories at capacity {CAPACITY:,})"
    )
    return "\n".join(lines)


# The GPU check (scripts/gpu_check.sh): our loop beside CleanRL's dqn_atari.py on the same GPU, the
# same game and CleanRL's default hyperparameters (a memory of 1M steps, batch 32, learning every 4
# steps, a target sync every 1,000, Adam at 1e-4), its exploration (epsilon from 1 to 0.01 over the
# first tenth of the steps), only shorter: SIDE_STEPS steps, learning from SIDE_LEARNING_STARTS. Each
# loop's steps/s is taken from SIDE_LEARNING_STARTS to the end, our evaluations left out.
SIDE_STEPS, SIDE_LEARNING_STARTS, SIDE_MEMORY = 12_000, 4_000, 1_000_000
GPU_PARTS = ("side", "atari100k", "envs", "evaluation", "cleanrl")
# The games-at-once part: our default loop (Breakout, CleanRL's settings as the side-by-side part) at these --envs,
# --env-workers, --threads and --learn-while-playing, in turn, GPU_ENVS_ROUNDS rounds of GPU_ENVS_STEPS steps once
# learning (issue 48 asks for 5 of at least 20,000; multiples of 128 games); on a 16-core GPU host the workers share
# the cores the emulators need, and 15 leave this process one. The fastest of runs 6 and 7 of docs/gpu.md (each
# setting once), it learning while its games play (--learn-while-playing: run 7's round of 64 games spent 11.4 ms
# playing and 17.0 learning, one after the other), and that with one torch thread (faster without it in run 7's one
# round).
GPU_ENVS = ((1, 0, "auto", False), (128, 15, "auto", False), (128, 15, "auto", True), (128, 15, 1, True))
GPU_ENVS_ROUNDS, GPU_ENVS_STEPS, GPU_ENVS_LEARNING_STARTS = 5, 20_480, 4_096
PROFILED_ENVS = (128, 15)  # the setting whose round round_parts takes apart, after the rounds
# The CleanRL part: CleanRL's dqn_atari.py as it runs by default (--torch-deterministic: cuDNN's deterministic
# algorithms) and without it (--no-torch-deterministic), alternating with our default loop at one game, at the
# side-by-side settings, GPU_CLEANRL_ROUNDS rounds (issue 48 asks for 5 of each; about two minutes a round on run 8's
# H200, so --cleanrl-rounds takes fewer where a call has less time). The envs part's rounds of one game
# tie these to its rounds of many, where both ran on one warm machine.
GPU_CLEANRL_ROUNDS = 5
CLEANRL_VARIANTS = (("CleanRL", []), ("CleanRL, --no-torch-deterministic", ["--no-torch-deterministic"]))
# The evaluation part: a trained agent's evaluation as a Nature run makes 40 of over 10M steps (10 games, all at once,
# epsilon 0.05), its machines in this process and in EVAL_WORKERS worker processes, timed.
EVAL_WORKERS = 10


def side_flags(steps: int, memory_size: int) -> list[str]:
    """Our main.py flags for the side-by-side settings (with bench_loop's, which sets the steps)."""
    return [
        "--memory-size", str(memory_size), "--batch-size", "32", "--train-every", "4", "--target-every", "1000",
        "--lr", "1e-4", "--eps-start", "1", "--eps-end", "0.01", "--eps-decay-steps", str(steps // 10),
    ]  # fmt: skip


def cleanrl_flags(steps: int, learning_starts: int, memory_size: int) -> list[str]:
    """CleanRL's dqn_atari.py flags for the same settings."""
    return [
        "--env-id", "BreakoutNoFrameskip-v4", "--total-timesteps", str(steps), "--learning-starts", str(learning_starts),
        "--buffer-size", str(memory_size), "--batch-size", "32", "--train-frequency", "4",
        "--target-network-frequency", "1000", "--learning-rate", "1e-4", "--start-e", "1", "--end-e", "0.01",
        "--exploration-fraction", "0.1",
    ]  # fmt: skip


def cleanrl_sps(
    script: Path, site: str | None, steps: int, learning_starts: int, memory_size: int, extra: Sequence[str] = ()
) -> float:
    """Steps/s of CleanRL's dqn_atari.py (``script``, run with ``site`` first on its path, ``extra`` flags after
    the settings') from its first learning step to its last: it prints ``SPS: global_step / seconds since its
    start`` every 100 steps once learning (from step learning_starts + 100), so each line dates its step."""
    environment = {**os.environ, **({"PYTHONPATH": site} if site else {})}
    with tempfile.TemporaryDirectory() as folder:  # it writes runs/<name>/ where it runs
        command = [sys.executable, str(script.resolve()), *cleanrl_flags(steps, learning_starts, memory_size), *extra]
        done = subprocess.run(command, cwd=folder, env=environment, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"CleanRL's {script.name} failed: {done.stderr.strip().splitlines()[-3:]}")
    rates = [int(line.split()[1]) for line in done.stdout.splitlines() if line.startswith("SPS:")]
    if len(rates) < 2:
        raise RuntimeError(f"CleanRL's {script.name} printed {len(rates)} SPS lines; too few to time its learning")
    first, last = learning_starts + 100, learning_starts + 100 * len(rates)
    return (last - first) / (last / rates[-1] - first / rates[0])


def profile_phases(
    env_id: str, device: torch.device, prioritized: bool, cycles: int, cuda_graphs: bool
) -> dict[str, Any]:
    """Where an agent step's time goes, over ``cycles`` of ``loop_work`` (frames on the device): the
    wall milliseconds per agent step of each part, and torch.profiler's table of the operations with
    the most device time (a second pass, without the waits)."""
    seconds: dict[str, float] = {}
    cycle = loop_work(env_id, device, prioritized, 4, True, seconds, cuda_graphs)
    for _ in range(5):
        cycle()
    seconds.clear()
    for _ in range(cycles):
        cycle()
    per_step = {part: 1e3 * total / (4 * cycles) for part, total in seconds.items()}
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    cycle = loop_work(env_id, device, prioritized, 4, True, None, cuda_graphs)
    with torch.profiler.profile(activities=activities) as profiler:
        for _ in range(cycles):
            cycle()
    sort_by = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    return {"ms_per_step": per_step, "table": profiler.key_averages().table(sort_by=sort_by, row_limit=15)}


def run_gpu(cleanrl: Path | None, site: str | None, quick: bool) -> dict[str, Any]:
    """The device figures of the GPU table (docs/results.md): the learning step (eager and graphed), where
    a step's time goes, our loop's steps/s with uniform and prioritized replay, frames on the device
    and in host RAM, beside CleanRL's (alternating ours and theirs), and the GPU memory of 1M steps."""
    device = pick_device("auto")
    env_id = resolve_env_id("Breakout")
    n_actions = AtariEnv(env_id, 0).n_actions
    steps, learning_starts, memory_size = (
        (1_500, 500, 20_000) if quick else (SIDE_STEPS, SIDE_LEARNING_STARTS, SIDE_MEMORY)
    )
    flags = side_flags(steps, memory_size)
    figures: dict[str, Any] = bench_network(n_actions, device, repeats=10 if quick else 200)
    graphs = device.type == "cuda"
    if graphs:
        graphed = Agent(n_actions, device, cuda_graphs=True)
        rng = np.random.default_rng(0)
        batch, state = random_batch(rng, n_actions, device), rng.integers(0, 256, (4, 84, 84), dtype=np.uint8)
        figures["train_step_graphed_ms"] = 1e3 * median_seconds(functools.partial(graphed.learn, batch), 200, 10)
        figures["act_graphed_ms"] = 1e3 * median_seconds(functools.partial(graphed.act, state, 0.0), 2000, 10)
    # The emulator step's frame resize is torch's one CPU operation in a GPU run: with one thread
    # and with all the CPUs (the default of --threads auto).
    for name, threads in (("env_step_ms_one_thread", 1), ("env_step_ms_all_threads", available_cpus())):
        torch.set_num_threads(threads)
        figures[name] = bench_env(env_id, 300 if quick else 3000)
    for prioritized, key in ((False, ""), (True, "_prioritized")):
        profile = profile_phases(env_id, device, prioritized, 10 if quick else 100, graphs)
        figures[f"ms_per_step{key}"] = profile["ms_per_step"]
        figures[f"profile_table{key}"] = profile["table"]

    def ours(prioritized: bool, memory_device: str, cuda_graphs: bool, threads: str | int = "auto") -> float:
        extra = [*flags, "--memory-device", memory_device, "--cuda-graphs" if cuda_graphs else "--no-cuda-graphs"]
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        summary = bench_loop(env_id, prioritized, learning_starts, steps - learning_starts, 4, threads, extra)
        if device.type == "cuda" and memory_device == "device" and not prioritized:
            figures["gpu_memory_peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
        return summary.learning_steps_per_second

    # The default loop (frames on the device, the learning step a CUDA graph where there is one),
    # CleanRL's, the prioritized loop and the default loop with one torch thread alternate, so that a
    # drift of the machine (a quarter between two rounds of one loop on the H100) hits them alike;
    # then the other variants once each.
    rounds: dict[str, list[float]] = {}
    for _ in range(2):
        rounds.setdefault("uniform_device", []).append(ours(False, "device", graphs))
        if cleanrl is not None and "cleanrl_error" not in figures:
            try:
                sps = cleanrl_sps(cleanrl, site, steps, learning_starts, memory_size)
            except RuntimeError as error:  # our figures still count
                figures["cleanrl_error"] = str(error)
            else:
                rounds.setdefault("cleanrl", []).append(sps)
        rounds.setdefault("prioritized_device", []).append(ours(True, "device", graphs))
        rounds.setdefault("uniform_device_one_thread", []).append(ours(False, "device", graphs, 1))
    variants = [("uniform_host", False, "host", graphs)]
    if graphs:
        variants.append(("uniform_device_no_graphs", False, "device", False))
    for name, prioritized, memory_device, cuda_graphs in variants:
        rounds[name] = [ours(prioritized, memory_device, cuda_graphs)]
    figures["sps_rounds"] = rounds
    for name, values in rounds.items():
        figures[f"sps_{name}"] = statistics.mean(values)
    if rounds.get("cleanrl"):
        figures["ours_over_cleanrl"] = figures["sps_uniform_device"] / figures["sps_cleanrl"]
    figures["device_over_host_memory"] = figures["sps_uniform_device"] / figures["sps_uniform_host"]
    figures["prioritized_over_uniform"] = figures["sps_prioritized_device"] / figures["sps_uniform_device"]
    figures["one_thread_over_all"] = figures["sps_uniform_device_one_thread"] / figures["sps_uniform_device"]
    if graphs:
        figures["graphs_over_no_graphs"] = figures["sps_uniform_device"] / figures["sps_uniform_device_no_graphs"]
    figures["hours_per_10m_steps"] = 10_000_000 / figures["sps_uniform_device"] / 3600
    figures["settings"] = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else str(device),
        "game": env_id,
        "steps": steps,
        "learning_starts": learning_starts,
        "flags": flags,
        "cleanrl_flags": cleanrl_flags(steps, learning_starts, memory_size) if cleanrl is not None else None,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "ale_py": ale_py.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "cpus": available_cpus(),
        "quick": quick,
        "cuda_graphs": graphs,
    }
    return figures


# The Atari 100k preset on a GPU (the check's second part): its learning step (Dopamine's network,
# double, dueling, the augmentation, the target the online network) eager and as a CUDA graph, and our
# loop with the preset's settings on Pong, graphed and eager alternating, ATARI100K_BENCH_STEPS learning
# steps (one per agent step) after the preset's 1,600 steps of random play.
ATARI100K_BENCH_STEPS = 8_000


def round_parts(
    envs: int, workers: int, steps: int, learning_starts: int, memory_size: int = SIDE_MEMORY
) -> dict[str, float]:
    """Where a round of ``envs`` games goes in the default loop (the side-by-side settings, frames on the device),
    from the loop's own calls timed where they run, from the first learning step on: the batched action (on a GPU
    it waits there for the learning steps queued before it), the round's play (the games' steps, in ``workers``
    processes or here, and their pushes), the learning steps (each batch drawn and its step queued) and the rest;
    milliseconds per round."""
    seconds = dict.fromkeys(("action", "play", "learning"), 0.0)
    learning_began: list[float] = []
    last_call_ended = [0.0]  # the loop's end, before the run's final evaluation and checkpoint

    def timed(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def run(*args: Any, **kwargs: Any) -> Any:
            if name == "learning" and not learning_began:  # from here on: the loop as it runs once learning
                seconds.update(dict.fromkeys(seconds, 0.0))
                learning_began.append(time.perf_counter())
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                last_call_ended[0] = time.perf_counter()
                seconds[name] += last_call_ended[0] - start

        return run

    flags = ["--envs", str(envs), "--env-workers", str(workers), *side_flags(steps, memory_size)]
    with (
        unittest.mock.patch.object(Agent, "act_all", timed("action", Agent.act_all)),
        unittest.mock.patch.object(main, "play_round", timed("play", main.play_round)),
        unittest.mock.patch.object(main.Trainer, "learn", timed("learning", main.Trainer.learn)),
    ):
        bench_loop("Breakout", False, learning_starts, steps, 4, "auto", flags)
    rounds = steps // envs
    parts = {name: 1e3 * value / rounds for name, value in seconds.items()}
    parts["rest"] = 1e3 * (last_call_ended[0] - learning_began[0]) / rounds - sum(parts.values())
    return parts


def run_gpu_envs(quick: bool) -> dict[str, Any]:
    """The games-at-once figures of the GPU check: the default loop's steps/s once learning runs at each
    (--envs, --env-workers, --threads, --learn-while-playing) of GPU_ENVS, in turn, GPU_ENVS_ROUNDS rounds, and the
    hours 10M steps would take at the fastest (evaluations aside: see run_gpu_evaluation)."""
    device = pick_device("auto")
    steps, learning_starts = (1024, 512) if quick else (GPU_ENVS_STEPS, GPU_ENVS_LEARNING_STARTS)
    memory_size = 100_000 if quick else SIDE_MEMORY
    rounds: dict[str, list[float]] = {}
    for _ in range(1 if quick else GPU_ENVS_ROUNDS):
        for envs, workers, threads, ahead in GPU_ENVS:
            flags = ["--envs", str(envs), "--env-workers", str(workers), *side_flags(steps, memory_size)]
            flags += ["--learn-while-playing"] if ahead else []
            summary = bench_loop("Breakout", False, learning_starts, steps, 4, threads, flags)
            name = f"{envs} games, {workers} workers" + (f", {threads} thread" if threads == 1 else "")
            name += ", learning while playing" if ahead else ""
            rounds.setdefault(name, []).append(summary.learning_steps_per_second)
            # Each figure as it comes, into the check's log: a call that ends first keeps the ones it has.
            print(f"{name}: {summary.learning_steps_per_second:.1f} steps/s", file=sys.stderr)
    means = {name: statistics.mean(values) for name, values in rounds.items()}
    fastest = max(means, key=means.__getitem__)
    envs, workers = PROFILED_ENVS
    parts = round_parts(envs, workers, steps, learning_starts, memory_size)
    print(f"a round of {envs} games over {workers} workers, ms: {parts}", file=sys.stderr)
    return {
        "round_parts_ms": {"envs": envs, "workers": workers, **parts},
        "sps_rounds": rounds,
        "sps": means,
        "fastest": fastest,
        "hours_per_10m_steps": 10_000_000 / means[fastest] / 3600,
        "settings": part_settings(device, steps, learning_starts, quick),
    }


def run_gpu_cleanrl(cleanrl: Path, site: str | None, quick: bool, rounds: int = GPU_CLEANRL_ROUNDS) -> dict[str, Any]:
    """CleanRL's loop with and without --torch-deterministic, alternating with our default loop at one game (frames
    on the device, graphs where there are), ``rounds`` rounds (quick: 1) at the side-by-side settings: steps/s from the
    first learning step on, and ours over each of CleanRL's (each round's and the means')."""
    device = pick_device("auto")
    steps, learning_starts, memory_size = (
        (1_500, 500, 20_000) if quick else (SIDE_STEPS, SIDE_LEARNING_STARTS, SIDE_MEMORY)
    )
    flags = side_flags(steps, memory_size)
    sps_rounds: dict[str, list[float]] = {}
    for _ in range(1 if quick else rounds):
        summary = bench_loop("Breakout", False, learning_starts, steps - learning_starts, 4, "auto", flags)
        figures = {"ours, 1 game": summary.learning_steps_per_second}
        for name, extra in CLEANRL_VARIANTS:
            figures[name] = cleanrl_sps(cleanrl, site, steps, learning_starts, memory_size, extra)
        for name, sps in figures.items():
            sps_rounds.setdefault(name, []).append(sps)
            print(f"{name}: {sps:.1f} steps/s", file=sys.stderr)  # into the check's log as it comes
    ours = sps_rounds["ours, 1 game"]
    return {
        "sps_rounds": sps_rounds,
        "sps": {name: statistics.mean(values) for name, values in sps_rounds.items()},
        "ours_over": {name: statistics.mean(ours) / statistics.mean(sps_rounds[name]) for name, _ in CLEANRL_VARIANTS},
        "ours_over_rounds": {
            name: [a / b for a, b in zip(ours, sps_rounds[name], strict=True)] for name, _ in CLEANRL_VARIANTS
        },
        "settings": part_settings(
            device,
            steps,
            learning_starts,
            quick,
            flags=flags,
            cleanrl_flags=cleanrl_flags(steps, learning_starts, memory_size),
        ),
    }


def part_settings(device: torch.device, steps: int, learning_starts: int, quick: bool, **more: Any) -> dict[str, Any]:
    """What a GPU part's figures were made with: the device's name, the steps (``more`` after them), this host's
    CPUs, torch's version, and whether the run was a quick one."""
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else str(device)
    return {"device": name, "steps": steps, "learning_starts": learning_starts, **more, "cpus": available_cpus(),
            "torch": torch.__version__, "quick": quick}  # fmt: skip


def run_gpu_evaluation(agent_file: Path, quick: bool) -> dict[str, Any]:
    """The evaluation figures of the GPU check: ``main.py --evaluate`` of a trained agent (a released agent's file,
    ``dqn.TrainedAgent.save``), 10 games at once (quick: 2), their machines here and then in EVAL_WORKERS workers:
    each one's seconds, steps and scores, and 40 such evaluations' hours, what a 10M-step Nature run adds."""
    played: list[EvalResult] = []
    real = main.evaluate

    def kept(*args: Any, **kwargs: Any) -> EvalResult:
        played.append(real(*args, **kwargs))
        return played[-1]

    games = 2 if quick else 10
    figures: dict[str, Any] = {}
    for workers in (0, EVAL_WORKERS):
        argv = ["--evaluate", str(agent_file), "--eval-episodes", str(games), "--env-workers", str(workers)]
        with unittest.mock.patch.object(main, "evaluate", kept), contextlib.redirect_stdout(io.StringIO()):
            if main.main(argv) != 0:
                raise RuntimeError(f"main.py {' '.join(argv)} failed")
        result = played[-1]  # its seconds: the games' alone, as in a run whose workers are already started
        figures[f"{workers} workers"] = {
            "seconds": result.seconds, "steps": result.steps, "scores": result.scores,
            "hours_per_40": 40 * result.seconds / 3600,
        }  # fmt: skip
        print(f"an evaluation, {workers} workers: {figures[f'{workers} workers']}", file=sys.stderr)
    figures["agent_step"] = load_checkpoint(agent_file)["run"]["step"]
    return figures


def run_gpu_atari100k(quick: bool) -> dict[str, Any]:
    """The Atari 100k figures of the GPU check: the preset's learning step eager and graphed, its loop's
    steps/s with and without CUDA graphs (alternating, two rounds), and a 100k-step run's training
    minutes at the faster rate (the graphed one, on a GPU)."""
    device = pick_device("auto")
    env_id = resolve_env_id("Pong")
    env = AtariEnv(env_id, 0)
    preset = ["--preset", "atari100k"]
    args, _ = parse_config([*preset, "--env", "Pong"])
    graphs = device.type == "cuda"
    variants = {"graphed": "--cuda-graphs", "eager": "--no-cuda-graphs"} if graphs else {"eager": "--no-cuda-graphs"}
    batch = random_batch(np.random.default_rng(0), env.n_actions, device)
    figures: dict[str, Any] = {}
    for name, flag in variants.items():
        agent = Agent(
            env.n_actions, device, **{**main.agent_options(args, env), "cuda_graphs": flag == "--cuda-graphs"}
        )
        key = "train_step_graphed_ms" if name == "graphed" else "train_step_ms"
        figures[key] = 1e3 * median_seconds(functools.partial(agent.learn, batch), 10 if quick else 200, 10)
    steps = 200 if quick else ATARI100K_BENCH_STEPS
    rounds: dict[str, list[float]] = {}
    for _ in range(2):
        for name, flag in variants.items():
            summary = bench_loop(env_id, False, args.learning_starts, steps, 1, "auto", [*preset, flag])
            rounds.setdefault(name, []).append(summary.learning_steps_per_second)
    figures["sps_rounds"] = rounds
    for name, values in rounds.items():
        figures[f"sps_{name}"] = statistics.mean(values)
    fastest = figures.get("sps_graphed", figures["sps_eager"])
    if graphs:
        figures["graphs_over_eager"] = figures["sps_graphed"] / figures["sps_eager"]
    figures["minutes_per_100k_steps"] = args.steps / fastest / 60
    figures["settings"] = {
        "device": torch.cuda.get_device_name(device) if graphs else str(device),
        "game": env_id,
        "learning_starts": args.learning_starts,
        "steps": steps,
        "flags": [*preset, "--eps-start", "0", "--eps-end", "0"],  # bench_loop's: a forward pass every step
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cpus": available_cpus(),
        "quick": quick,
    }
    return figures


# The learning benchmark: main.py --preset cleanrl-short (CleanRL's dqn_atari.py settings for a
# 250k-step Breakout run, with an evaluation of 10 games every 50k steps; everything the preset does
# not set is main.py's default). The thread count changes the numerics (and so the run); 2 threads
# make the benchmark the same run on any machine.
LEARNING_FLAGS = ["--preset", "cleanrl-short", "--threads", "2"]
LEARNING_SEED = 1


def learning_run(steps: int, prioritized: bool, seed: int, out: Path, main_args: list[str]) -> int:
    """Train (or continue) the benchmark run in ``out`` up to ``steps``; return main's exit code."""
    if (out / REWARDS_FILE).exists():
        done = load_newest_checkpoint(out)[1]["run"]["step"]
        if done >= steps:
            return 0
        argv = ["--resume", str(out), "--steps", str(steps)]
        print(f"Continuing the benchmark run in {out} from step {done}", flush=True)
    else:
        argv = ["--env", "Breakout", "--seed", str(seed), "--steps", str(steps), "--out", str(out), *LEARNING_FLAGS]
        argv += ["--prioritized"] * prioritized + main_args
    args, checkpoint = parse_config(argv)
    return main.train(args, checkpoint).exit_code


def learning_main(arguments: argparse.Namespace, main_args: list[str]) -> int:
    runs = arguments.runs
    if not runs:
        suffix = "-per" if arguments.prioritized else ""
        out = arguments.out or Path(f"runs/learning-breakout-seed{arguments.seed}{suffix}")
        exit_code = learning_run(arguments.steps, arguments.prioritized, arguments.seed, out, main_args)
        if exit_code != 0:
            return exit_code
        runs = [out]
    try:
        reports = [learning_report(run, arguments.score_threshold) for run in runs]
    except (RunLogError, plot.PlotError, CheckpointError) as error:
        print(f"bench.py: error: {error}", file=sys.stderr)
        return 2
    if arguments.json:
        print(json.dumps(reports, indent=2), flush=True)
    else:
        print(seeds_table(reports, arguments.steps) if arguments.by_seed else learning_table(reports), flush=True)
    return 0


def main_job_main(folder: Path, figure: Path | None) -> int:
    """Print the main job's tables from its files and, with a FILE, draw its curves into it."""
    try:
        print(main_job_markdown(main_job_report(folder)), flush=True)
        if figure:
            plot.save(main_job_figure(folder), figure)
    except (RunLogError, plot.PlotError, OSError) as error:
        print(f"bench.py: error: {error}", file=sys.stderr)
        return 2
    return 0


def load_note() -> str | None:
    """A note where other processes keep this machine busy (its load average over the last minute above half of the
    CPUs this process may use): speed figures measured now are not to be compared with others."""
    load, cpus = os.getloadavg()[0], available_cpus()
    if load <= cpus / 2:
        return None
    return (
        f"this machine is loaded (load average {load:.1f} over {cpus} CPUs) before bench.py starts: figures "
        "measured now are not to be compared with others; measure on an idle machine"
    )


def beside_main(runs: list[Path], up_to: int | None, references: list[Path], figure: Path | None) -> int:
    """Print runs' tables side by side up to a step (and published scores beside them) and, with a FILE, draw their
    curves into it."""
    try:
        report = beside_report(runs, up_to, references)
        print(beside_markdown(report), flush=True)
        if figure:
            plot.save(beside_figure(report, runs), figure)
    except (RunLogError, CheckpointError, plot.PlotError, OSError) as error:
        print(f"bench.py: error: {error}", file=sys.stderr)
        return 2
    return 0


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, list[str]]:
    """bench.py's own flags, and (for --learning) main.py flags given after ``--``."""
    argv = sys.argv[1:] if argv is None else argv
    main_args = argv[argv.index("--") + 1 :] if "--" in argv else []
    own = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    parser.add_argument("--quick", action="store_true", help="fewer steps and repeats: under a minute")
    parser.add_argument("--env", default="Breakout", help="the game of the speed benchmark")
    parser.add_argument("--train-every", type=int, default=4, help="the speed benchmark's agent steps per update")
    parser.add_argument(
        "--threads", type=threads_option, default="auto", help="CPU threads of the speed benchmark, as main.py's"
    )
    parser.add_argument(
        "--shared", action="store_true", help="only the loop alone, beside a busy core and two at once (a few minutes)"
    )
    # One loop in a process of its own, printing its steps/s: what --shared starts.
    parser.add_argument("--apex", action="store_true", help="only Ape-X's parts (needs ray; a few minutes)")
    parser.add_argument(
        "--at-once",
        action="store_true",
        help="only games at once: evaluations at each --eval-envs, the training loop at --envs 1 and 2 (25 minutes)",
    )
    parser.add_argument(
        "--at-once-report", type=Path, metavar="JSON", help="only print --at-once's figures (its --json) as tables"
    )
    parser.add_argument(
        "--gpu", action="store_true", help="the GPU check's figures (scripts/gpu_check.sh; about 7 minutes on a GPU)"
    )
    parser.add_argument(
        "--gpu-parts",
        nargs="+",
        choices=GPU_PARTS,
        default=GPU_PARTS[:2],
        help="with --gpu: which figures: 'side', our loop beside CleanRL's; 'atari100k', the Atari 100k preset; "
        "'envs', our loop at several --envs and --env-workers; 'evaluation', a trained agent's (--eval-agent); "
        "'cleanrl', CleanRL's loop with and without --torch-deterministic beside our one game (--cleanrl-rounds)",
    )
    parser.add_argument(
        "--cleanrl-rounds",
        type=int,
        default=GPU_CLEANRL_ROUNDS,
        metavar="R",
        help=f"with --gpu-parts cleanrl: its rounds (default: {GPU_CLEANRL_ROUNDS}; about two minutes each on an H200)",
    )
    parser.add_argument(
        "--eval-agent", type=Path, metavar="FILE", help="with --gpu-parts evaluation: a trained Breakout agent's file"
    )
    parser.add_argument("--cleanrl", type=Path, help="with --gpu: CleanRL's dqn_atari.py, timed beside our loop")
    parser.add_argument("--cleanrl-path", help="with --gpu: the folder of CleanRL's packages, first on its path")
    parser.add_argument(
        "--gpu-report", type=Path, metavar="JSON", help="only print the GPU check's figures (gpu_check.json) as a table"
    )
    parser.add_argument(
        "--main-job",
        type=Path,
        nargs="?",
        const=MAIN_JOB,
        metavar="FOLDER",
        help="only print the main job's tables (python main.py on Breakout, 10M steps) from its committed files "
        "(default folder: %(const)s)",
    )
    parser.add_argument(
        "--beside",
        type=Path,
        nargs="+",
        metavar="RUN",
        help="only print these runs' tables side by side up to --up-to (one game's runs of different recipes)",
    )
    parser.add_argument(
        "--up-to",
        type=int,
        metavar="STEP",
        help="with --beside: the step to compare up to (default: the first run's --steps)",
    )
    parser.add_argument(
        "--references",
        type=Path,
        nargs="+",
        default=[],
        metavar="CSV",
        help="with --beside: published scores to show beside the runs, one or more files with the columns of "
        "results/breakout-10m/references.csv",
    )
    parser.add_argument(
        "--plot",
        type=Path,
        metavar="FILE",
        help="with --main-job: also draw its curves beside the references into FILE; with --beside, the runs' curves",
    )
    parser.add_argument("--loop", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--loop-steps", type=int, nargs=2, default=(1000, 3000), help=argparse.SUPPRESS)
    learning = parser.add_argument_group(
        "learning benchmark", "Breakout with CleanRL's settings (see LEARNING_FLAGS); main.py flags may follow --"
    )
    learning.add_argument("--learning", action="store_true", help="run the learning benchmark")
    learning.add_argument("--steps", type=int, default=150_000, help="training steps")
    learning.add_argument("--prioritized", action="store_true", help="prioritized replay")
    learning.add_argument("--seed", type=int, default=LEARNING_SEED)
    learning.add_argument(
        "--score-threshold",
        type=float,
        default=SCORE_THRESHOLD,
        help=f"time to score: the mean of the last {SCORE_WINDOW} training games to reach (default: %(default)s, "
        "CleanRL's Breakout score at 250k steps)",
    )
    learning.add_argument(
        "--out", type=Path, help="run folder, continued if it holds a run (default runs/learning-breakout-seedS[-per])"
    )
    learning.add_argument(
        "--runs",
        type=Path,
        nargs="+",
        metavar="RUN",
        help="report these finished run folders side by side, no training",
    )
    learning.add_argument(
        "--by-seed",
        action="store_true",
        help="with --runs: one column per setting, each seed's score and their mean, up to --steps (Markdown)",
    )
    arguments = parser.parse_args(own)
    if arguments.plot and not (arguments.main_job or arguments.beside):
        parser.error("--plot goes with --main-job or --beside")
    if arguments.up_to is not None and (not arguments.beside or arguments.up_to <= 0):
        parser.error("--up-to STEP goes with --beside and is a positive step")
    if arguments.references and not arguments.beside:
        parser.error("--references goes with --beside")
    if arguments.gpu and "evaluation" in arguments.gpu_parts and arguments.eval_agent is None:
        parser.error("--gpu-parts evaluation needs --eval-agent FILE, a trained agent's file")
    if arguments.gpu and "cleanrl" in arguments.gpu_parts and arguments.cleanrl is None:
        parser.error("--gpu-parts cleanrl needs --cleanrl FILE, CleanRL's dqn_atari.py")
    if arguments.cleanrl_rounds < 1:
        parser.error(f"--cleanrl-rounds {arguments.cleanrl_rounds}: give at least one round")
    if main_args and not arguments.learning:
        parser.error("main.py flags after -- go with --learning")
    return arguments, main_args


if __name__ == "__main__":
    keep_freed_memory()  # as a training run does: the learning step's timings are a run's
    arguments, main_args = parse_args()
    if arguments.learning:
        sys.exit(learning_main(arguments, main_args))
    if arguments.main_job:
        sys.exit(main_job_main(arguments.main_job, arguments.plot))
    if arguments.beside:
        sys.exit(beside_main(arguments.beside, arguments.up_to, arguments.references, arguments.plot))
    env_id = resolve_env_id(arguments.env)
    show = functools.partial(print, file=sys.stdout, flush=True)  # the results: JSON alone with --json
    if arguments.json:  # so what the runs bench makes print goes to standard error
        sys.stdout = sys.stderr
    note = None if arguments.at_once_report or arguments.gpu_report else load_note()
    if note:
        print(f"Note: {note}", file=sys.stderr, flush=True)
    if arguments.loop:
        summary = bench_loop(env_id, False, *arguments.loop_steps, arguments.train_every, arguments.threads)
        print(summary.learning_steps_per_second)
        sys.exit(0)
    use_threads(arguments.threads)
    if arguments.apex:
        results = bench_apex(env_id, arguments.quick)
        show(json.dumps(results, indent=2) if arguments.json else table(results, APEX_ROWS))
        sys.exit(0)
    if arguments.at_once_report:
        print(at_once_markdown(json.loads(arguments.at_once_report.read_text())))
        sys.exit(0)
    if arguments.at_once:
        results = bench_at_once(arguments.quick)
        show(json.dumps(results, indent=2) if arguments.json else at_once_markdown(results))
        sys.exit(0)
    if arguments.gpu_report:
        print(gpu_tables(json.loads(arguments.gpu_report.read_text())["bench"]))
        sys.exit(0)
    if arguments.gpu:
        results = {}
        if "side" in arguments.gpu_parts:
            results = run_gpu(arguments.cleanrl, arguments.cleanrl_path, arguments.quick)
        if "atari100k" in arguments.gpu_parts:
            results["atari100k"] = run_gpu_atari100k(arguments.quick)
        if "evaluation" in arguments.gpu_parts:  # before the long envs part: a call cut short has it in its log
            results["evaluation"] = run_gpu_evaluation(arguments.eval_agent, arguments.quick)
        if "envs" in arguments.gpu_parts:
            results["envs"] = run_gpu_envs(arguments.quick)
        if "cleanrl" in arguments.gpu_parts:
            results["cleanrl"] = run_gpu_cleanrl(
                arguments.cleanrl, arguments.cleanrl_path, arguments.quick, arguments.cleanrl_rounds
            )
        show(json.dumps(results, indent=2) if arguments.json else gpu_tables(results))
        sys.exit(0)
    if arguments.shared:
        results = bench_shared(env_id, arguments.quick, arguments.train_every, arguments.threads)
        show(json.dumps(results, indent=2) if arguments.json else table(results, SHARED_ROWS))
        sys.exit(0)
    results = run(arguments.env, arguments.quick, arguments.train_every, arguments.threads)
    show(json.dumps(results, indent=2) if arguments.json else table(results))
