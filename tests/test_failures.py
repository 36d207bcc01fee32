"""What happens when things go wrong: bad flags, divergence, damaged run folders, two processes on
one folder, a bad saved memory, a failing disk and a second Ctrl-C. Each ends in one line (or a
correct run) and leaves every earlier file as it was."""

import dataclasses
import importlib.util
import io
import itertools
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import run_in_process

from dqn_atari import main, sweep, utils_config, utils_drl, utils_run
from dqn_atari.utils_run import (
    LOCK_FILE,
    MEMORY_FILE,
    RunFolderError,
    RunLock,
    RunLogError,
    WriteError,
    load_checkpoint,
    load_memory,
    load_newest_checkpoint,
    memory_of,
    read_config,
    read_episodes,
    read_rewards,
    reconcile_rewards,
    save_checkpoint,
    save_config,
    save_memory,
    start_log,
    write_atomically,
)

ROOT = Path(__file__).resolve().parent.parent
TINY = [
    "--env", "Breakout", "--learning-starts", "100", "--memory-size", "1000", "--eval-episodes", "1",
    "--max-episode-frames", "2000", "--target-every", "50",
]  # fmt: skip


def popen_main(*args: str, limit_file_size: int | None = None, merged: bool = False) -> subprocess.Popen:
    """``python main.py args`` with its output piped (``merged``: stderr into stdout's pipe, as
    ``2>&1 |``); optionally unable to write files larger than ``limit_file_size`` bytes, as on a
    full disk."""
    prelude = "import runpy, sys\n"
    if limit_file_size:
        prelude += (
            "import resource, signal\nsignal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
            f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit_file_size}, {limit_file_size}))\n"
        )
    prelude += f"sys.argv = ['main.py', *{list(args)!r}]\nrunpy.run_path('main.py', run_name='__main__')\n"
    return subprocess.Popen(
        [sys.executable, "-c", prelude],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if merged else subprocess.PIPE,
        text=True,
    )


def run_main(*args: str, limit_file_size: int | None = None) -> subprocess.CompletedProcess:
    process = popen_main(*args, limit_file_size=limit_file_size)
    stdout, stderr = process.communicate(timeout=300)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def wait_until_training(process: subprocess.Popen, run: Path, games: int = 2, seconds: float = 240) -> None:
    """Until ``run``'s episodes.csv lists ``games`` training games, the process still running."""
    deadline = time.monotonic() + seconds
    while len(games_logged(run)) < games and time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        time.sleep(0.2)


def games_logged(run: Path) -> list[str]:
    try:
        return (run / "episodes.csv").read_text().splitlines()[1:]
    except FileNotFoundError:
        return []


def error_line(capsys, argv: list[str]) -> str:
    """The one line that main.py's argument checks print for ``argv``, with exit status 2."""
    with pytest.raises(SystemExit) as exit_info:
        main.main(argv)
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines  # the line alone, not argparse's usage block before it
    return lines[0]


def files_of(run: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in run.iterdir() if p.is_file() and p.name != LOCK_FILE}


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--seed", "-1"], "--seed must be 0 or more, got -1"),
        (["--lr", "0"], "--lr must be positive and finite"),
        (["--lr", "nan"], "--lr must be positive and finite, got nan"),
        (["--lr", "inf"], "--lr must be positive and finite, got inf"),
        (["--adam-eps", "0"], "--adam-eps must be positive and finite"),
        (["--gamma", "nan"], "--gamma must be within [0, 1], got nan"),
        (["--gamma", "1.01"], "--gamma must be within [0, 1]"),
        (["--grad-clip", "0"], "--grad-clip must be positive (inf turns clipping off)"),
        (["--grad-clip", "nan"], "--grad-clip must be positive"),
        (["--eps-decay-steps", "-5"], "--eps-decay-steps must be 0 or more"),
        (["--alpha", "nan"], "--alpha must be 0 or more and finite"),
        (["--priority-eps", "inf"], "--priority-eps must be positive and finite"),
        (["--beta0", "-0.1"], "--beta0 must be within [0, 1]"),
        (["--max-episode-frames", "40"], "--max-episode-frames must be a multiple of 4 (the frame skip) from 100"),
        (["--max-episode-frames", "1001"], "got 1001"),
        (["--memory-size", "5", "--batch-size", "2", "--learning-starts", "4"], "--memory-size must exceed 5"),
        (["--memory-size", str(10**12)], "GiB of RAM, "),
        (["--actors", "2", "--chunk-steps", "1000000000"], "--chunk-steps 1000000000 exceeds an actor's stream"),
        (["--n-step", "400", "--learning-starts", "300"], "--n-step 400 must be below --learning-starts 300"),
        (["--n-step", "100", "--max-episode-frames", "400"], "--n-step 100 must be below the longest game"),
        (["--device", "gpu0"], "--device gpu0: not a device; use auto, cpu, cuda, cuda:N or mps"),
        (["--device", "meta"], "--device meta: only cpu, cuda, cuda:N and mps are supported"),
    ],
)
def test_every_flag_is_checked_before_anything_is_created(argv, message, capsys, tmp_path):
    out = tmp_path / "run"
    assert message in error_line(capsys, [*argv, "--out", str(out)])
    assert not out.exists()


def test_device_names_what_this_torch_build_lacks(capsys, monkeypatch):
    monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: False)
    line = error_line(capsys, ["--device", "cuda"])
    assert f"--device cuda: this torch build has no CUDA support (torch {torch.__version__}); use --device cpu" in line
    monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert "this machine has 1 CUDA device(s), cuda:0 to cuda:0" in error_line(capsys, ["--device", "cuda:3"])
    monkeypatch.setattr(torch.backends.mps, "is_built", lambda: False)
    assert "this torch build has no MPS support" in error_line(capsys, ["--device", "mps"])


@pytest.fixture(scope="module")
def small_run(tmp_path_factory) -> Path:
    """A finished run of 240 steps with evaluations at 0, 120 and 240 (model_000..002)."""
    run = tmp_path_factory.mktemp("small") / "run"
    assert main.main([*TINY, "--steps", "240", "--eval-every", "120", "--out", str(run)]) == 0
    return run


def copy_run(source: Path, target: Path) -> Path:
    target.mkdir()
    for path in source.iterdir():
        if path.is_file() and path.name != LOCK_FILE:
            (target / path.name).write_bytes(path.read_bytes())
    return target


