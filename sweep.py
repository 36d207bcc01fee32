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
import ctypes
import io
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from dqn_atari.utils_apex import RayStartError
from dqn_atari.utils_config import (
    available_cpus,
    available_memory,
    learning_config,
    learning_defaults,
    memory_bytes,
    options_of,
    parse_config,
    program,
    saved_options,
    settings_differences,
)
from dqn_atari.utils_config import build_parser as main_parser
from dqn_atari.utils_env import game_name, is_atari, resolve_env_id, saved_env_id
from dqn_atari.utils_results import BOOTSTRAP_SAMPLES, ReportError, collect, report, write_comparison
from dqn_atari.utils_run import (
    EPISODES_FILE,
    CheckpointError,
    RunFolderError,
    RunLock,
    RunLogError,
    load_memory,
    load_newest_checkpoint,
    memory_of,
    read_config,
    read_episodes,
    read_rewards,
    refuse_links,
)

PROJECT_DIR = Path(__file__).resolve().parent
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
                env_id = resolve_env_id(game)
            except ValueError as error:
                raise SweepError(f"--envs: {error}") from None
            if not is_atari(env_id):  # the runs' folders and the report are named and scored by Atari game
                raise SweepError(f"--envs: a sweep plays Atari games; {game} is another gymnasium environment")
            resolved = game_name(env_id)
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
    asked = vars(options_of(["--env", run.game, "--seed", str(run.seed), *passed]))
    ran = saved_options(saved)
    # The saved env is named, never imported: a folder could ship the module its 'module:Class' names.
    asked["env"], ran["env"] = saved_env_id(asked["env"]), saved_env_id(str(ran["env"]))
    return settings_differences(learning_config(ran), learning_config(asked))


def resume_note(run: Run) -> str:
    """How main.py will go on with the interrupted ``run``: exactly (its replay memory was saved
    with its newest checkpoint) or not, and why."""
    _, checkpoint, _ = load_newest_checkpoint(run.folder)
    step = checkpoint["run"]["step"]
    defaults = learning_defaults()
    config = {**defaults, **learning_config(checkpoint["config"])}
    memory, reason = load_memory(memory_of(run.folder, step), step, config, defaults)
    if memory is not None:
        return f"resumes at step {step:,} as the same run (its replay memory was saved with the checkpoint)"
    reason = reason or "its replay memory was not saved (--save-memory)"
    return f"resumes at step {step:,}, no longer exactly the run it was: {reason}, so main.py refills it"


def main_argv(run: Run, state: str, passed: list[str], out: Path) -> list[str]:
    """main.py's command line for ``run``: a new run, or a resume of an interrupted one. Its folder is
    named as ``out`` (the sweep's --out) names it: main.py runs in the sweep's working folder, and a
    relative --out keeps the path of this machine out of the run's config.json."""
    folder = str(out / run.name)
    if state == "interrupted":  # main.py takes the same flags again: each equals its saved value
        return ["--resume", folder, *passed]
    return ["--env", run.game, "--seed", str(run.seed), "--out", folder, *passed]


