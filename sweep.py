"""Train many games and seeds, in parallel, into one benchmark table and figure.

    python sweep.py --envs Breakout Pong --seeds 0 1 2 [main.py flags ...] --out SWEEP
    python sweep.py --envs atari5 --seeds 0 1 2 --steps 10000000 --out SWEEP   # the Atari-5 subset
    python sweep.py --envs atari100k --seeds 0 1 2 --preset atari100k --out SWEEP  # Atari 100k, DrQ(eps)
    python sweep.py --report SWEEP                                             # the table and figure again

Each (game, seed) is an ordinary ``python main.py`` run in ``SWEEP/<Game>-seed<seed>/``, with the
remaining flags passed through unchanged (``--threads`` defaults to 1 here: one thread per run is
the most steps per core). Rerunning the same command skips finished runs and resumes
interrupted ones. Runs go to a Ray cluster started in this process, each a task holding
``--threads`` CPUs, so the machine's cores are shared without oversubscription; ``--ray-address``
sends them to a running cluster instead (the run folders must then be on a path every node
shares). Without Ray, runs go one after another here. A run that fails is retried once.

The report scores each run by its last evaluation, normalised per game as
(score - random) / (human - random) with the published reference scores in
``atari_reference_scores.csv``, and aggregates over games with rliable (Agarwal et al. 2021): the
mean, the median, the interquartile mean (IQM) and the optimality gap, each with a 95% stratified
bootstrap confidence interval (runs resampled within each game), and performance profiles. A
sweep of Atari 100k runs is set beside the published DER, DrQ(eps) and SPR runs on its games.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import csv
import ctypes
import io
import json
import math
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from matplotlib.figure import Figure
from rliable import library as rly
from rliable import metrics
from tqdm import tqdm

import plot
from utils_apex import RayStartError, first_line
from utils_config import (
    available_cpus,
    available_memory,
    learning_config,
    memory_bytes,
    options_of,
    parse_config,
    program,
)
from utils_config import build_parser as main_parser
from utils_env import game_name, resolve_env_id
from utils_run import (
    EPISODES_FILE,
    MEMORY_FILE,
    CheckpointError,
    RunFolderError,
    RunLock,
    RunLogError,
    load_memory,
    load_newest_checkpoint,
    read_config,
    read_episodes,
    read_rewards,
    write_atomically,
)

PROJECT_DIR = Path(__file__).resolve().parent
REFERENCE_SCORES = PROJECT_DIR / "atari_reference_scores.csv"
GAME_SETS = {
    # Aitchison et al. (2023), "Atari-5: Distilling the Arcade Learning Environment down to Five Games".
    "atari5": ["BattleZone", "DoubleDunk", "NameThisGame", "Phoenix", "Qbert"],
    "atari10": [
        "Amidar", "Bowling", "Frostbite", "KungFuMaster", "Riverraid",
        "BattleZone", "DoubleDunk", "NameThisGame", "Phoenix", "Qbert",
    ],
    # The 26 games of Atari 100k (Kaiser et al. 2020), with main.py's --preset atari100k.
    "atari100k": [
        "Alien", "Amidar", "Assault", "Asterix", "BankHeist", "BattleZone", "Boxing", "Breakout", "ChopperCommand",
        "CrazyClimber", "DemonAttack", "Freeway", "Frostbite", "Gopher", "Hero", "Jamesbond", "Kangaroo", "Krull",
        "KungFuMaster", "MsPacman", "Pong", "PrivateEye", "Qbert", "RoadRunner", "Seaquest", "UpNDown",
    ],
}  # fmt: skip
SWEEP_OWNS = {"env", "seed", "out", "resume", "evaluate"}  # main.py flags the sweep sets for each run
LOG_FILE = "main.log"  # each run's own output, in its folder
STOP_FILE = ".stop"  # in the sweep folder: tells every run to stop and save a checkpoint
BOOTSTRAP_SAMPLES = 2000
CONFIDENCE = 0.95
RETRIES = 1
PR_SET_PDEATHSIG = 1  # prctl(2)


class SweepError(Exception):
    """Bad input or an unreadable sweep, reported as one line with exit status 2."""


@dataclass(frozen=True)
class Run:
    game: str  # ALE game name, as in the folder name
    seed: int
    folder: Path

    @property
    def name(self) -> str:
        return self.folder.name


def expand_envs(names: list[str]) -> list[str]:
    """Game names with the presets spelled out, each once, in the order given."""
    games: list[str] = []
    for name in names:
        for game in GAME_SETS.get(name.lower(), [name]):
            try:
                resolved = game_name(resolve_env_id(game))
            except ValueError as error:
                raise SweepError(f"--envs: {error}") from None
            if resolved not in games:
                games.append(resolved)
    return games


def plan(out: Path, games: list[str], seeds: list[int]) -> list[Run]:
    return [Run(game, seed, out / f"{game}-seed{seed}") for game in games for seed in seeds]


def run_state(run: Run, steps: int) -> str:
    """``done`` (evaluated at ``steps`` or later, by its rewards.txt, which counts a run kept without
    its checkpoints, or by a checkpoint), ``interrupted`` (an earlier checkpoint, or one whose
    evaluation a stop cut short) or ``new``."""
    if evaluated_step(run.folder) >= steps:
        return "done"
    try:
        _, checkpoint, _ = load_newest_checkpoint(run.folder)
    except CheckpointError:
        return "new"
    progress = checkpoint["run"]
    return "done" if progress["step"] >= steps and not progress.get("evaluation_due", False) else "interrupted"


def evaluated_step(folder: Path) -> int:
    """The step of the run's last evaluation in its rewards.txt (-1 with none, or none readable)."""
    try:
        rows = read_rewards(folder / "rewards.txt")
    except (RunLogError, OSError):
        return -1
    return int(rows[-1][1][0]) if rows else -1