def test_a_run_records_its_versions_and_a_resume_on_others_says_so(small_run, tmp_path, capsys):
    """config.json and every checkpoint (a released agent's too) hold the code's commit, Python, torch and its build,
    numpy, gymnasium, ale-py, numba, the CPU and the threads; the options read back leave them out; a resume on other
    versions says so in one note (a resume is exact only on the same ones), on the same ones says nothing."""
    import platform

    from dqn_atari import dqn

    versions = json.loads((small_run / "config.json").read_text())["versions"]
    assert sorted(versions) == sorted([
        "code", "python", "torch", "torch_build", "numpy", "gymnasium", "ale-py", "numba", "cpu", "threads",
    ])  # fmt: skip
    assert (versions["python"], versions["torch"], versions["numpy"]) == (
        platform.python_version(), torch.__version__, np.__version__,
    )  # fmt: skip
    assert versions["torch_build"] == (f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU")
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists() and "cpu family" in cpuinfo.read_text():  # x86 Linux: one name covers several processors
        assert re.fullmatch(r".+ \(family \d+, model \d+, stepping \d+, cache \d+ KB\)", versions["cpu"])
    checkpoint = utils_run.load_checkpoint(small_run / "model_002.pt")
    assert versions["code"].startswith(("commit ", "dqn-atari ")) and checkpoint["versions"] == versions
    assert versions["threads"] == str(checkpoint["run"]["threads"])  # the learner's, as the run counted them
    assert "versions" not in utils_run.read_config(small_run)
    dqn.load_agent(small_run).save(tmp_path / "agent.pt")
    assert utils_run.load_checkpoint(tmp_path / "agent.pt")["versions"] == versions
    capsys.readouterr()
    assert main.main(["--resume", str(copy_run(small_run, tmp_path / "same")), "--steps", "300"]) == 0
    assert "other versions" not in capsys.readouterr().out
    run = copy_run(small_run, tmp_path / "other")
    checkpoint = utils_run.load_checkpoint(run / "model_002.pt")
    checkpoint["versions"] = {**versions, "torch": "2.0.0+cpu", "numpy": "1.26.4", "threads": "64"}  # its own note
    utils_run.save_checkpoint(run / "model_002.pt", {k: v for k, v in checkpoint.items() if k != "format"})
    assert main.main(["--resume", str(run), "--steps", "300"]) == 0
    assert [line for line in capsys.readouterr().out.splitlines() if "other versions" in line] == [
        f"Note: the checkpoint was saved with other versions (torch 2.0.0+cpu, now {torch.__version__}; numpy 1.26.4, "
        f"now {np.__version__}): the run goes on, but a resume is exact only on the same ones"
    ]


def test_a_copy_made_by_git_archive_records_its_commit(tmp_path):
    """Long runs start from `git archive`'s copy of one commit, outside any checkout: its utils_run.py holds that
    commit (.gitattributes), which code_version records."""
    root = Path(utils_run.__file__).resolve().parent
    if not (root / ".git").exists():
        pytest.skip("not a git checkout")

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout

    # The work tree as a commit of its own (none is made on a clean one), so that the code under test is this one.
    commit = (git("stash", "create") or git("rev-parse", "HEAD")).strip()
    archive = subprocess.run(
        ["git", "-C", str(root), "archive", commit, "utils_run.py"], capture_output=True, check=True
    )
    subprocess.run(["tar", "x", "-C", str(tmp_path)], input=archive.stdout, check=True)
    spec = importlib.util.spec_from_file_location("archived_utils_run", tmp_path / "utils_run.py")
    archived = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(archived)
    assert archived.code_version() == f"commit {commit[:12]} (git archive)"
    assert utils_run.code_version().startswith(("commit ", "dqn-atari ")) and "archive" not in utils_run.code_version()


def test_resume_and_evaluate_refuse_flags_that_contradict_the_run(small_run, capsys, tmp_path):
    line = error_line(capsys, ["--resume", str(small_run), "--steps", "300", "--out", str(tmp_path / "elsewhere")])
    assert f"--out {tmp_path / 'elsewhere'} is not --resume {small_run}" in line
    line = error_line(capsys, ["--evaluate", str(small_run / "model_002.pt"), "--env", "Pong"])
    assert "--env does not apply to --evaluate (the run used 'ALE/Breakout-v5')" in line
    assert "--gamma does not apply" in error_line(
        capsys, ["--evaluate", str(small_run / "model_002.pt"), "--gamma", "0.5"]
    )
    line = error_line(capsys, ["--evaluate", str(small_run / "model_002.pt"), "--device", "gpu0"])
    assert "--device gpu0: not a device" in line
    # A flag equal to the checkpoint's is no contradiction; the game played is named.
    argv = ["--evaluate", str(small_run / "model_002.pt"), "--env", "breakout", "--eval-episodes", "1"]
    assert main.main(argv) == 0
    assert f"Playing ALE/Breakout-v5 with {small_run / 'model_002.pt'} (trained 240 steps): 1 games" in (
        capsys.readouterr().out
    )


def test_a_diverging_run_stops_with_one_line_and_keeps_its_last_good_checkpoint(tmp_path):
    run = tmp_path / "run"
    # An absurd learning rate without clipping overflows the weights in a few updates.
    done = run_main(
        *TINY, "--steps", "400", "--eval-every", "300", "--lr", "1e30", "--grad-clip", "inf", "--out", str(run)
    )
    assert done.returncode == 1
    error = done.stderr.strip().splitlines()[-1]
    assert error.startswith("main.py: error: training diverged: the loss became ")
    assert f"the last checkpoint is {run / 'model_000.pt'} (step 0). Try a lower --lr, or a finite --grad-clip" in error
    assert "Traceback" not in done.stderr
    assert sorted(p.name for p in run.glob("model_*")) == ["model_000.pt"]
    assert len((run / "rewards.txt").read_text().splitlines()) == 1


def test_weights_that_are_not_finite_are_never_saved(tmp_path, monkeypatch, capsys):
    learn = main.Agent.learn
    calls = []

    def poisoned(agent, batch):
        result = learn(agent, batch)
        calls.append(1)
        if len(calls) == 5:  # the update of step 120, just before its evaluation's checkpoint
            next(agent.online.parameters()).data.fill_(float("nan"))
        return result

    monkeypatch.setattr(main.Agent, "learn", poisoned)
    run = tmp_path / "run"
    assert main.main([*TINY, "--steps", "240", "--eval-every", "120", "--out", str(run)]) == 1
    assert "training diverged: the weights or values are no longer finite at step 120" in capsys.readouterr().err
    assert sorted(p.name for p in run.glob("model_*")) == ["model_000.pt"]
    assert len((run / "rewards.txt").read_text().splitlines()) == 1


def line(index: int, step: int) -> str:
    return f"{index:3d} {step:8d} 1.0 0.0 1.0 1.0 1 5"


def test_reconcile_rewards_repairs_what_checkpoints_can_restore(tmp_path):
    path = tmp_path / "rewards.txt"
    saved = {0: line(0, 0) + "\n", 1: line(1, 100) + "\n", 2: line(2, 200) + "\n"}
    # A missing file: every line comes back from the checkpoints.
    assert reconcile_rewards(tmp_path, 3, saved.get) == [f"{path}: restored evaluations 0, 1, 2 from their checkpoints"]
    assert path.read_text() == "".join(saved.values())
    # A missing final newline is added, never glued onto.
    path.write_text(line(0, 0) + "\n" + line(1, 100))
    assert reconcile_rewards(tmp_path, 2, saved.get) == []
    assert path.read_text() == saved[0] + saved[1]
    # A missing middle line comes back; one no checkpoint holds is reported lost.
    path.write_text(saved[0] + saved[2])
    notes = reconcile_rewards(tmp_path, 4, saved.get)
    assert notes == [
        f"{path}: restored evaluations 1 from their checkpoints",
        f"{path}: evaluations 3 are lost (no file or checkpoint holds them)",
    ]
    assert path.read_text() == saved[0] + saved[1] + saved[2]
    # Lines past the checkpoint go, after the old file is kept.
    notes = reconcile_rewards(tmp_path, 1, saved.get)
    assert len(notes) == 1 and "dropped evaluations 1..2, which came after the checkpoint" in notes[0]
    backup = next(tmp_path.glob("rewards.txt.bak-*"))
    assert backup.read_text() == saved[0] + saved[1] + saved[2] and path.read_text() == saved[0]


@pytest.mark.parametrize(
    "text,number,message",
    [
        ("  0 0 1.0 0.0 1.0 1.0 1 5\nhello\n", 2, "expected 3 (index, step, score) or 8"),
        ("  0 0 1.0 0.0 1.0 1.0 1 5\n  1 x 1.0 0.0 1.0 1.0 1 5\n", 2, "not a number"),
        ("  0 0 1.0 0.0 1.0 1.0 1 5\n  0 0 1.0 0.0 1.0 1.0 1 5\n", 2, "evaluation 0 after evaluation 0"),
        ("  0 0 1.0 0.0 1.0 1.0 1 5 9\n", 1, "expected 3 (index, step, score) or 8"),
    ],
)
def test_reconcile_rewards_refuses_garbage_naming_path_and_line(tmp_path, text, number, message):
    path = tmp_path / "rewards.txt"
    path.write_text(text)
    with pytest.raises(RunLogError, match=re.escape(f"{path}:{number}: {message}")):
        reconcile_rewards(tmp_path, 2, lambda index: None)
    assert path.read_text() == text


def test_start_episodes_refuses_garbage_and_repairs_a_missing_newline(tmp_path):
    path = tmp_path / "episodes.csv"
    header = "step,score,length,epsilon,seconds\n"
    path.write_text(header + "10,1,5,0.5,1.0\n20,2,6,0.5,2.0")
    start_log(path, 30)
    assert path.read_text() == header + "10,1,5,0.5,1.0\n20,2,6,0.5,2.0\n"
    path.write_text(header + "10,1,5,0.5,1.0\nten,1,5,0.5,2.0\n")
    with pytest.raises(RunLogError, match=f"{path}:3: expected 5 finite numbers"):
        start_log(path, 30)


@pytest.mark.slow
def test_resume_from_an_older_checkpoint_restores_and_truncates_rewards(small_run, tmp_path, capsys):
    run = copy_run(small_run, tmp_path / "run")
    full = (run / "rewards.txt").read_text().splitlines(keepends=True)
    (run / "model_002.pt").write_bytes(b"torn")  # the newest checkpoint is unreadable
    (run / "rewards.txt").write_text(full[1] + full[2])  # and line 0 is gone
    resumed = run_in_process(capsys, "--resume", str(run), "--steps", "300")
    assert resumed.returncode == 0, resumed.stderr
    assert f"Note: skipped {run / 'model_002.pt'} is not a readable checkpoint" in resumed.stdout
    assert "restored evaluations 0 from their checkpoints" in resumed.stdout
    assert "dropped evaluations 2..2, which came after the checkpoint" in resumed.stdout
    lines = (run / "rewards.txt").read_text().splitlines(keepends=True)
    assert lines[:2] == full[:2] and [int(x.split()[0]) for x in lines] == [0, 1, 2, 3]
    assert [int(x.split()[1]) for x in lines[2:]] == [240, 300]
    assert next(run.glob("rewards.txt.bak-*")).read_text() == full[1] + full[2]


def test_garbage_in_rewards_stops_a_resume_with_path_and_line(small_run, tmp_path, capsys):
    run = copy_run(small_run, tmp_path / "run")
    (run / "rewards.txt").write_text((run / "rewards.txt").read_text() + "garbage\n")
    before = files_of(run)
    assert main.main(["--resume", str(run), "--steps", "300"]) == 1
    assert f"main.py: error: {run / 'rewards.txt'}:4: expected 3 (index, step, score) or 8" in capsys.readouterr().err
    assert files_of(run) == before


def test_one_process_per_run_folder(small_run, tmp_path, capsys):
    run = copy_run(small_run, tmp_path / "run")
    before = files_of(run)
    with RunLock(run):
        assert main.main(["--resume", str(run), "--steps", "300"]) == 1
        assert f"main.py: error: {run} is in use by process {os.getpid()}" in capsys.readouterr().err
        with pytest.raises(RunFolderError, match="in use by process"):
            RunLock(run).__enter__()
    assert files_of(run) == before
    # The lock file of a process that died (here: a made-up one) does not block.
    (run / LOCK_FILE).write_text("999999\n")
    assert main.main(["--resume", str(run), "--steps", "260"]) == 0


def test_a_killed_process_never_blocks_its_folder(tmp_path):
    run = tmp_path / "run"
    process = popen_main(*TINY, "--steps", "100000", "--eval-every", "100000", "--out", str(run))
    deadline = time.time() + 120
    while not (run / "model_000.pt").exists() and time.time() < deadline:
        time.sleep(0.2)
    process.kill()
    process.communicate()
    with RunLock(run):
        pass


def saved_memory_run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    assert main.main([*TINY, "--steps", "240", "--eval-every", "120", "--save-memory", "--out", str(run)]) == 0
    return run


@pytest.mark.slow
def test_a_saved_memory_is_used_only_when_it_belongs_to_the_checkpoint(tmp_path, capsys):
    run = saved_memory_run(tmp_path)
    memory = run / MEMORY_FILE
    state = torch.load(memory, weights_only=True)
    assert state["step"] == 240 and state["config"]["memory_size"] == 1000
    capsys.readouterr()

    memory.write_bytes(memory.read_bytes()[:5000])  # truncated
    assert main.main(["--resume", str(run), "--steps", "260", "--save-memory"]) == 0
    out = capsys.readouterr().out
    assert f"Note: {memory} is not readable" in out and "refilling it with" in out

    stale = torch.load(memory, weights_only=True)
    stale["step"] = 100
    torch.save(stale, memory)
    assert main.main(["--resume", str(run), "--steps", "280", "--save-memory"]) == 0
    assert f"{memory} was saved at step 100, not at the checkpoint's step 260" in capsys.readouterr().out

    other = torch.load(memory, weights_only=True)
    other["config"]["gamma"] = 0.5
    torch.save(other, memory)
    assert main.main(["--resume", str(run), "--steps", "300", "--save-memory"]) == 0
    assert f"{memory} belongs to a run with other settings" in capsys.readouterr().out

    empty = torch.load(memory, weights_only=True)
    empty["memory"] = {k: v[:0] if torch.is_tensor(v) else v for k, v in empty["memory"].items()}
    empty["memory"]["sizes"] = empty["memory"]["cursors"] = torch.zeros(1, dtype=torch.int64)
    torch.save(empty, memory)
    assert not load_newest_checkpoint(run)[1]["players"][0]["first"]  # mid-game: an empty memory cannot go on
    assert main.main(["--resume", str(run), "--steps", "320", "--save-memory"]) == 0
    assert f"{memory} is empty, but the checkpoint is in the middle of a game" in capsys.readouterr().out
    assert torch.load(memory, weights_only=True)["step"] == 320

    mistyped = torch.load(memory, weights_only=True)
    mistyped["memory"]["frames"] = "not frames"  # a field of the wrong type: a note and a refill, no traceback
    torch.save(mistyped, memory)
    assert main.main(["--resume", str(run), "--steps", "340", "--save-memory"]) == 0
    assert f"{memory} cannot be used (AttributeError" in capsys.readouterr().out


def test_a_memory_saved_before_an_option_existed_is_used_when_the_option_keeps_its_default(tmp_path, capsys):
    """A run started before --clip-rewards (its config and memory without it) resumes exactly on a
    program that has it: the missing option is its default, which plays as the program did."""
    run = saved_memory_run(tmp_path)
    memory, checkpoint_path = run / MEMORY_FILE, load_newest_checkpoint(run)[0]
    for path, part in ((memory, "config"), (checkpoint_path, "config")):
        saved = torch.load(path, weights_only=True)
        del saved[part]["clip_rewards"]
        torch.save(saved, path)
    capsys.readouterr()
    assert main.main(["--resume", str(run), "--steps", "260", "--save-memory"]) == 0
    assert "refilling" not in capsys.readouterr().out


@pytest.mark.slow
def test_a_crash_between_a_memory_and_its_checkpoint_leaves_a_pair_to_resume_exactly(tmp_path, monkeypatch, capsys):
    """With --save-memory, memory.pt was written before model_NNN.pt: a full disk or a kill between the two
    left the last checkpoint without its memory. Now a crash while the checkpoint is written (the disk
    fails), or after it but before its memory takes the name memory.pt, leaves a checkpoint with its
    own memory, and the resumed run is the uninterrupted one, weight for weight."""
    common = [*TINY, "--steps", "240", "--eval-every", "120", "--save-memory", "--max-episode-frames", "400"]
    assert main.main([*common, "--out", str(tmp_path / "straight")]) == 0
    straight = load_checkpoint(tmp_path / "straight" / "model_002.pt")["agent"]["online"]
    real_save, real_settle = main.save_checkpoint, main.settle_memory

    def disk_fails(path, state):
        if path.name == "model_002.pt":
            raise OSError(28, "No space left on device")
        real_save(path, state)

    def killed_after_checkpoint(run, step):
        if step == 120:
            raise OSError(5, "Input/output error")
        real_settle(run, step)

    for crash in (disk_fails, killed_after_checkpoint):  # either way, model_001.pt (step 120) is the newest
        run = tmp_path / crash.__name__
        with monkeypatch.context() as patch:
            patch.setattr(main, "save_checkpoint" if crash is disk_fails else "settle_memory", crash)
            assert main.main([*common, "--out", str(run)]) == 1
        assert load_newest_checkpoint(run)[0].name == "model_001.pt"
        note = sweep.resume_note(sweep.Run("Breakout", 0, run))
        assert note == "resumes at step 120 as the same run (its replay memory was saved with the checkpoint)"
        capsys.readouterr()
        assert main.main(["--resume", str(run), "--steps", "240"]) == 0
        assert "refilling" not in capsys.readouterr().out
        assert sorted(path.name for path in run.glob("memory*")) == [MEMORY_FILE]  # none left over
        resumed = load_checkpoint(run / "model_002.pt")["agent"]["online"]
        assert all(torch.equal(value, resumed[key]) for key, value in straight.items()), crash.__name__


def stop_during_evaluation(monkeypatch, evaluation: int, signum: int = signal.SIGINT, steps: int = 30) -> None:
    """Ctrl-C (a real SIGINT to this process, or ``signum``) ``steps`` steps into the process's ``evaluation``-th
    evaluation."""
    real, calls = main.evaluate, itertools.count()

    def evaluate(act, *rest, **options):
        if next(calls) != evaluation:
            return real(act, *rest, **options)
        acted = itertools.count()

        def act_then_stop(states, epsilon, rngs):
            if next(acted) == steps:
                os.kill(os.getpid(), signum)
            return act(states, epsilon, rngs)

        return real(act_then_stop, *rest, **options)

    monkeypatch.setattr(main, "evaluate", evaluate)


def scores(run: Path) -> list[list[str]]:
    """rewards.txt without its wall times: index, step and the score columns."""
    return [line.split()[:-1] for line in (run / "rewards.txt").read_text().splitlines()]


@pytest.mark.slow
def test_ctrl_c_during_an_evaluation_writes_no_score_and_a_resume_goes_on_from_its_game(tmp_path, monkeypatch, capsys):
    """Stopped in line 0's evaluation, in one at --eval-every and in the final one, each with two of its games
    done (two at a time): no partial line, the first game's frames kept, and the run finished afterwards is the
    uninterrupted one, line for line and weight for weight, without playing the finished games again."""
    common = [*TINY, "--max-episode-frames", "400", "--eval-episodes", "4", "--eval-envs", "2"]
    common += ["--steps", "300", "--eval-every", "200"]
    common += ["--save-memory"]
    assert main.main([*common, "--out", str(tmp_path / "straight")]) == 0
    straight = load_checkpoint(tmp_path / "straight" / "model_002.pt")
    for evaluation, step in [(0, 0), (1, 200), (2, 300)]:
        run = tmp_path / f"stopped_in_{evaluation}"
        with monkeypatch.context() as patch:  # a game is at most 100 steps (400 frames)
            stop_during_evaluation(patch, evaluation, steps=110)
            assert main.main([*common, "--render", "--out", str(run)]) == 130
        assert not list(run.glob("eval_*.partial")) and (run / f"eval_{evaluation:03d}" / "000000.png").exists()
        written = scores(run) if (run / "rewards.txt").exists() else []
        assert [line[0] for line in written] == [str(i) for i in range(evaluation)]
        progress = load_checkpoint(run / "model_interrupted.pt")["run"]
        finished = progress["evaluation_games"]["scores"]
        assert progress["step"] == step and progress["evaluation_due"] and 1 <= len(finished) < 4
        assert sweep.run_state(sweep.Run("Breakout", 0, run), 300) == "interrupted"
        capsys.readouterr()
        with monkeypatch.context() as patch:
            played = count_games(patch)
            assert main.main(["--resume", str(run), "--steps", "300"]) == 0
        assert f"its evaluation first, {len(finished)} of its 4 games done)" in capsys.readouterr().out
        assert played[0] == 4 - len(finished) + 4 * (2 - evaluation)  # the rest of this evaluation, the later ones
        assert scores(run) == scores(tmp_path / "straight")
        finished = load_checkpoint(run / "model_002.pt")
        assert not finished["run"]["evaluation_due"]
        for key, value in straight["agent"]["online"].items():
            assert torch.equal(value, finished["agent"]["online"][key]), (evaluation, key)


def test_a_stopped_evaluation_resumed_with_fewer_games_than_it_finished_starts_again(tmp_path, monkeypatch, capsys):
    """--eval-episodes may change on resume: an evaluation that had finished more games than the new count plays
    the new count from its first game (the same games: each evaluation's are seeded by the run's seed and its index)."""
    run = tmp_path / "run"
    common = [*TINY, "--max-episode-frames", "400", "--steps", "200", "--eval-every", "200", "--eval-envs", "2"]
    with monkeypatch.context() as patch:  # a game is at most 100 steps (400 frames): 2 games or more are done
        stop_during_evaluation(patch, 1, steps=110)
        assert main.main([*common, "--eval-episodes", "4", "--out", str(run)]) == 130
    assert len(load_checkpoint(run / "model_interrupted.pt")["run"]["evaluation_games"]["scores"]) >= 2
    capsys.readouterr()
    with monkeypatch.context() as patch:
        played = count_games(patch)
        assert main.main(["--resume", str(run), "--steps", "200", "--eval-episodes", "2"]) == 0
    assert "--eval-episodes is now 2: it starts again from its first game" in capsys.readouterr().out
    assert played[0] == 2 and [line[:7] for line in scores(run)][-1][6] == "2"


def test_a_memory_saved_with_options_a_resume_may_now_change_still_belongs(tmp_path):
    """Memories saved before --eval-every could change on resume hold it in their settings: they still load."""
    config = {"memory_size": 1000, "n_step": 1}
    save_memory(tmp_path, {"frames": torch.zeros(2)}, 100, {**config, "eval_every": 50})
    memory = memory_of(tmp_path, 100)
    state, reason = load_memory(memory, 100, config, {})
    assert state is not None and reason == ""
    assert load_memory(memory, 100, {**config, "n_step": 3}, {})[1].endswith("a run with other settings")


def count_games(monkeypatch) -> list[int]:
    """A one-item list counting the games ``main``'s evaluations play from now on."""
    played, real = [0], main.evaluate

    def evaluate(act, games, *rest, **options):
        real_game = games.game

        def game(number):
            played[0] += 1
            return real_game(number)

        games.game = game
        return real(act, games, *rest, **options)

    monkeypatch.setattr(main, "evaluate", evaluate)
    return played


@pytest.mark.slow
def test_ctrl_c_during_the_refill_writes_no_memory_and_the_run_resumes(tmp_path, capsys):
    """The reproduction of the issue: a resume with --save-memory, interrupted while refilling."""
    run = tmp_path / "run"
    common = [*TINY, "--learning-starts", "1000", "--memory-size", "1500"]
    assert main.main([*common, "--steps", "1100", "--eval-every", "1100", "--out", str(run)]) == 0
    process = popen_main("--resume", str(run), "--steps", "1200", "--save-memory")
    seen = ""
    while "refilling replay memory" not in seen:
        seen += process.stderr.read(1)
        assert seen or process.poll() is None
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert "Interrupted at step 1100" in stdout and "Traceback" not in stderr
    assert not (run / MEMORY_FILE).exists() and not (run / "model_interrupted.pt").exists()
    resumed = run_in_process(capsys, "--resume", str(run), "--steps", "1150")
    assert resumed.returncode == 0, resumed.stderr


def stop_twice(monkeypatch, signum: int) -> None:
    """``signum`` 30 steps into the evaluation at step 200, and again while the checkpoint of that stop is written."""
    stop_during_evaluation(monkeypatch, 1, signum)
    real_save = main.save_checkpoint

    def signal_while_saving(path, state):
        if path.name == "model_interrupted.pt":
            os.kill(os.getpid(), signum)
        return real_save(path, state)

    monkeypatch.setattr(main, "save_checkpoint", signal_while_saving)


def test_a_second_sigterm_still_lets_the_checkpoint_be_written(tmp_path, monkeypatch, capsys):
    """A run whose sweep was killed gets SIGTERM from the kernel (its parent died) and again from the
    sweep's reaper: the second must not cost the checkpoint, as a second Ctrl-C does."""
    run = tmp_path / "run"
    stop_twice(monkeypatch, signal.SIGTERM)
    argv = [*TINY, "--max-episode-frames", "400", "--steps", "300", "--eval-every", "200", "--out", str(run)]
    assert main.main(argv) == 130
    assert "Traceback" not in capsys.readouterr().err
    assert load_checkpoint(run / "model_interrupted.pt")["run"]["evaluation_due"]


def test_a_second_ctrl_c_quits_at_once_with_one_line(tmp_path, monkeypatch, capsys):
    """The first Ctrl-C (in the evaluation at step 200) asks for a checkpoint; the second, while it is
    being written, quits at once: one line naming the last whole checkpoint, no partial file."""
    run = tmp_path / "run"
    stop_twice(monkeypatch, signal.SIGINT)
    assert (
        main.main([*TINY, "--max-episode-frames", "400", "--steps", "300", "--eval-every", "200", "--out", str(run)])
        == 130
    )
    stderr = capsys.readouterr().err
    assert "Traceback" not in stderr
    assert (
        stderr.strip().splitlines()[-1]
        == f"Quit without saving; the last checkpoint is {run / 'model_000.pt'} (step 0)"
    )
    assert [path.name for path in run.glob("model_*")] == ["model_000.pt"] and not list(run.glob(".*tmp*"))


def test_a_full_disk_ends_in_one_line_naming_the_file(tmp_path):
    run = tmp_path / "run"
    # Files of at most 1 MB can be written: the lock and the logs, but not a checkpoint.
    done = run_main(*TINY, "--steps", "200", "--eval-every", "100", "--out", str(run), limit_file_size=10**6)
    assert done.returncode == 1
    assert (
        done.stderr.strip().splitlines()[-1] == f"main.py: error: cannot write {run / 'model_000.pt'}: File too large"
    )
    assert not list(run.glob(".*tmp*")) and not list(run.glob("model_*"))


def test_write_errors_name_the_real_file_and_survive_a_failed_cleanup(tmp_path, monkeypatch):
    target = tmp_path / "file.txt"

    def failing(temporary: Path) -> None:
        temporary.write_bytes(b"partial")
        raise OSError(28, "No space left on device")

    real_unlink = Path.unlink
    monkeypatch.setattr(Path, "unlink", lambda self, missing_ok=False: (_ for _ in ()).throw(PermissionError(13, "x")))
    with pytest.raises(WriteError) as error:
        write_atomically(target, failing)
    assert str(error.value) == f"cannot write {target}: No space left on device"
    monkeypatch.setattr(Path, "unlink", real_unlink)


class ShortWrites:
    """A file whose each write moves at most 1,000 bytes, as one write(2) moves at most about 2 GiB on Linux."""

    def __init__(self, file: io.FileIO) -> None:
        self.file = file

    def write(self, data) -> int:
        return self.file.write(bytes(memoryview(data).cast("B")[:1000]))


def test_a_file_written_in_short_writes_is_whole(tmp_path, monkeypatch):
    """torch.save ignores a write's short count: the run's writer writes on until every byte is written (a replay
    memory past 2 GiB was saved cut short before, and read back as truncated)."""
    real = utils_run._RecordingWriter.__init__
    monkeypatch.setattr(utils_run._RecordingWriter, "__init__", lambda self, file: real(self, ShortWrites(file)))
    frames = torch.arange(100_000, dtype=torch.int32)
    save_memory(tmp_path, {"frames": frames}, 7, {"gamma": 0.99})
    state, reason = load_memory(tmp_path / "memory_7.pt", 7, {"gamma": 0.99}, {})
    assert reason == "" and torch.equal(state["frames"], frames)


def test_bad_run_folders_and_leftovers(small_run, tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert f"--out {afile} is a file, not a folder" in error_line(capsys, [*TINY, "--out", str(afile)])
    line = error_line(capsys, [*TINY, "--steps", "200", "--out", str(afile / "run")])
    assert line == f"main.py: error: --out {afile / 'run'}: {afile} is a file, not a folder"

    run = copy_run(small_run, tmp_path / "run")
    (run / ".model_003.tmp.pt").write_bytes(b"half")  # the temporary names of versions before
    (run / ".memory_250.0f3a9c2e.tmp.pt").write_bytes(b"half")  # and of this one
    (run / ".rewards.tmp.txt").symlink_to(tmp_path / "nowhere")  # a dangling link at one: removed, never followed
    (run / "eval_003.partial").mkdir()
    (run / "eval_003.partial" / "000000.png").write_bytes(b"half")
    assert main.main(["--resume", str(run), "--steps", "250"]) == 0
    assert not (run / ".model_003.tmp.pt").exists() and not (run / "eval_003.partial").exists()
    assert not (run / ".memory_250.0f3a9c2e.tmp.pt").exists() and not (run / ".rewards.tmp.txt").is_symlink()
    assert not (tmp_path / "nowhere").exists()

    # --out naming a folder of the user's: their own temporary-looking files are theirs, and stay.
    theirs = tmp_path / "theirs"
    (theirs / "eval_old.partial").mkdir(parents=True)
    mine = (".draft.tmp.md", ".vimrc.tmp", ".model_003.tmp.pt.bak", ".notes.0f3a9c2e.tmp.md")
    for name in mine:
        (theirs / name).write_text("mine")
    assert main.main([*TINY, "--steps", "120", "--eval-every", "120", "--out", str(theirs)]) == 0
    assert (theirs / "eval_old.partial").is_dir()
    assert all((theirs / name).read_text() == "mine" for name in mine)


def test_an_empty_out_is_refused_rather_than_the_current_folder(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    message = "main.py: error: --out is empty: name a folder, or leave --out out"
    assert error_line(capsys, [*TINY, "--steps", "120", "--out", ""]) == message
    assert list(tmp_path.iterdir()) == []


def test_write_atomically_never_writes_through_a_link(tmp_path):
    """A link planted at the temporary name of versions before (.report.tmp.md aimed at a site-packages
    .pth file became code every Python start ran) or at the file's own name: the target stays as it was,
    and the file is written in the folder, under a temporary name no one could foresee."""
    outside = tmp_path / "outside.pth"
    outside.write_text("precious")
    folder = tmp_path / "sweep"
    folder.mkdir()
    (folder / ".report.tmp.md").symlink_to(outside)
    (folder / "report.md").symlink_to(outside)
    used = []
    write_atomically(folder / "report.md", lambda temporary: (used.append(temporary), temporary.write_text("new")))
    assert outside.read_text() == "precious"
    assert not (folder / "report.md").is_symlink() and (folder / "report.md").read_text() == "new"
    assert re.fullmatch(r"\.report\.[0-9a-f]{8}\.tmp\.md", used[0].name) and used[0].parent == folder
    (folder / ".rewards.tmp.txt").symlink_to(outside)
    write_atomically(folder / "rewards.txt", b"0 0 1.0\n")
    assert outside.read_text() == "precious" and (folder / "rewards.txt").read_text() == "0 0 1.0\n"
    assert sorted(path.name for path in folder.iterdir()) == [
        ".report.tmp.md",
        ".rewards.tmp.txt",
        "report.md",
        "rewards.txt",
    ]


@pytest.mark.parametrize("name", [LOCK_FILE, "rewards.txt", "memory.pt", "main.log", "tensorboard", "eval_003"])
def test_a_link_at_a_name_the_run_writes_is_refused(small_run, tmp_path, capsys, name):
    """The lock was opened and truncated through a link; the frames and TensorBoard's files went where a
    link pointed. A run folder with a link at any name it writes is refused in one line, exit 1, and
    nothing in it or outside it changes."""
    run = copy_run(small_run, tmp_path / "run")
    outside = tmp_path / "outside"
    outside.write_text("precious")
    (run / name).unlink(missing_ok=True)
    (run / name).symlink_to(outside)
    before = files_of(run)
    assert main.main(["--resume", str(run), "--steps", "250"]) == 1
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"main.py: error: {run / name} is a symbolic link; the programs write only inside their folder: "
        "remove it, or put what it points to in its place"
    )
    assert outside.read_text() == "precious" and files_of(run) == before


def test_config_json_is_strict_json_and_older_files_with_infinity_still_read(tmp_path):
    save_config(tmp_path, {"grad_clip": math.inf, "alpha": -math.inf, "lr": 1e-4, "env": "ALE/Pong-v5"})
    text = (tmp_path / "config.json").read_text()
    strict = json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} is not JSON"))
    assert strict["grad_clip"] == "inf" and strict["alpha"] == "-inf"
    assert read_config(tmp_path) == {"grad_clip": math.inf, "alpha": -math.inf, "lr": 1e-4, "env": "ALE/Pong-v5"}
    older = ROOT / "results" / "atari100k-v1" / "Pong-seed0"  # written with Infinity, before
    assert '"grad_clip": Infinity' in (older / "config.json").read_text()
    assert read_config(older)["grad_clip"] == math.inf


def test_newest_checkpoint_prefers_the_highest_readable_step(small_run, tmp_path):
    run = copy_run(small_run, tmp_path / "run")
    path, checkpoint, notes = load_newest_checkpoint(run)
    assert path.name == "model_002.pt" and notes == []
    later = load_checkpoint(run / "model_002.pt")
    later["run"]["step"] = 250
    save_checkpoint(run / "model_interrupted.pt", {k: v for k, v in later.items() if k != "format"})
    assert load_newest_checkpoint(run)[0].name == "model_interrupted.pt"
    for name in ("model_002.pt", "model_001.pt", "model_000.pt", "model_interrupted.pt"):
        (run / name).write_bytes(b"")
    with pytest.raises(main.CheckpointError, match=r"model_000\.pt is not a readable checkpoint"):
        load_newest_checkpoint(run)
    assert np.isfinite(checkpoint["run"]["step"])


@pytest.fixture
def immutable_folder(tmp_path):
    """An empty folder nobody, root included, may write into (skipped where chattr +i is not allowed)."""
    folder = tmp_path / "immutable"
    folder.mkdir()
    if subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available here")
    yield folder
    subprocess.run(["chattr", "-i", str(folder)], check=True)


def test_an_unwritable_folder_is_reported_before_anything_is_played(immutable_folder, capsys):
    assert main.main([*TINY, "--steps", "200", "--out", str(immutable_folder)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"main.py: error: cannot write {immutable_folder / LOCK_FILE}: Operation not permitted"]
    assert not list(immutable_folder.iterdir())


def test_memory_is_checked_against_what_is_available_and_the_container_limit(tmp_path, monkeypatch, capsys):
    """Not the machine's total RAM: what is free now, within a container's limit, and with Ape-X the
    actors' processes too, so that a run is refused now rather than killed when its memory fills."""
    meminfo, cgroup = tmp_path / "meminfo", tmp_path / "cgroup"
    meminfo.write_text("MemTotal:       24000000 kB\nMemFree:         1000000 kB\nMemAvailable:    8000000 kB\n")
    cgroup.mkdir()
    assert utils_config.available_memory(cgroup, meminfo) == 8_000_000 * 1024  # no container limit
    (cgroup / "memory.max").write_text("max\n")
    (cgroup / "memory.current").write_text(f"{2**30}\n")
    assert utils_config.available_memory(cgroup, meminfo) == 8_000_000 * 1024
    (cgroup / "memory.max").write_text(f"{4 * 2**30}\n")  # cgroup v2: 4 GiB, 1 GiB of it in use
    assert utils_config.available_memory(cgroup, meminfo) == 3 * 2**30
    (cgroup / "memory.max").unlink()
    (cgroup / "memory").mkdir()  # cgroup v1
    (cgroup / "memory" / "memory.limit_in_bytes").write_text(f"{2 * 2**30}\n")
    (cgroup / "memory" / "memory.usage_in_bytes").write_text(f"{2**29}\n")
    assert utils_config.available_memory(cgroup, meminfo) == 3 * 2**29
    # The process's own cgroup (a Slurm job's), below a root without limit: its limit counts.
    (cgroup / "memory" / "memory.limit_in_bytes").unlink()
    membership = tmp_path / "self-cgroup"
    membership.write_text("0::/job/step\n")
    (cgroup / "memory.max").write_text("max\n")
    (cgroup / "job" / "step").mkdir(parents=True)
    (cgroup / "job" / "memory.max").write_text(f"{2 * 2**30}\n")
    (cgroup / "job" / "memory.current").write_text(f"{2**30}\n")
    (cgroup / "job" / "step" / "memory.max").write_text("max\n")
    (cgroup / "job" / "step" / "memory.current").write_text(f"{2**29}\n")
    assert utils_config.available_memory(cgroup, meminfo, membership) == 2**30
    membership.write_text("7:cpu,memory:/job\n")  # cgroup v1, the memory controller's line
    (cgroup / "memory" / "job").mkdir()
    (cgroup / "memory" / "job" / "memory.limit_in_bytes").write_text(f"{2**30}\n")
    (cgroup / "memory" / "job" / "memory.usage_in_bytes").write_text(f"{2**28}\n")
    assert utils_config.available_memory(cgroup, meminfo, membership) == 3 * 2**28

    monkeypatch.setattr(utils_config, "available_memory", lambda: 2**30)
    message = error_line(capsys, ["--memory-size", "200000", "--out", str(tmp_path / "a")])
    assert message.endswith(
        "this run needs at least 1.4 GiB of RAM, 1.0 GiB is available here (free memory, within any container "
        "limit): the replay memory 1.3 GiB (--memory-size 200,000); the network 61 MiB (--network nature, "
        "--batch-size 32); 11 games 11 MiB (--envs, --eval-envs); lower the first"
    )
    # Frames on the training device: refused by the device's free memory (here the CPU's, host RAM), with a way out.
    argv = ["--memory-size", "200000", "--memory-device", "device", "--device", "cpu", "--out", str(tmp_path / "c")]
    message = error_line(capsys, argv)
    assert message.endswith("--memory-size 200,000 needs 1.3 GiB on cpu, 1.0 GiB is free there and 2.0 GiB stays "
                            "for the networks; choose a smaller one or --memory-device host")  # fmt: skip
    assert not (tmp_path / "c").exists()
    pytest.importorskip("ray")
    message = error_line(
        capsys, ["--memory-size", "10000", "--learning-starts", "1000", "--actors", "20", "--out", str(tmp_path / "b")]
    )
    assert message.endswith("of RAM, 1.0 GiB is available here (free memory, within any container limit): 20 Ape-X "
                            "actors 2.4 GiB (--actors); the replay memory 67 MiB (--memory-size 10,000); the network "
                            "61 MiB (--network nature, --batch-size 32); 10 games 10 MiB (--envs, --eval-envs); "
                            "lower the first")  # fmt: skip
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_the_network_the_games_and_the_memory_are_sized_together_before_anything_is_made(tmp_path, monkeypatch, capsys):
    """The network (its atoms too, Atari's as well as other environments'), the games of --envs and the replay
    memory estimated together against the machine's memory before anything is built, the largest part and its flag
    first (before: --atoms 1000000 passed every check; --envs 10000 built games for 10 minutes to 4 GB)."""
    monkeypatch.setattr(utils_config, "available_memory", lambda: 2**30)
    small = ["--memory-size", "100000", "--learning-starts", "2000", "--steps", "4000", "--eval-every", "2000"]
    message = error_line(capsys, [*small, "--distributional", "--atoms", "1000000", "--out", str(tmp_path / "a")])
    assert message == (
        "main.py: error: this run needs at least 10.6 GiB of RAM, 1.0 GiB is available here (free memory, within any "
        "container limit): the network 10.0 GiB (--network nature, --atoms 1,000,000, --batch-size 32); the replay "
        "memory 0.7 GiB (--memory-size 100,000); 11 games 11 MiB (--envs, --eval-envs); lower the first"
    )
    message = error_line(capsys, [*small, "--envs", "2000", "--out", str(tmp_path / "b")])
    assert message.endswith(": 2,010 games 2.0 GiB (--envs, --eval-envs); the replay memory 0.7 GiB (--memory-size "
                            "100,000); the network 61 MiB (--network nature, --batch-size 32); lower the first")  # fmt: skip
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_a_stop_while_the_games_are_made_quits_at_once(tmp_path, monkeypatch, capsys):
    """SIGTERM (or Ctrl-C) while --envs N games are being made quits at once, as nothing is trained yet: before, it
    printed "Stopping after this step" and went on making all of them."""
    made, make = [], main.make_env

    def make_and_stop(args, seed):
        made.append(seed)
        if len(made) == 3:  # the third game: the handler runs here, before it is made
            os.kill(os.getpid(), signal.SIGTERM)
        return make(args, seed)

    monkeypatch.setattr(main, "make_env", make_and_stop)
    run = tmp_path / "run"
    assert main.main([*TINY, "--envs", "50", "--steps", "500", "--eval-every", "250", "--out", str(run)]) == 130
    assert len(made) == 3 and "Quit without saving" in capsys.readouterr().err
    assert not list(run.glob("*.pt"))


def test_a_device_out_of_memory_is_one_line_naming_the_last_checkpoint(tmp_path, monkeypatch, capsys):
    run = tmp_path / "run"
    assert main.main([*TINY, "--steps", "200", "--eval-every", "100", "--out", str(run)]) == 0

    def out_of_memory(self, batch):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 79.1 GiB total)")

    monkeypatch.setattr(utils_drl.Agent, "learn", out_of_memory)
    capsys.readouterr()
    assert main.main(["--resume", str(run), "--steps", "300"]) == 1
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"main.py: error: the device ran out of memory (CUDA out of memory); the last checkpoint is "
        f"{run / 'model_002.pt'} (step 200). Try --memory-device host"
    )


