import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

# The spin count main.py sets in a training process (see there), before torch loads OpenMP.
if not {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT"} & os.environ.keys():
    os.environ["GOMP_SPINCOUNT"] = "1000"

# isort: off
from dqn_atari import main  # noqa: E402
import torch  # noqa: E402
from dqn_atari import utils_config  # noqa: E402
# isort: on

# `make test` runs the suite in one process per CPU (pytest-xdist): each is pinned to a CPU of its
# own, so that its torch and the runs it starts (--threads auto follows the affinity mask) take one
# thread and no two processes' threads fight over a core, which slows both several times over.
ALL_CPUS = frozenset(os.sched_getaffinity(0))
WORKER = os.environ.get("PYTEST_XDIST_WORKER")  # gw0, gw1, ... in a worker; unset in a plain pytest
if WORKER is not None:
    os.sched_setaffinity(0, {sorted(ALL_CPUS)[int(WORKER.removeprefix("gw")) % len(ALL_CPUS)]})
SUITE_THREADS = 1 if WORKER is not None else 2
utils_config.use_threads(SUITE_THREADS)


@pytest.fixture(autouse=True)
def suite_threads():
    """A test that runs main.main with --threads N leaves torch and numba with N threads: the next
    test starts with the suite's count again."""
    yield
    if torch.get_num_threads() != SUITE_THREADS:
        utils_config.use_threads(SUITE_THREADS)


@contextlib.contextmanager
def on_every_cpu():
    """Every CPU the suite started with, for what runs inside; the worker's own CPU again after it."""
    pinned = os.sched_getaffinity(0)
    os.sched_setaffinity(0, ALL_CPUS)
    try:
        yield
    finally:
        os.sched_setaffinity(0, pinned)


@pytest.fixture
def every_cpu():
    """For a test that asks for more threads than a pinned worker has CPUs."""
    with on_every_cpu():
        yield


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which reads the groups
def pytest_collection_modifyitems(config, items):
    """Tests that share a Ray run in one worker, one after another; tests marked cuda need a CUDA device:
    skipped where none is visible (CI has none)."""
    for item in items:  # (with --dist loadgroup) so that only one Ray is started
        if "ray_cluster" in item.fixturenames:
            item.add_marker(pytest.mark.xdist_group("ray"))
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="no CUDA device is visible")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def ray_cluster():
    """One local Ray for the tests that need it, one after another (starting one takes seconds); main.py, finding it
    started, uses it and leaves it running. It stops after the last of them: idle, its processes take a core's 8%."""
    ray = pytest.importorskip("ray")
    from dqn_atari import utils_apex

    if not ray.is_initialized():
        with on_every_cpu():  # Ray's processes, started now, inherit every CPU
            utils_apex.start_ray(None, cpus=2)
    yield


def pytest_runtest_teardown(item, nextitem):
    """Ray stopped after the last test of a row that uses it (with --dist loadgroup they run in a row)."""
    if "ray_cluster" in item.fixturenames and (nextitem is None or "ray_cluster" not in nextitem.fixturenames):
        import ray

        ray.shutdown()


def run_in_process(capsys, *args: str) -> subprocess.CompletedProcess:
    """``main.main(args)`` in this process, its output and exit status as a finished ``python main.py args`` gives
    them: for a run whose test is not about the program's start (a fresh interpreter takes seconds to import torch)."""
    capsys.readouterr()
    code = main.main(list(args))
    captured = capsys.readouterr()
    return subprocess.CompletedProcess(["main.py", *args], code, captured.out, captured.err)
