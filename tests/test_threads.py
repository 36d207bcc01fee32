"""The thread budget: --threads N runs torch with N threads, auto follows the CPUs the process may use."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ALL_CPUS

from dqn_atari import main, utils_config

ROOT = Path(__file__).resolve().parent.parent
TINY = [
    "--env", "Breakout", "--learning-starts", "100", "--memory-size", "1000", "--eval-episodes", "1",
    "--max-episode-frames", "2000", "--steps", "150", "--eval-every", "1000",
]  # fmt: skip


def started_threads(tmp_path: Path, *flags: str, cpus: set[int] | None = None) -> str:
    """The start line of a short training run in a fresh process, optionally pinned to ``cpus``."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "main.py"), *TINY, "--out", str(tmp_path / "run"), *flags],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
    )
    assert done.returncode == 0, done.stderr
    return next(line for line in done.stdout.splitlines() if line.startswith("Run folder:"))


def test_threads_one_runs_torch_with_one_thread(tmp_path):
    assert started_threads(tmp_path, "--threads", "1").endswith(", 1 CPU threads)")


@pytest.mark.slow
@pytest.mark.skipif(len(ALL_CPUS) < 2, reason="needs 2 CPUs to restrict to 1")
def test_auto_follows_the_affinity_mask(tmp_path):
    # The CPUs the suite started with: a worker of `make test` is itself pinned to one of them.
    assert started_threads(tmp_path / "all", cpus=set(ALL_CPUS)).endswith(f", {len(ALL_CPUS)} CPU threads)")
    assert started_threads(tmp_path / "one", cpus={min(ALL_CPUS)}).endswith(", 1 CPU threads)")


def test_available_cpus_honours_a_cgroup_quota(monkeypatch):
    cpus = len(os.sched_getaffinity(0))
    monkeypatch.setattr(utils_config, "cgroup_cpu_quota", lambda: None)
    assert utils_config.available_cpus() == cpus
    monkeypatch.setattr(utils_config, "cgroup_cpu_quota", lambda: 0.5)  # half a CPU still needs one thread
    assert utils_config.available_cpus() == 1
    monkeypatch.setattr(utils_config, "cgroup_cpu_quota", lambda: 64.0)  # a quota above the mask changes nothing
    assert utils_config.available_cpus() == cpus


@pytest.mark.parametrize("value", ["0", "-2", "two", "1.5"])
def test_bad_thread_counts_are_one_line(value, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main.main(["--threads", value])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error == f"main.py: error: argument --threads: must be auto or a whole number of 1 or more, got {value!r}"


def test_threads_may_change_on_resume(tmp_path, every_cpu):
    run = tmp_path / "run"
    assert main.main([*TINY, "--threads", "2", "--out", str(run)]) == 0
    args, _ = utils_config.parse_config(["--resume", str(run), "--steps", "200", "--threads", "1"])
    assert args.threads == 1