@pytest.mark.slow
def test_ctrl_c_with_nobody_reading_stdout_still_saves(tmp_path):
    """`main.py ... | head -1`, or a `tee` that died: the output has no reader any more, and Ctrl-C
    must still stop the run with its checkpoint rather than end in a broken pipe."""
    run = tmp_path / "run"
    process = popen_main(*TINY, "--steps", "100000", "--eval-every", "100000", "--out", str(run))
    assert process.stdout.readline().startswith("Run folder:")
    process.stdout.close()  # as `head -1` does after its line
    seen = ""
    while not re.search(r"[2-9]\d\d/100000", seen):  # the progress bar (on stderr) is past step 200
        seen += process.stderr.read(1)
        assert process.poll() is None, seen
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert "Broken pipe" not in stderr and "Traceback" not in stderr
    assert load_checkpoint(run / "model_interrupted.pt")["run"]["step"] > 0


@pytest.mark.slow
def test_a_dead_reader_of_stderr_does_not_end_the_run(tmp_path):
    """`main.py ... 2>&1 | tee log` and the tee dies: the progress bar (on stderr) has no reader. The
    run goes on, and Ctrl-C still stops it with its checkpoint (it used to end at the bar's next
    write, exit 1, no checkpoint, no word)."""
    run = tmp_path / "run"
    process = popen_main(*TINY, "--steps", "100000", "--eval-every", "100000", "--out", str(run), merged=True)
    seen = ""
    while not re.search(r"[2-9]\d\d/100000", seen):  # the bar is past step 200
        seen += process.stdout.read(1)
        assert process.poll() is None, seen
    process.stdout.close()
    time.sleep(3)  # the bar writes at least once a second: into the closed pipe
    assert process.poll() is None
    step = len(games_logged(run))
    wait_until_training(process, run, games=step + 1)
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=120) == 130
    assert load_checkpoint(run / "model_interrupted.pt")["run"]["step"] > 200