def run_main(argv: list[str], log: Path, stop_file: Path, cwd: Path) -> int:
    """``python main.py argv`` in the folder ``cwd``, with its output in ``log``. Ctrl-C, or ``stop_file`` appearing (how
    the sweep stops runs on other machines: their folders are shared), is passed on to it as
    SIGINT, so it saves a checkpoint before it stops. A run still queued when the sweep stops
    never starts (Ray would otherwise start it as the stopped runs free their slots)."""
    if stop_file.exists():
        return 130  # stopped, like a run stopped by Ctrl-C
    log.parent.mkdir(parents=True, exist_ok=True)
    # O_NOFOLLOW: never append to a file elsewhere through a link planted at the log's name
    descriptor = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    with open(descriptor, "a") as output:
        process = subprocess.Popen(
            [sys.executable, str(PROJECT_DIR / "main.py"), *argv],
            stdout=output,
            stderr=subprocess.STDOUT,
            cwd=cwd,
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

    def __init__(self, address: str | None, threads: int, use_ray: bool, stop_file: Path, cwd: Path) -> None:
        self.stop_file = stop_file
        self.cwd = cwd  # where each main.py runs: the sweep's working folder, which its relative paths start from
        stop_file.unlink(missing_ok=True)  # left by an interrupted sweep
        self.ray: Any = None
        self.started_ray = False
        if not use_ray:
            return
        import ray

        from dqn_atari.utils_apex import start_ray

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
        submitted = time.time()
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as local:
            if self.ray is None:
                pending = {
                    local.submit(run_main, argv, run.folder / LOG_FILE, self.stop_file, self.cwd): run
                    for run, argv in jobs
                }
            else:
                pending = {
                    self.remote.remote(argv, run.folder / LOG_FILE, self.stop_file, self.cwd): run for run, argv in jobs
                }
            try:
                while pending:
                    for handle in self._ended(list(pending)):
                        on_done(pending.pop(handle), self._exit_status(handle))
                    bar.set_postfix_str(progress_text(list(pending.values()), submitted), refresh=True)
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


def progress_text(pending: list[Run], since: float) -> str:
    """The step of up to four runs under way: those whose log was written since ``since`` (a run
    still queued, for a free core or a free slot in the cluster, has not)."""
    started = [run for run in pending if log_written_since(run, since)]
    return ", ".join(f"{run.name} {last_step(run):,}" for run in started[:4])


def log_written_since(run: Run, since: float) -> bool:
    try:
        return (run.folder / LOG_FILE).stat().st_mtime >= since
    except OSError:  # not started yet
        return False


def sweep(arguments: argparse.Namespace, passed: list[str]) -> int:
    out = Path(arguments.out).resolve()  # for the sweep's own files: a Ray task may run in another folder
    games = expand_envs(arguments.envs)
    check_passed(passed, games[0])
    runs = plan(out, games, arguments.seeds)
    for folder in [out, *(run.folder for run in runs)]:  # before a run starts: each main.py checks only its own
        refuse_links(folder)
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
            use_ray = import_ray_or_note(arguments.ray_address)  # seconds: a Ctrl-C meanwhile ends as any other
            executor = Executor(arguments.ray_address, threads, use_ray, stop_file, Path.cwd())
            todo = [run for run in runs if states[run] != "done"]
            for run in todo:
                if states[run] == "interrupted":
                    tqdm.write(f"{run.name}: {resume_note(run)}")
            while todo:
                retry: list[Run] = []
                jobs = [(run, main_argv(run, run_state(run, steps), passed, Path(arguments.out))) for run in todo]
                executor.run_all(jobs, on_done, bar)
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
        tqdm.write("Note: Ray is not installed (pip install 'ray>=2.40'): runs go one after another")
        return False
    return True


def last_score(run: Run) -> str:
    rows = read_rewards(run.folder / "rewards.txt")
    return f"last evaluation {rows[-1][1][1]:.1f} at step {rows[-1][1][0]:,}" if rows else "no evaluation"


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
    parser.add_argument(
        "--samples",
        type=int,
        help=f"with --report or --compare: bootstrap draws of the intervals and the null check (default: "
        f"{BOOTSTRAP_SAMPLES:,}, the committed reports'; fewer for a quick look)",
    )
    arguments, passed = parser.parse_known_args(argv)
    if arguments.samples is not None and arguments.samples < 1:
        parser.error(f"--samples must be a whole number of 1 or more, got {arguments.samples}")
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
            print(report(Path(arguments.report), arguments.samples), flush=True)
            return 0
        if arguments.compare is not None:
            print(write_comparison(*map(Path, arguments.compare), arguments.samples), flush=True)
            return 0
        return sweep(arguments, passed)
    except (SweepError, ReportError) as error:
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