def settings_mismatch(run: Run, passed: list[str]) -> str | None:
    """How the learning settings of ``run``'s saved configuration differ from those this sweep's
    flags give it (the options a resume may not change), or None when they agree or cannot be read."""
    try:
        saved = read_config(run.folder)
    except (RunLogError, CheckpointError, OSError):
        return None
    defaults = vars(main_parser().parse_args([]))  # for options newer than the run
    asked = vars(options_of(["--env", run.game, "--seed", str(run.seed), *passed]))
    ran = {**defaults, **saved}
    with contextlib.suppress(ValueError):
        asked["env"], ran["env"] = resolve_env_id(asked["env"]), resolve_env_id(str(ran["env"]))
    mine, theirs = learning_config(asked), learning_config(ran)
    differing = [name for name in sorted(mine) if name != "preset" and mine[name] != theirs.get(name)]
    if not differing:
        return None
    shown = [f"--{name.replace('_', '-')} {theirs.get(name)!r}, not {mine[name]!r}" for name in differing[:3]]
    return "; ".join(shown) + (f"; and {len(differing) - 3} more" if len(differing) > 3 else "")


def resume_note(run: Run) -> str:
    """How main.py will go on with the interrupted ``run``: exactly (its replay memory was saved
    with its newest checkpoint) or not, and why."""
    _, checkpoint, _ = load_newest_checkpoint(run.folder)
    step = checkpoint["run"]["step"]
    memory, reason = load_memory(run.folder / MEMORY_FILE, step, learning_config(checkpoint["config"]))
    if memory is not None:
        return f"resumes at step {step:,} as the same run (its replay memory was saved with the checkpoint)"
    reason = reason or "its replay memory was not saved (--save-memory)"
    return f"resumes at step {step:,}, no longer exactly the run it was: {reason}, so main.py refills it"


def main_argv(run: Run, state: str, passed: list[str]) -> list[str]:
    """main.py's command line for ``run``: a new run, or a resume of an interrupted one."""
    if state == "interrupted":  # main.py takes the same flags again: each equals its saved value
        return ["--resume", str(run.folder), *passed]
    return ["--env", run.game, "--seed", str(run.seed), "--out", str(run.folder), *passed]


def run_main(argv: list[str], log: Path, stop_file: Path) -> int:
    """``python main.py argv`` with its output in ``log``. Ctrl-C, or ``stop_file`` appearing (how
    the sweep stops runs on other machines: their folders are shared), is passed on to it as
    SIGINT, so it saves a checkpoint before it stops. A run still queued when the sweep stops
    never starts (Ray would otherwise start it as the stopped runs free their slots)."""
    if stop_file.exists():
        return 130  # stopped, like a run stopped by Ctrl-C
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as output:
        process = subprocess.Popen(
            [sys.executable, str(PROJECT_DIR / "main.py"), *argv],
            stdout=output,
            stderr=subprocess.STDOUT,
            cwd=PROJECT_DIR,
            start_new_session=True,  # Ctrl-C reaches it through this function, once
            preexec_fn=stop_with_parent,
        )
        try:
            while process.poll() is None:
                if stop_file.exists():
                    process.send_signal(signal.SIGINT)
                    return process.wait()
                time.sleep(0.5)
            return process.returncode
        except KeyboardInterrupt:
            process.send_signal(signal.SIGINT)
            process.wait()
            raise


def stop_with_parent() -> None:
    """In a run's process, before main.py starts: on Linux, have the kernel send it SIGTERM (which
    main.py takes as Ctrl-C: a checkpoint, then exit) when the process that started it dies, even
    by SIGKILL, so that no run trains on orphaned and holds its folder's lock."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


PROGRESS_BAR = re.compile(r"\d+%\|.*\|")  # a tqdm line, such as " 12%|█▏  | 1200/10000 [...]": never the reason


def last_error(log: Path) -> str:
    """The last line main.py wrote, which names what went wrong."""
    try:
        lines = [line.strip() for line in log.read_text(errors="replace").replace("\r", "\n").splitlines()]
    except OSError:
        return "no output"
    lines = [line for line in lines if line and not PROGRESS_BAR.search(line)]
    return lines[-1] if lines else "no output"


def last_step(run: Run) -> int:
    """The step of the run's newest training game, for the progress bar (0 before the first)."""
    try:
        games = read_episodes(run.folder / EPISODES_FILE)
    except (RunLogError, OSError):  # not started yet, or a line being written
        return 0
    return int(games[-1, 0]) if len(games) else 0