def test_help_explains_every_flag_and_shows_each_default_once():
    parser = utils_config.build_parser()
    text = " ".join(parser.format_help().split())  # the lines unwrapped
    for action in parser._actions:
        assert action.help, action.option_strings  # no flag without a line of help
        default = action.default
        if default is not None and default is not False and action.dest != "help":
            assert f"{action.option_strings[0]}" in text and f"(default: {default})" in text, action.dest
    assert "(default: None)" not in text and "(default: False)" not in text
    assert text.count("default: runs/") == 1  # --out's default said once


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--max-episode-frames", "100000000000"], "to 2,147,483,644 (the emulator's limit); got 100000000000"),
        (["--noop-max", "1000000000"], "--noop-max 1000000000 (frames) can take up to 1,000,000,000 frames of no-ops"),
        (
            ["--noop-max", "8000", "--max-episode-frames", "2000"],
            "which leaves less than 68 of --max-episode-frames 2,000 to play",
        ),
        (["--noop-max", "30", "--noop-unit", "steps", "--max-episode-frames", "180"], "up to 116 frames of no-ops"),
    ],
)
def test_limits_of_the_episode_and_its_no_ops_are_checked_before_anything_starts(argv, message, capsys, tmp_path):
    """A frame limit the emulator cannot hold (it was an ALE TypeError after the run folder was made),
    and no-op starts that hang the first evaluation or leave games of one step."""
    assert message in error_line(capsys, [*argv, "--out", str(tmp_path / "run")])
    assert not (tmp_path / "run").exists()


def test_a_checkpoint_with_parts_missing_is_one_line(tmp_path, capsys):
    """A checkpoint of our format with nothing else in it (or a memory.pt with a field of the wrong
    type): one line, never a KeyError traceback."""
    run = tmp_path / "run"
    run.mkdir()
    save_checkpoint(run / "model_000.pt", {})
    assert "cannot resume: " in error_line(capsys, ["--resume", str(run), "--steps", "10"])
    line = error_line(capsys, ["--evaluate", str(run / "model_000.pt")])
    assert line.endswith("model_000.pt is not a whole checkpoint (its agent, config, run missing or damaged)")


class RunsCode:
    """A pickle that runs a shell command when loaded: what a crafted checkpoint could carry."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):
        return os.system, (self.command,)


def test_nothing_in_a_run_folder_is_ever_unpickled(tmp_path, capsys):
    """A downloaded run folder whose checkpoint holds, where the emulator state goes, a pickle that
    runs a command: --resume (by hand and by a sweep), --evaluate, the Python API, the sweep's
    report, plot.py and video.py never run it. The resume goes on from a new game, with a note."""
    from dqn_atari import dqn, plot, video

    run = tmp_path / "stranger"
    assert main.main([*TINY, "--steps", "120", "--eval-every", "120", "--render", "--out", str(run)]) == 0
    marker = tmp_path / "the command ran"
    checkpoint = torch.load(run / "model_001.pt", weights_only=True)
    checkpoint["players"][0]["env"]["ale"] = __import__("pickle").dumps(RunsCode(f"touch '{marker}'"))
    torch.save(checkpoint, run / "model_001.pt")
    assert load_checkpoint(run / "model_001.pt")["players"][0]["env"]["ale"].startswith(b"\x80")  # it loads as bytes

    resumed = run_in_process(capsys, "--resume", str(run), "--steps", "160")
    assert resumed.returncode == 0, resumed.stderr
    assert "Note: the checkpoint's games cannot be continued, their emulator state is not an emulator state" in (
        resumed.stdout
    )
    assert main.main(["--evaluate", str(run / "model_001.pt"), "--eval-episodes", "1"]) == 0
    agent = dqn.load_agent(run / "model_001.pt")
    assert len(agent.evaluate(episodes=1)) == 1
    sweep_run = sweep.Run("Breakout", 0, run)
    assert sweep.run_state(sweep_run, 200) == "interrupted" and "resumes at step 160" in sweep.resume_note(sweep_run)
    assert sweep.main(["--report", str(tmp_path)]) in (0, 2)
    assert plot.main([str(run), "--output", str(tmp_path / "curve.png")]) == 0
    assert video.main([str(run / "eval_000"), "--output", str(tmp_path / "game.gif")]) == 0
    assert not marker.exists()
    # The same bytes, if they were unpickled, would have run the command.
    __import__("pickle").loads(checkpoint["players"][0]["env"]["ale"])
    assert marker.exists()


def crafted_run(folder: Path, argv: list[str], **changes) -> Path:
    """A run folder holding one checkpoint (model_001.pt, at step 100, with an untrained network) of the run ``argv``
    gives, its configuration changed by ``changes``: what a stranger's folder can hold, made without training."""
    args, _ = utils_config.parse_config([*argv, "--out", str(folder)])
    env = main.make_env(args, args.seed)
    agent = main.Agent(env.n_actions, torch.device("cpu"), seed=args.seed, **main.agent_options(args, env))
    config = {**{k: v for k, v in vars(args).items() if k != "resume"}, **changes}
    folder.mkdir(parents=True)
    progress = main.Progress(step=100, evaluations=2)
    save_checkpoint(
        folder / "model_001.pt",
        {"config": config, "run": dataclasses.asdict(progress), "agent": agent.state_dict(), "player": None,
         "torch_rng": torch.get_rng_state(), "rewards_line": None},
    )  # fmt: skip
    return folder