class Executor:
    """Where runs go: Ray tasks (local or a cluster), or this process, one after another."""

    def __init__(self, address: str | None, threads: int, use_ray: bool, stop_file: Path) -> None:
        self.stop_file = stop_file
        stop_file.unlink(missing_ok=True)  # left by an interrupted sweep
        self.ray: Any = None
        self.started_ray = False
        if not use_ray:
            return
        import ray

        from utils_apex import start_ray

        self.ray = ray
        try:
            self.started_ray = start_ray(address, max(threads, available_cpus()))
        except KeyboardInterrupt:  # Ctrl-C while Ray starts: leave no half-started Ray behind
            ray.shutdown()
            raise
        self.remote = ray.remote(run_main).options(num_cpus=threads, max_retries=0)

    def run_all(self, jobs: list[tuple[Run, list[str]]], on_done: Callable[[Run, int], None], bar: tqdm) -> None:
        """Run ``jobs`` (as Ray tasks, or one at a time in a thread of this process), calling
        ``on_done(run, exit status)`` as each ends; Ctrl-C stops them all with their checkpoints."""
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as local:
            if self.ray is None:
                pending = {
                    local.submit(run_main, argv, run.folder / LOG_FILE, self.stop_file): run for run, argv in jobs
                }
            else:
                pending = {self.remote.remote(argv, run.folder / LOG_FILE, self.stop_file): run for run, argv in jobs}
            try:
                while pending:
                    for handle in self._ended(list(pending)):
                        on_done(pending.pop(handle), self._exit_status(handle))
                    bar.set_postfix_str(progress_text(list(pending.values())), refresh=True)
            except KeyboardInterrupt:
                self.stop_file.touch()  # each run passes it on to its main.py, which saves a checkpoint
                if self.ray is None:
                    for future in pending:
                        future.cancel()  # not started yet
                    concurrent.futures.wait([future for future in pending if not future.cancelled()], timeout=300)
                else:
                    self.ray.wait(list(pending), num_returns=len(pending), timeout=300)
                raise

    def _ended(self, handles: list[Any]) -> list[Any]:
        """The runs among ``handles`` that ended within 2 seconds."""
        if self.ray is None:
            return list(concurrent.futures.wait(handles, timeout=2.0, return_when="FIRST_COMPLETED").done)
        return self.ray.wait(handles, num_returns=1, timeout=2.0)[0]

    def _exit_status(self, handle: Any) -> int:
        if self.ray is None:
            return handle.result()
        try:
            return self.ray.get(handle)
        except self.ray.exceptions.RayError:
            return -1  # the worker died: a failure like any other

    def close(self) -> None:
        if self.started_ray:
            self.ray.shutdown()


def progress_text(running: list[Run]) -> str:
    return ", ".join(f"{run.name} {last_step(run):,}" for run in running[:4])