def test_a_checkpoint_never_chooses_the_ray_cluster(tmp_path):
    """An Ape-X folder whose checkpoint names a Ray cluster: a resume without --ray-address starts Ray here,
    --evaluate and dqn.load_agent never read it (the address comes from the user on each start); one typed is used."""
    from dqn_atari import dqn

    run = crafted_run(tmp_path / "apex", [*TINY, "--actors", "2"], ray_address="203.0.113.7:6379")
    args, _ = utils_config.parse_config(["--resume", str(run), "--steps", "300"])
    assert (args.actors, args.ray_address) == (2, None)
    args, _ = utils_config.parse_config(["--resume", str(run), "--steps", "300", "--ray-address", "10.1.2.3:6379"])
    assert args.ray_address == "10.1.2.3:6379"
    args, _ = utils_config.parse_config(["--evaluate", str(run / "model_001.pt")])
    assert args.ray_address is None
    assert dqn.load_agent(run, device="cpu").config.ray_address is None


def save_with_nested_config(path: Path, payload: dict, key: str, depth: int) -> None:
    """``payload`` as a checkpoint whose config[key] is a list nested ``depth`` deep: torch.save cannot pickle one
    that deep, but its unpickler reads one (torch's older file format, its pickle edited)."""
    marker = "NESTED-VALUE"
    buffer = io.BytesIO()
    torch.save({**payload, "config": {**payload["config"], key: marker}}, buffer, _use_new_zipfile_serialization=False)
    opcode = b"X" + len(marker).to_bytes(4, "little") + marker.encode()  # BINUNICODE
    nested = b"]" * depth + b"a" * (depth - 1)  # EMPTY_LIST depth times, then APPEND each into the one below
    path.write_bytes(buffer.getvalue().replace(opcode, nested))


@pytest.mark.parametrize(
    "damage,part",
    [
        (lambda c: c["run"].update(evaluation_due=True, evaluation_games={"scores": [1.0], "steps": 5, "seconds": 1.0,
                                   "env": {}, "act_rng": {"bit_generator": "PCG64", "state": "garbage"}}),
         "run's 'evaluation_games'"),
        (lambda c: c["run"].update(evaluation_due=True, evaluation_games={"scores": "1.0", "steps": 5, "seconds": 1.0,
                                   "env": {}, "act_rng": None}), "run's 'evaluation_games'"),
        (lambda c: c["run"].update(evaluation_games={"scores": [], "steps": 0, "seconds": 0.0, "env": {},
                                   "act_rng": None, "more": 1}), "run's 'evaluation_games'"),
        (lambda c: c["run"].update(evaluations="2"), "run's 'evaluations'"),
        (lambda c: c["run"].update(evaluation_due=1), "run's 'evaluation_due'"),
        (lambda c: c["run"].update(epsilon=0.5), "run's 'epsilon'"),
        (lambda c: c["run"].update(wandb_run_id=7), "run's 'wandb_run_id'"),
        (lambda c: c["run"].update(wandb_run_id="../../other-project"), "run's 'wandb_run_id'"),  # it goes into a URL
        (lambda c: c["players"][0].update(first="yes"), "players"),
        (lambda c: c["players"][0].update(stack=[[0]]), "players"),
        (lambda c: c.update(players={"first": True}), "players"),
        (lambda c: c["run"].update(evaluation_due=True, evaluation_games={"scores": [1.0, 2.0], "steps": 5,
                                   "seconds": 1.0, "env": None, "act_rng": None, "numbers": [3, 3]}),
         "run's 'evaluation_games'"),
        (lambda c: c.update(torch_rng=torch.zeros(10, dtype=torch.uint8)), "torch RNG state"),
        (lambda c: c["agent"].update(rng={"bit_generator": "MT19937"}), "agent's generator"),
        (lambda c: c.update(rewards_line="  2      240 1.0\nrm -rf ~\n"), "rewards line"),
        (lambda c: c["config"].update(lr=[1e-4]), "config's 'lr'"),
        ("nested", "config's 'notes'"),
    ],
)  # fmt: skip
def test_a_malformed_checkpoint_is_refused_before_any_file_is_touched(small_run, tmp_path, capsys, damage, part):
    """Parts of the wrong kind (a stopped evaluation's state, the run's counters, the player's state, generator
    states, a config value nested 100,000 deep): refused in one line as the checkpoint is read, before a resume
    moves any rewards.txt line to a .bak, as a checkpoint that cannot be read is; --evaluate refuses it too."""
    run = copy_run(small_run, tmp_path / "run")
    for older in ("model_000.pt", "model_001.pt"):  # the damaged checkpoint is the only one
        (run / older).unlink()
    checkpoint = torch.load(run / "model_002.pt", weights_only=True)
    if damage == "nested":
        save_with_nested_config(run / "model_002.pt", checkpoint, "notes", 100_000)
    else:
        damage(checkpoint)
        torch.save(checkpoint, run / "model_002.pt")
    before = files_of(run)
    refusal = f"{run / 'model_002.pt'} is not a whole checkpoint (its {part} missing or damaged)"
    assert error_line(capsys, ["--resume", str(run), "--steps", "300"]).endswith(f"cannot resume: {refusal}")
    assert error_line(capsys, ["--evaluate", str(run)]).endswith(f"cannot evaluate: {refusal}")
    assert files_of(run) == before


def test_a_checkpoint_whose_agent_or_game_does_not_fit_the_run(small_run, tmp_path, capsys):
    """Weights of other shapes than the run's network: one line, exit 1, the folder as it was. A player's frame
    stack of another shape than the game's: a note, and training goes on from a new game."""
    run = copy_run(small_run, tmp_path / "agent")
    checkpoint = torch.load(run / "model_002.pt", weights_only=True)
    name = next(iter(checkpoint["agent"]["online"]))
    checkpoint["agent"]["online"][name] = torch.zeros(3)
    torch.save(checkpoint, run / "model_002.pt")
    before = files_of(run)
    assert main.main(["--resume", str(run), "--steps", "300"]) == 1
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and error[0].endswith(
        f"cannot resume: the checkpoint's agent does not fit this run (ValueError: the online network: {name} is (3,), "
        "not (32, 4, 8, 8)); nothing was changed"
    )
    assert files_of(run) == before

    run = copy_run(small_run, tmp_path / "player")
    checkpoint = torch.load(run / "model_002.pt", weights_only=True)
    checkpoint["players"][0]["stack"] = torch.zeros((4, 42, 42), dtype=torch.uint8)
    torch.save(checkpoint, run / "model_002.pt")
    assert main.main(["--resume", str(run), "--steps", "250"]) == 0
    assert "Note: the checkpoint's games cannot be continued, their frame stacks are not this game's" in (
        capsys.readouterr().out
    )


MISBEHAVING = [
    "--env", "misbehaving_envs:Misbehaving", "--learning-starts", "50", "--memory-size", "500", "--eval-every", "100",
    "--eval-episodes", "1", "--target-every", "50", "--steps", "300", "--threads", "1",
]  # fmt: skip


@pytest.fixture
def misbehave(monkeypatch):
    """``misbehave(what, after)``: misbehaving_envs.Misbehaving does ``what`` once an instance has played ``after``
    steps."""
    from misbehaving_envs import Misbehaving

    def start(what: str, after: int) -> None:
        monkeypatch.setattr(Misbehaving, "misbehaviour", what)
        monkeypatch.setattr(Misbehaving, "after_steps", after)

    return start


@pytest.mark.parametrize(
    "what,says",
    [
        ("nan", "misbehaving_envs:Misbehaving gave a reward of nan, not a finite number"),
        ("inf", "misbehaving_envs:Misbehaving gave a reward of inf, not a finite number"),
        ("step raises", "misbehaving_envs:Misbehaving's step raised RuntimeError: the game's server went away"),
        ("reset raises", "misbehaving_envs:Misbehaving's reset raised RuntimeError: the game's server went away"),
        (
            "shape",
            "misbehaving_envs:Misbehaving gave an observation of shape (20, 40), its observation space's is (40, 40)",
        ),
    ],
)
def test_an_environment_that_misbehaves_in_training_ends_in_one_line_and_a_checkpoint(
    tmp_path, capsys, misbehave, what, says
):
    """A reward that is not finite (it used to end in rewards.txt, or as 'training diverged ... try a lower --lr'),
    a step or reset that raises, an observation of another shape: refused the moment it happens, in one line, with
    a checkpoint of the run before that step (it used to be a traceback, the work since the last checkpoint lost);
    the logs are ones the program's own tools read, and the run resumes once the environment behaves."""
    misbehave(what, 150)  # the training game's 150th step; the evaluations' games are 10 steps
    run = tmp_path / "run"
    assert main.main([*MISBEHAVING, "--save-memory", "--out", str(run)]) == 1
    error = capsys.readouterr().err  # the progress bars', then the one line
    assert error.strip().splitlines()[-1] == (
        f"main.py: error: {says}; the last checkpoint is {run / 'model_interrupted.pt'} (step 149)"
    )
    assert "Traceback" not in error
    assert load_checkpoint(run / "model_interrupted.pt")["run"]["episodes"] == 14
    assert len(read_rewards(run / "rewards.txt")) == 2 and len(read_episodes(run / "episodes.csv")) == 14
    if what == "nan":
        misbehave(None, 0)
        assert main.main(["--resume", str(run), "--env", "misbehaving_envs:Misbehaving", "--steps", "200"]) == 0
        assert len(read_rewards(run / "rewards.txt")) == 3