def sweep(arguments: argparse.Namespace, passed: list[str]) -> int:
    out = Path(arguments.out).resolve()  # the runs' main.py starts in the project folder, maybe on another node
    games = expand_envs(arguments.envs)
    check_passed(passed, games[0])
    runs = plan(out, games, arguments.seeds)
    steps = int(options_of(passed).steps)  # --preset atari100k sets 100,000
    threads = threads_of(passed)
    if arguments.ray_address is None:  # the runs that go at once here: their memories together
        check_room(len(runs), max(1, available_cpus() // threads), options_of(passed).memory_size)
    states = {run: run_state(run, steps) for run in runs}
    for run in runs:
        if states[run] != "new":
            mismatch = settings_mismatch(run, passed)
            if mismatch:
                raise SweepError(
                    f"{run.folder} holds a run with other settings than this command's ({mismatch}): "
                    "give its own flags, or choose another --out"
                )
    done = [run for run in runs if states[run] == "done"]
    print(
        f"Sweep {out}: {len(runs)} runs ({len(games)} games x {len(arguments.seeds)} seeds), "
        f"{len(done)} finished already",
        flush=True,
    )
    use_ray = import_ray_or_note(arguments.ray_address)
    attempts = {run: 0 for run in runs}
    failed: list[Run] = []
    stop_file = out / STOP_FILE
    executor: Executor | None = None

    def on_done(run: Run, code: int) -> None:
        attempts[run] += 1
        if code == 0 and run_state(run, steps) == "done":
            bar.update()
            tqdm.write(f"{run.name}: done ({last_score(run)})")
            return
        if code == 130 and stop_file.exists():
            return  # the sweep stopped it: the sweep stops below
        if code == 130:
            reason = "stopped from outside the sweep, with a checkpoint"
        elif code == 0:
            reason = f"ended before --steps {steps:,}"
        else:
            reason = last_error(run.folder / LOG_FILE)
        if attempts[run] <= RETRIES:
            tqdm.write(f"{run.name}: failed (exit {code}: {reason}); retrying")
            retry.append(run)
        else:
            tqdm.write(f"{run.name}: failed again (exit {code}: {reason}); see {run.folder / LOG_FILE}")
            failed.append(run)

    # One sweep at a time in a folder: two would share its stop file (Ctrl-C to one stopping the other's runs).
    with RunLock(out):
        bar = tqdm(total=len(runs), initial=len(done), unit="run", dynamic_ncols=True)
        try:
            executor = Executor(arguments.ray_address, threads, use_ray, stop_file)
            todo = [run for run in runs if states[run] != "done"]
            for run in todo:
                if states[run] == "interrupted":
                    tqdm.write(f"{run.name}: {resume_note(run)}")
            while todo:
                retry: list[Run] = []
                executor.run_all([(run, main_argv(run, run_state(run, steps), passed)) for run in todo], on_done, bar)
                todo = retry
        except KeyboardInterrupt:
            bar.close()
            print(f"Interrupted; run the same command again to continue the sweep in {out}", file=sys.stderr)
            return 130
        finally:
            bar.close()
            if executor is not None:
                executor.close()
    unfinished = [run.name for run in runs if run_state(run, steps) != "done"]
    if len(unfinished) < len(runs) or collect(out):  # a report needs one finished run, of this sweep or before
        print(report(out), flush=True)
    if unfinished:
        print(
            f"{program('sweep.py')}: error: {len(unfinished)} run(s) did not reach --steps {steps:,}: {', '.join(unfinished)} "
            "(each folder's main.log says why; run the same command again to retry them)",
            file=sys.stderr,
        )
        return 1
    return 0


def check_passed(passed: list[str], game: str) -> None:
    """The flags passed to main.py, checked once before any run starts (else every run would fail
    twice with the same line): spelled out in full, since main.py would take a prefix such as
    --en for --env, a flag the sweep owns; then main.py's own checks of their values."""
    parser = main_parser()
    parser.allow_abbrev = False
    _, unknown = parser.parse_known_args(passed)
    if unknown:
        raise SweepError(f"not a flag of sweep.py or main.py (spell flags out in full): {' '.join(unknown)}")
    owned = [
        flag for flag in passed if flag.startswith("--") and flag.split("=")[0][2:].replace("-", "_") in SWEEP_OWNS
    ]
    if owned:
        raise SweepError(f"{owned[0]} is set by the sweep for each run; leave it out")
    errors = io.StringIO()
    with tempfile.TemporaryDirectory() as empty, contextlib.redirect_stderr(errors):
        try:
            parse_config(["--env", game, "--out", str(Path(empty) / "run"), *passed])
        except SystemExit:
            message = errors.getvalue().strip().splitlines()[-1]
            raise SweepError(message.split(": error: ", 1)[-1]) from None


def check_room(runs: int, slots: int, memory_size: int) -> None:
    """Refuse a sweep whose runs at once (``slots`` of them on this machine) need more RAM for
    their replay memories than is available now (main.py checks one run alone)."""
    at_once = min(runs, slots)
    needed, available = at_once * memory_bytes(memory_size), available_memory()
    if at_once > 1 and needed > available:
        raise SweepError(
            f"{at_once} runs at once with --memory-size {memory_size:,} need {needed / 2**30:.1f} GiB of RAM, "
            f"{available / 2**30:.1f} GiB is available here; choose a smaller --memory-size, or more --threads per run"
        )


def threads_of(passed: list[str]) -> int:
    """The runs' --threads: the one passed (``auto`` counts as all CPUs), else 1, added to ``passed``."""
    value = main_parser().parse_known_args(passed)[0].threads
    if "--threads" not in passed:
        passed += ["--threads", "1"]
        return 1
    return available_cpus() if value == "auto" else int(value)


def import_ray_or_note(address: str | None) -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        if address:
            raise SweepError("--ray-address needs Ray: pip install 'ray>=2.40'") from None
        print("Note: Ray is not installed (pip install 'ray>=2.40'): runs go one after another", flush=True)
        return False
    return True


def last_score(run: Run) -> str:
    rows = read_rewards(run.folder / "rewards.txt")
    return f"last evaluation {rows[-1][1][1]:.1f} at step {rows[-1][1][0]:,}" if rows else "no evaluation"


# --- The report ---------------------------------------------------------------------------------


def reference_scores(path: Path = REFERENCE_SCORES) -> dict[str, tuple[float, float]]:
    """Game -> (random score, human score), from the data file."""
    with open(path) as source:
        rows = csv.DictReader(line for line in source if not line.startswith("#"))
        return {row["game"]: (float(row["random"]), float(row["human"])) for row in rows}


# The aggregate metrics of Agarwal et al. (2021), computed by their library, rliable: over a
# (runs, games) matrix of human-normalised scores; the median is that of the games' mean scores.
METRICS: dict[str, Callable[[np.ndarray], float]] = {
    "mean": metrics.aggregate_mean,
    "median": metrics.aggregate_median,
    "iqm": metrics.aggregate_iqm,
    "optimality_gap": metrics.aggregate_optimality_gap,
}
PUBLISHED = PROJECT_DIR / "results" / "atari100k" / "published"  # Atari 100k references (SOURCES.md there)


def interval_estimates(
    scores: dict[str, Any], statistic: Callable[..., Any], samples: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """rliable's point estimates and 95% stratified bootstrap intervals of ``statistic`` for each entry
    of ``scores``: a (runs, games) matrix, or a pair of them (each resampled on its own)."""
    with seeded_numpy():
        return rly.get_interval_estimates(scores, statistic, reps=samples, confidence_interval_size=CONFIDENCE)


@contextlib.contextmanager
def seeded_numpy(seed: int = 0) -> Iterator[None]:
    """rliable's bootstrap draws from numpy's global generator (its random_state argument is not
    used for the draws): seed it, so that a report is the same every time, and restore it."""
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(state)


def aggregates(matrices: dict[str, np.ndarray], samples: int) -> dict[str, dict[str, Any]]:
    """Each algorithm's METRICS with their intervals."""
    points, intervals = interval_estimates(
        matrices, lambda scores: np.array([statistic(scores) for statistic in METRICS.values()]), samples
    )
    return {
        name: {
            metric: {
                "value": float(points[name][i]),
                "interval": (float(intervals[name][0, i]), float(intervals[name][1, i])),
            }
            for i, metric in enumerate(METRICS)
        }
        for name in matrices
    }


def published_scores(games: list[str]) -> tuple[dict[str, dict[str, float]], dict[str, np.ndarray]]:
    """Atari 100k references: each game's published mean score per algorithm (the 26 games), and
    per algorithm a (runs, games) matrix of raw scores when every one of ``games`` has its runs."""
    with open(PUBLISHED / "means.csv") as source:
        means = {row.pop("game"): {name: float(value) for name, value in row.items()} for row in csv.DictReader(source)}
    runs = json.loads((PUBLISHED / "runs.json").read_text())
    matrices = {
        name: np.array([per_game[game] for game in games]).T
        for name, per_game in runs.items()
        if all(game in per_game for game in games)
    }
    return {game: means[game] for game in games if game in means}, matrices


class Evaluation(NamedTuple):
    """One rewards.txt line: the step, the mean score, the wall seconds, and the spread of the
    evaluation's games (nan where not recorded: older three-column files)."""

    step: int
    mean: float
    seconds: float
    std: float
    low: float
    high: float


def collect(out: Path, left_out: dict[str, str] | None = None) -> dict[str, dict[int, list[Evaluation]]]:
    """Game -> seed -> the run's evaluations, from every finished run folder in ``out``. A run whose
    rewards.txt does not parse, whose configuration (config.json: its game and --steps) cannot be
    read, whose game is not the one its folder is named for, or whose last evaluation comes before
    its --steps (still running, stopped or failed) is left out, with the reason in ``left_out``: a
    result is only ever a finished run's, under its own game."""
    if not out.is_dir():
        raise SweepError(f"{out} is not a folder of a sweep")
    left_out = {} if left_out is None else left_out
    results: dict[str, dict[int, list[Evaluation]]] = {}
    for folder in sorted(path for path in out.iterdir() if (path / "rewards.txt").exists()):
        game, separator, seed = folder.name.rpartition("-seed")
        if not separator or not seed.isdigit():
            continue
        if seed != str(int(seed)):  # Pong-seed001 beside Pong-seed1 would be the same run twice
            left_out[folder.name] = (
                f"not a sweep's folder name (a sweep names seed {int(seed)}'s {game}-seed{int(seed)})"
            )
            continue
        try:
            rows = read_rewards(folder / "rewards.txt")
        except RunLogError as error:
            left_out[folder.name] = str(error)
            continue
        try:
            config = read_config(folder)
            steps, env = config["steps"], resolve_env_id(str(config["env"]))
            if not isinstance(steps, int) or isinstance(steps, bool) or steps <= 0:
                raise ValueError(f"--steps {steps!r}")
        except (RunLogError, CheckpointError, OSError, KeyError, TypeError, ValueError, AttributeError) as error:
            left_out[folder.name] = f"its configuration (config.json) cannot be read: {first_line(error)}"
            continue
        if game_name(env) != game:
            left_out[folder.name] = f"the folder is named for {game}, but its run played {game_name(env)}"
            continue
        last = int(rows[-1][1][0]) if rows else -1
        if last < steps:
            left_out[folder.name] = f"unfinished: evaluated at step {max(last, 0):,} of its --steps {steps:,}"
            continue
        results.setdefault(game, {})[int(seed)] = [
            Evaluation(int(values[0]), values[1], values[6], *values[2:5])
            if len(values) == 7
            else Evaluation(int(values[0]), values[1], *[math.nan] * 4)  # 3-column files
            for _, values in rows
        ]
    return results


def summarize(out: Path, samples: int = BOOTSTRAP_SAMPLES) -> dict[str, Any]:
    """Per game, each seed's last evaluation and their mean and std; over games, the human-normalised
    METRICS with their intervals (games without reference scores left out, named). A sweep of
    Atari 100k runs (--preset atari100k) is also set beside the published DER, DrQ(eps) and SPR
    runs on the same games: their aggregates, and the probability that ours improves on each."""
    left_out: dict[str, str] = {}
    results = collect(out, left_out)
    if not results:
        raise SweepError(f"{out} holds no run folders with evaluations (<Game>-seed<N>/rewards.txt)")
    references = reference_scores()
    atari100k = all(
        preset_of(out / f"{game}-seed{seed}") == "atari100k" for game, seeds in results.items() for seed in seeds
    )
    published_means, published_runs = published_scores(sorted(results)) if atari100k else ({}, {})
    games: dict[str, Any] = {}
    for game, seeds in sorted(results.items()):
        finals = {seed: evaluations[-1] for seed, evaluations in sorted(seeds.items())}
        last = {seed: final.mean for seed, final in finals.items()}
        scores = np.array(list(last.values()))
        games[game] = {
            "last_score": last,
            "last_step": {seed: final.step for seed, final in finals.items()},
            "wall_seconds": {seed: final.seconds for seed, final in finals.items()},  # nan: not recorded
            # The spread over the last evaluation's games: near-identical games show as a tiny one.
            "games_spread": {
                seed: {"std": final.std, "min": final.low, "max": final.high} for seed, final in finals.items()
            },
            "mean": float(scores.mean()),
            "std": float(scores.std(ddof=1)) if scores.size > 1 else None,  # one run has no spread to show
        }
        if game in published_means:
            games[game]["published"] = published_means[game]
        if game in references:
            random, human = references[game]
            games[game]["human_normalised"] = {
                seed: (score - random) / (human - random) for seed, score in last.items()
            }
    normalised = {game: entry["human_normalised"] for game, entry in games.items() if "human_normalised" in entry}
    summary: dict[str, Any] = {
        "games": games,
        "without_reference": sorted(set(games) - set(normalised)),
        "left_out": left_out,
        "bootstrap_samples": samples,
        "confidence": CONFIDENCE,
        "notes": [],
    }
    final_steps = sorted({step for entry in games.values() for step in entry["last_step"].values()})
    if len(final_steps) > 1:
        summary["notes"].append(
            f"the runs were last evaluated at different steps ({', '.join(f'{step:,}' for step in final_steps)}), "
            "so their scores measure different amounts of training"
        )
    # The bootstrap resamples runs within each game, so the aggregates take the games with the most
    # finished seeds; a game still behind joins them once it has as many.
    seeds_of = {game: len(values) for game, values in normalised.items()}
    most = max(seeds_of.values(), default=0)
    names = [game for game in sorted(normalised) if seeds_of[game] == most]
    behind = [f"{game} ({plural(seeds_of[game], 'seed')})" for game in sorted(normalised) if seeds_of[game] < most]
    if behind:
        summary["notes"].append(
            f"left out of the aggregates until they have {most} finished seeds like the other games: {', '.join(behind)}"
        )
    if names:
        ours = np.array([list(normalised[game].values()) for game in names]).T  # (runs, games)
        matrices = {"ours": ours}
        if published_runs:
            scale = np.array([references[game] for game in names])  # (games, [random, human])
            columns = [sorted(results).index(game) for game in names]
            for name, raw in published_runs.items():
                matrices[name] = (raw[:, columns] - scale[:, 0]) / (scale[:, 1] - scale[:, 0])
            pairs = {name: [ours, matrix] for name, matrix in matrices.items() if name != "ours"}
            points, intervals = interval_estimates(pairs, metrics.probability_of_improvement, samples)
            summary["improvement"] = {
                name: {"value": float(points[name]), "interval": tuple(float(end) for end in np.ravel(intervals[name]))}
                for name in pairs
            }
            summary["published_runs"] = {name: int(matrix.shape[0]) for name, matrix in published_runs.items()}
        summary["aggregate_games"] = names
        summary["aggregates"] = aggregates(matrices, samples)
        summary["runs_per_game"] = int(ours.shape[0])
        if ours.shape[0] == 1:
            summary["notes"].append(
                "one run per game: the bootstrap resamples runs within each game, so our intervals have no width"
            )
    return summary


def preset_of(run: Path) -> str | None:
    try:
        return read_config(run).get("preset")
    except (RunLogError, CheckpointError, OSError):
        return None


def markdown(summary: dict[str, Any]) -> str:
    published = sorted({name for entry in summary["games"].values() for name in entry.get("published", {})})
    header = "| game | seed | last evaluation | its games: std (min to max) | at step | wall time | human-normalised |"
    header += "".join(f" {name} |" for name in published)
    lines = [header, "|---" * (7 + len(published)) + "|"]
    for game, entry in summary["games"].items():
        for seed, score in entry["last_score"].items():
            normalised = entry.get("human_normalised", {}).get(seed)
            shown = f"{normalised:.3f}" if normalised is not None else "—"
            seconds = entry["wall_seconds"][seed]
            wall = "—" if math.isnan(seconds) else f"{seconds / 60:.0f} min"
            spread = entry["games_spread"][seed]
            games = (
                "—"
                if math.isnan(spread["std"])
                else f"{spread['std']:.1f} ({spread['min']:.0f} to {spread['max']:.0f})"
            )
            lines.append(
                f"| {game} | {seed} | {score:.1f} | {games} | {entry['last_step'][seed]:,} | {wall} | {shown} |"
                + " |" * len(published)
            )
        means = "".join(f" {entry.get('published', {}).get(name, math.nan):.1f} |" for name in published)
        mean, std = entry["mean"], entry["std"]
        label, shown = ("one seed so far", f"{mean:.1f}") if std is None else ("mean ± std", f"{mean:.1f} ± {std:.1f}")
        lines.append(f"| **{game}** | {label} | **{shown}** | | | | |{means}")
    if "aggregates" in summary:
        percent = round(100 * summary["confidence"])
        games = summary["aggregate_games"]
        runs = summary["runs_per_game"]
        lines += [
            "",
            f"Human-normalised scores over {plural(len(games), 'game')} ({', '.join(games)}), "
            f"{plural(runs, 'run')} of ours per game",
        ]
        if "published_runs" in summary:
            published_runs = ", ".join(f"{name} {count}" for name, count in summary["published_runs"].items())
            lines[-1] += f" (published: {published_runs} runs per game)"
        lines[-1] += f"; {percent}% stratified bootstrap intervals (rliable):"
        lines += ["", *aggregate_table(summary["aggregates"])]
    for name, entry in summary.get("improvement", {}).items():
        low, high = entry["interval"]
        lines.append(f"\nProbability that ours improves on {name}: {entry['value']:.3f} [{low:.3f}, {high:.3f}]")
    for note in summary["notes"]:
        lines += ["", f"Note: {note}."]
    for run, reason in summary["left_out"].items():
        lines += ["", f"Left out {run}: {reason}"]
    if summary["without_reference"]:
        lines += ["", f"No reference scores for {', '.join(summary['without_reference'])}: left out of the aggregate."]
    return "\n".join(lines)


def aggregate_table(aggregates: dict[str, dict[str, Any]]) -> list[str]:
    """A Markdown table of each algorithm's METRICS with their intervals."""
    lines = ["| | " + " | ".join(metric.replace("_", " ").replace("iqm", "IQM") for metric in METRICS) + " |"]
    lines.append("|---" * (1 + len(METRICS)) + "|")
    for name, values in aggregates.items():
        cells = [f"{v['value']:.3f} [{v['interval'][0]:.3f}, {v['interval'][1]:.3f}]" for v in values.values()]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def compare(out: Path, other: Path, samples: int = BOOTSTRAP_SAMPLES) -> dict[str, Any]:
    """The finished runs of sweep ``out`` beside those of sweep ``other`` (an ablation: the same
    games and seeds under another pipeline): per game both means and their difference; over the
    games both aggregate, both sides' METRICS and the probability that a run of ``out`` beats a
    run of ``other`` on a game."""
    if out.name == other.name:
        raise SweepError(f"--compare needs two sweeps of different folder names, got {out} and {other}")
    mine, theirs = summarize(out, samples), summarize(other, samples)
    shared = sorted(set(mine["games"]) & set(theirs["games"]))
    if not shared:
        raise SweepError(f"{out} and {other} have no finished game in common")
    games = {
        game: {
            "mean": mine["games"][game]["mean"],
            "other_mean": theirs["games"][game]["mean"],
            "seeds": len(mine["games"][game]["last_score"]),
            "other_seeds": len(theirs["games"][game]["last_score"]),
        }
        for game in shared
    }
    comparison: dict[str, Any] = {"sweep": out.name, "other": other.name, "games": games}
    together = [game for game in mine.get("aggregate_games", []) if game in theirs.get("aggregate_games", [])]
    if together:
        matrices = {
            name: np.array([list(summary["games"][game]["human_normalised"].values()) for game in together]).T
            for name, summary in ((out.name, mine), (other.name, theirs))
        }
        points, intervals = interval_estimates(
            {"improvement": list(matrices.values())}, metrics.probability_of_improvement, samples
        )
        comparison["aggregate_games"] = together
        comparison["aggregates"] = aggregates(matrices, samples)
        comparison["improvement"] = {
            "value": float(points["improvement"]),
            "interval": tuple(float(end) for end in np.ravel(intervals["improvement"])),
        }
    return comparison


def comparison_markdown(comparison: dict[str, Any]) -> str:
    out, other = comparison["sweep"], comparison["other"]
    lines = [f"| game | {out}: mean | seeds | {other}: mean | seeds | difference |", "|---" * 6 + "|"]
    for game, entry in comparison["games"].items():
        difference = entry["mean"] - entry["other_mean"]
        lines.append(
            f"| {game} | {entry['mean']:.1f} | {entry['seeds']} | {entry['other_mean']:.1f} | {entry['other_seeds']} "
            f"| {difference:+.1f} |"
        )
    if "aggregates" in comparison:
        games = comparison["aggregate_games"]
        percent = round(100 * CONFIDENCE)
        lines += [
            "",
            f"Human-normalised scores over {plural(len(games), 'game')} ({', '.join(games)}); {percent}% stratified "
            "bootstrap intervals (rliable):",
            "",
            *aggregate_table(comparison["aggregates"]),
        ]
        low, high = comparison["improvement"]["interval"]
        value = comparison["improvement"]["value"]
        lines.append(f"\nProbability that a run of {out} beats one of {other}: {value:.3f} [{low:.3f}, {high:.3f}]")
    return "\n".join(lines)


def write_comparison(out: Path, other: Path, samples: int = BOOTSTRAP_SAMPLES) -> str:
    """Write SWEEP/versus-OTHER.md and .json; return the Markdown."""
    comparison = compare(out, other, samples)
    text = comparison_markdown(comparison)
    stem = out / f"versus-{other.name}"
    write_atomically(stem.with_suffix(".md"), lambda path: Path(path).write_text(text + "\n"))
    write_atomically(
        stem.with_suffix(".json"), lambda path: Path(path).write_text(json.dumps(comparison, indent=2) + "\n")
    )
    return f"{text}\n\nWritten: {stem.with_suffix('.md')}, {stem.with_suffix('.json')}"


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'s' * (count != 1)}"


def figure(out: Path, summary: dict[str, Any]) -> Figure:
    """One panel per game with its seeds' evaluation curves; each game's normalised scores beside
    the published ones (Atari 100k); and, over the games of the report's aggregates, the IQM of the
    human-normalised scores over training steps with its interval and the performance profiles."""
    results = collect(out)
    games = list(summary["games"])
    references = reference_scores()
    normalised_games = [game for game in games if game in references]
    extra = bool(normalised_games) + ("aggregates" in summary) * 2
    columns = min(3, len(games) + extra)
    rows = math.ceil((len(games) + extra) / columns)
    drawing = Figure(figsize=(4.5 * columns, 3.2 * rows), dpi=110, layout="constrained")
    panels = drawing.subplots(rows, columns, squeeze=False).ravel()
    for panel, game in zip(panels, games, strict=False):
        curves = [plot.read_curve(out / f"{game}-seed{seed}" / "rewards.txt") for seed in sorted(results[game])]
        plot.draw_on(panel, curves, title=game)
    if normalised_games:
        draw_games(panels[len(games)], summary, references)
    if "aggregates" in summary:
        draw_iqm_curve(panels[len(games) + 1], results, summary["aggregate_games"], references)
        draw_profiles(panels[len(games) + 2], summary, references)
    for panel in panels[len(games) + extra :]:
        panel.set_visible(False)
    return drawing


def draw_games(panel: Any, summary: dict[str, Any], references: dict[str, tuple[float, float]]) -> None:
    """Each game's human-normalised score: our runs as dots and their mean as a bar; each published
    algorithm's mean as a mark, with a line over the middle half of its runs where they are kept."""
    games = [game for game in summary["games"] if "human_normalised" in summary["games"][game]]
    names = sorted({name for game in games for name in summary["games"][game].get("published", {})})
    _, published_runs = published_scores(games) if names else ({}, {})
    for x, game in enumerate(games):
        entry = summary["games"][game]
        runs = list(entry["human_normalised"].values())
        panel.scatter([x] * len(runs), runs, color="black", s=12, label="ours, each run" if x == 0 else None)
        panel.hlines(np.mean(runs), x - 0.15, x + 0.15, color="black", label="ours, mean" if x == 0 else None)
        random, human = references[game]
        for color, (marker, name) in enumerate(zip("s^v", names, strict=False)):
            if name not in entry.get("published", {}):
                continue
            offset = x + 0.2 * (color + 1)
            if name in published_runs:
                quartiles = np.percentile(published_runs[name][:, x], [25, 75])
                panel.vlines(offset, *(quartiles - random) / (human - random), color=f"C{color}", alpha=0.6)
            normalised = (entry["published"][name] - random) / (human - random)
            panel.scatter(
                [offset], [normalised], marker=marker, s=24, color=f"C{color}", label=name if x == 0 else None
            )
    centre = 0.1 * len(names)  # of each game's group of marks
    panel.set_xticks([x + centre for x in range(len(games))], games, rotation=45, ha="right", fontsize=7)
    panel.set_xlim(-0.5, len(games) - 0.5 + 2 * centre)
    published = "\n(line: the middle half of their runs)" if published_runs else ""
    panel.set_title(f"each game: ours and published{published}" if names else "each game: our runs", fontsize=9)
    panel.set_ylabel("human-normalised score")
    panel.grid(alpha=0.3)
    panel.legend(fontsize=7)


def draw_iqm_curve(
    panel: Any,
    results: dict[str, dict[int, list[tuple[int, float, float]]]],
    games: list[str],
    references: dict[str, tuple[float, float]],
) -> None:
    steps, values, lows, highs = iqm_curve(results, games, references)
    panel.plot(steps, values, marker="o", markersize=3, color="black")
    panel.fill_between(steps, lows, highs, color="black", alpha=0.15, linewidth=0)
    panel.set_title(f"IQM over {plural(len(games), 'game')}, {round(100 * CONFIDENCE)}% interval")
    panel.set_xlabel("training steps")
    panel.set_ylabel("human-normalised score")
    panel.grid(alpha=0.3)


def draw_profiles(panel: Any, summary: dict[str, Any], references: dict[str, tuple[float, float]]) -> None:
    """rliable's performance profiles: the fraction of runs scoring above each normalised score."""
    matrices = profile_matrices(summary, references)
    top = max(float(matrix.max()) for matrix in matrices.values())
    taus = np.linspace(0.0, min(max(top, 0.1), 3.0), 101)  # beyond 3 only a few runs of a few games
    with seeded_numpy():
        profiles, bands = rly.create_performance_profile(matrices, taus, reps=200)
    for name, profile in profiles.items():
        panel.plot(taus, profile, label=name)
        panel.fill_between(taus, bands[name][0], bands[name][1], alpha=0.15, linewidth=0)
    panel.set_title("performance profiles")
    panel.set_xlabel("human-normalised score τ")
    panel.set_ylabel("fraction of runs above τ")
    panel.legend(fontsize=7)
    panel.grid(alpha=0.3)


def profile_matrices(summary: dict[str, Any], references: dict[str, tuple[float, float]]) -> dict[str, np.ndarray]:
    games = summary["aggregate_games"]
    matrices = {"ours": np.array([list(summary["games"][game]["human_normalised"].values()) for game in games]).T}
    if "published_runs" in summary:
        _, runs = published_scores(games)
        scale = np.array([references[game] for game in games])
        matrices.update({name: (raw - scale[:, 0]) / (scale[:, 1] - scale[:, 0]) for name, raw in runs.items()})
    return matrices


def iqm_curve(
    results: dict[str, dict[int, list[tuple[int, float, float]]]],
    games: list[str],
    references: dict[str, tuple[float, float]],
    samples: int = 500,
) -> tuple[list[int], list[float], list[float], list[float]]:
    """The IQM at each evaluation every run of ``games`` has reached at the same step, with its interval
    (every game with as many runs)."""
    reached = min(len(evaluations) for game in games for evaluations in results[game].values())
    steps, values, lows, highs = [], [], [], []
    for index in range(reached):
        if len({evaluations[index][0] for game in games for evaluations in results[game].values()}) > 1:
            break  # evaluated on different schedules: no common step from here on
        matrix = np.array(
            [
                [(evaluations[index][1] - references[game][0]) / (references[game][1] - references[game][0])
                 for evaluations in results[game].values()]
                for game in games
            ]
        ).T  # fmt: skip
        points, intervals = interval_estimates({"iqm": matrix}, metrics.aggregate_iqm, samples)
        steps.append(next(iter(results[games[0]].values()))[index][0])  # the same for every run
        low, high = np.ravel(intervals["iqm"])
        values.append(float(points["iqm"]))
        lows.append(float(low))
        highs.append(float(high))
    return steps, values, lows, highs


def report(out: Path, samples: int = BOOTSTRAP_SAMPLES) -> str:
    """Write SWEEP/report.md, report.json and aggregate.png; return the Markdown."""
    summary = summarize(out, samples)
    text = markdown(summary)
    try:  # the figure first: a failing write leaves the report of before whole, its three files together
        plot.save(figure(out, summary), out / "aggregate.png")
    except plot.PlotError as error:
        raise SweepError(str(error)) from None
    write_atomically(out / "report.md", lambda path: Path(path).write_text(text + "\n"))
    write_atomically(out / "report.json", lambda path: Path(path).write_text(json.dumps(summary, indent=2) + "\n"))
    return f"{text}\n\nWritten: {out / 'report.md'}, {out / 'report.json'}, {out / 'aggregate.png'}"


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(
        prog=program("sweep.py"),
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    parser.add_argument("--envs", nargs="+", help="games, or a set of them: atari5, atari10, atari100k")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--out", help="the sweep folder: one run folder per game and seed")
    parser.add_argument("--ray-address", help="send the runs to this running Ray cluster")
    parser.add_argument("--report", metavar="SWEEP", help="only write and print the report of this sweep")
    parser.add_argument(
        "--compare",
        nargs=2,
        metavar=("SWEEP", "OTHER"),
        help="only write and print SWEEP's finished runs beside OTHER's (SWEEP/versus-OTHER.md): an ablation",
    )
    arguments, passed = parser.parse_known_args(argv)
    if arguments.report is None and arguments.compare is None:
        if not arguments.envs or not arguments.out:
            parser.error("--envs and --out are needed to run a sweep (or --report SWEEP for its report)")
        if any(seed < 0 for seed in arguments.seeds) or len(set(arguments.seeds)) != len(arguments.seeds):
            parser.error(f"--seeds must be different whole numbers of 0 or more, got {arguments.seeds}")
    return arguments, passed


def main(argv: list[str] | None = None) -> int:
    arguments, passed = parse_args(argv)
    # Ctrl-C must raise KeyboardInterrupt even where a shell started this with SIGINT ignored, and
    # SIGTERM (a scheduler's stop, timeout's) does the same: the runs save their checkpoints.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        if arguments.report is not None:
            print(report(Path(arguments.report)), flush=True)
            return 0
        if arguments.compare is not None:
            print(write_comparison(*map(Path, arguments.compare)), flush=True)
            return 0
        return sweep(arguments, passed)
    except SweepError as error:
        print(f"{program('sweep.py')}: error: {error}", file=sys.stderr, flush=True)
        return 2
    except RayStartError as error:
        print(f"{program('sweep.py')}: error: {error}", file=sys.stderr, flush=True)
        return 1
    except (OSError, RunFolderError) as error:
        print(f"{program('sweep.py')}: error: {error}", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