def test_an_environment_that_misbehaves_in_an_evaluation_ends_in_one_line_and_a_checkpoint(
    tmp_path, capsys, monkeypatch, misbehave
):
    """The checkpoint keeps the evaluation due, so a resume plays it first; a playback says the same in one line."""
    real = main.run_evaluation

    def run_evaluation(args, agent, index, *rest):
        if index == 1:
            misbehave("inf", 5)
        return real(args, agent, index, *rest)

    monkeypatch.setattr(main, "run_evaluation", run_evaluation)
    run = tmp_path / "run"
    assert main.main([*MISBEHAVING, "--out", str(run)]) == 1
    error = capsys.readouterr().err
    says = "misbehaving_envs:Misbehaving gave a reward of inf, not a finite number"
    assert error.strip().splitlines()[-1] == (
        f"main.py: error: {says}; the last checkpoint is {run / 'model_interrupted.pt'} (step 100)"
    )
    assert "Traceback" not in error
    assert load_checkpoint(run / "model_interrupted.pt")["run"]["evaluation_due"]
    assert len(read_rewards(run / "rewards.txt")) == 1
    argv = ["--evaluate", str(run), "--env", "misbehaving_envs:Misbehaving", "--eval-episodes", "1"]
    assert main.main(argv) == 1
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"main.py: error: {says}"


@pytest.mark.parametrize(
    "env,flags,message",
    [
        ("NoRenderMode", ["--render"], "--render: misbehaving_envs:NoRenderMode cannot be made to render rgb_array "
         "images (TypeError: NoRenderMode.__init__() got an unexpected keyword argument 'render_mode'"),
        ("NoImages", ["--render"], "--render: misbehaving_envs:NoImages renders no rgb_array images: leave out --render"),
        ("Huge", [], "(--network nature, --batch-size 32 on misbehaving_envs:Huge's 2000x2000 frames: give it smaller "
         "ones (gymnasium's ResizeObservation))"),
    ],
)  # fmt: skip
def test_what_an_environment_cannot_do_is_refused_before_anything_is_created(tmp_path, capsys, env, flags, message):
    """--render with an environment that takes no render_mode or renders no image (a traceback at the first
    evaluation's first frame), frames so large that the network cannot be built (2000x2000x3 passed the memory
    check, then asked for 32 GB): one line, exit 2, nothing created."""
    out = tmp_path / "run"
    argv = ["--env", f"misbehaving_envs:{env}", *flags, "--memory-size", "100", "--learning-starts", "50"]
    with pytest.raises(SystemExit) as exit_info:  # the checks alone: were they to let it pass, nothing is built
        utils_config.parse_config([*argv, "--out", str(out)])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize(
    "name,value", [("lr", "fast"), ("double", "yes"), ("network", "resnet"), ("steps", 2.5), ("threads", 0)]
)
def test_a_saved_value_that_no_flag_gives_is_refused_in_one_line(small_run, tmp_path, capsys, name, value):
    """A configuration value of the wrong type or out of a flag's choices (it was a TypeError traceback, or a
    KeyError when the network was built): --resume and --evaluate refuse the checkpoint in one line."""
    run = copy_run(small_run, tmp_path / "run")
    checkpoint = torch.load(run / "model_002.pt", weights_only=True)
    torch.save({**checkpoint, "config": {**checkpoint["config"], name: value}}, run / "model_002.pt")
    before = files_of(run)
    flag = "--" + name.replace("_", "-")
    refusal = f"the saved run's {flag} is {value!r}, not a value of {flag}: its checkpoint is damaged"
    assert error_line(capsys, ["--resume", str(run), "--steps", "300"]).endswith(refusal)
    assert error_line(capsys, ["--evaluate", str(run)]).endswith(refusal)
    assert files_of(run) == before


def crafted_checkpoint(small_run: Path, path: Path, online: object = ..., **config: object) -> Path:
    """small_run's last checkpoint with its network or settings replaced, as someone handing over a file might."""
    checkpoint = utils_run.load_checkpoint(small_run / "model_002.pt")
    if online is not ...:
        checkpoint["agent"]["online"] = online
    checkpoint["config"].update(config)
    utils_run.save_checkpoint(path, {k: v for k, v in checkpoint.items() if k != "format"})
    return path


def refusals_of_a_crafted_file(path: Path, capsys) -> tuple[str, str]:
    """What main.py --evaluate (exit 2, one line) and dqn.load_agent (ValueError) say of ``path``."""
    from dqn_atari import dqn

    capsys.readouterr()
    try:
        status = main.main(["--evaluate", str(path), "--eval-episodes", "1"])
    except SystemExit as refused:  # the flags' checks end in the parser
        status = refused.code
    assert status == 2
    line = capsys.readouterr().err.strip()
    assert len(line.splitlines()) == 1 and len(line) < 400, line
    with pytest.raises(ValueError) as refused:
        dqn.load_agent(path)
    return line, str(refused.value)


def test_a_checkpoints_network_that_is_not_its_settings_is_refused_in_one_line(small_run, tmp_path, capsys):
    """--evaluate and dqn.load_agent of a checkpoint whose network has a wrong shape, keys missing or extra (100,000
    of them made a 1 MB traceback; 1,003 show the same cut and save and load in a fraction of the time), or no network
    at all: one line naming at most three keys, no traceback."""
    weights = utils_run.load_checkpoint(small_run / "model_002.pt")["agent"]["online"]
    head = next(name for name in reversed(weights) if name.endswith("weight"))
    many = {**weights, **{f"extra{number}": torch.zeros(1) for number in range(1_003)}}
    cases = {
        "shape": ({**weights, head: torch.zeros(3, 7)}, f"{head} is (3, 7), not {tuple(weights[head].shape)}"),
        "missing": ({k: v for k, v in weights.items() if k != head}, f"missing {head}"),
        "extra": (many, "unexpected 'extra0', 'extra1', 'extra2' and 1,000 more"),
        "none": (None, "it holds no network"),
        "list": ([1, 2], "the network's weights are a list, not a dict of tensors"),
        "not a tensor": ({**weights, head: 3}, f"{head} is not a tensor"),
    }
    for name, (online, reason) in cases.items():
        path = crafted_checkpoint(small_run, tmp_path / f"{name.replace(' ', '-')}.pt", online)
        line, error = refusals_of_a_crafted_file(path, capsys)
        assert (
            line
            == f"main.py: error: cannot evaluate {path}: the checkpoint's network does not fit its settings: "
            + (error.split(": ", 2)[-1])
        )
        assert reason in error and error.startswith("the checkpoint's network does not fit its settings: "), error
    # A resume says it in the same few words.
    run = copy_run(small_run, tmp_path / "resumed")
    crafted_checkpoint(small_run, run / "model_002.pt", many)
    assert main.main(["--resume", str(run), "--steps", "360"]) == 1
    assert "the online network: unexpected 'extra0', 'extra1', 'extra2' and 1,000 more" in capsys.readouterr().err


@pytest.mark.parametrize(
    "saved, reason",
    [
        ({"noop_max": 10**9}, "--noop-max 1000000000 (frames) can take up to"),  # played no-ops for minutes
        ({"network": "evil"}, "the saved run's --network is 'evil', not a value of --network"),  # a KeyError
        ({"max_episode_frames": 10**12}, "--max-episode-frames must be a multiple of 4"),  # ale-py's TypeError
        ({"eval_epsilon": 7.0}, "--eval-epsilon must be within [0, 1], got 7.0"),  # loaded silently
        ({"v_min": 5.0, "v_max": -5.0}, "--v-min 5.0 must be below --v-max -5.0"),  # loaded silently
        ({"distributional": True, "atoms": 16 * 10**6, "v_min": -1e6, "v_max": 1e6}, "of RAM, "),  # was a traceback
    ],
    ids=["noop-max", "network", "max-episode-frames", "eval-epsilon", "v-range", "atoms"],
)
def test_load_agent_checks_the_saved_settings_as_evaluate_does(small_run, tmp_path, capsys, monkeypatch, saved, reason):
    monkeypatch.setattr(utils_config, "available_memory", lambda: 2**30)  # the same line on any machine
    path = crafted_checkpoint(small_run, tmp_path / "crafted.pt", **saved)
    line, error = refusals_of_a_crafted_file(path, capsys)
    if "atoms" in saved:  # the same network; main.py plays its --eval-episodes 1, the API its 10 games at once
        network = "the network 30.6 GiB (--network nature, --atoms 16,000,000); "
        assert network in line and f"{network}10 games 10 MiB (--envs, --eval-envs); lower the first" in error
    else:
        assert reason in error and line == f"main.py: error: {error}"
