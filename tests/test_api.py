"""The Python API (dqn.py) and the gymnasium environment: load a checkpoint and act, evaluate,
train with main.py's flags as arguments, gymnasium's checker and wrappers, and the install."""

import importlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import threading
import tomllib
from pathlib import Path

import gymnasium
import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env

from dqn_atari import dqn, main, utils_config
from dqn_atari.utils_run import read_episodes
from dqn_atari.utils_types import RunEvent

ROOT = Path(__file__).resolve().parent.parent
TINY = {"learning_starts": 100, "memory_size": 1000, "eval_episodes": 1, "max_episode_frames": 400}


def test_a_callback_is_told_each_game_evaluation_and_checkpoint_and_stops_the_run_resumably(tmp_path):
    """dqn.train's callback gets each finished game (its score), evaluation (its games' scores) and checkpoint (its
    path) as they happen; returning False at the evaluation of step 150 stops the run there as Ctrl-C does: a
    checkpoint, the run returned, and a resume goes on to the end."""
    events: list[RunEvent] = []

    def callback(event: RunEvent) -> bool:
        events.append(event)
        return not (event.kind == "evaluation" and event.step == 150)

    run = tmp_path / "run"
    options = {"steps": 300, "eval_every": 150, "target_every": 50, "out": run, **TINY, "max_episode_frames": 200}
    folder, agent = dqn.train(callback=callback, **options)
    assert folder == run and agent.step == 150
    kinds = [(event.kind, event.step) for event in events if event.kind != "game"]
    # The evaluation's checkpoint is the stop's: a stop right after it writes no other.
    assert kinds == [("checkpoint", 0), ("evaluation", 0), ("checkpoint", 150), ("evaluation", 150)]
    assert events[-2].checkpoint == run / "model_001.pt" and all(event.run == run for event in events)
    assert not (run / "model_interrupted.pt").exists()
    games = [event for event in events if event.kind == "game"]
    scores = read_episodes(run / "episodes.csv")[:, :2]
    assert [(event.step, event.scores[0]) for event in games] == [tuple(row) for row in scores.tolist()]
    evaluation = next(event for event in events if event.kind == "evaluation" and event.step == 150)
    assert np.mean(evaluation.scores) == pytest.approx(float((run / "rewards.txt").read_text().split()[10]), abs=0.05)
    resumed = dqn.train(resume=run, steps=300, callback=lambda event: None)  # None goes on
    assert resumed.agent.step == 300 and len((run / "rewards.txt").read_text().splitlines()) == 3


def test_train_load_and_act_in_three_lines(tmp_path):
    run, trained = dqn.train(env="Pong", steps=150, eval_every=150, target_every=50, out=tmp_path / "run", **TINY)
    assert run == tmp_path / "run" and (run / "model_001.pt").exists()
    assert trained.step == 150

    agent = dqn.load_agent(run)  # the README's three lines
    observation, info = agent.make_env(seed=1).reset()
    action = agent.act(observation)
    assert 0 <= action < 6 and agent.step == 150 and info["lives"] == 0
    assert dqn.load_agent(run / "model_001.pt").act(observation) == action  # a file or its run folder
    assert agent.env_options()["max_episode_frames"] == 400  # the run's game settings
    scores = agent.evaluate(episodes=2, seed=3)
    assert len(scores) == 2 and scores == agent.evaluate(episodes=2, seed=3)  # seeded

    # What the API takes, it checks: no silent cast of [0, 1] frames to black ones, no cryptic errors.
    with pytest.raises(ValueError, match="uint8 pixels, 0 to 255; got float64"):
        agent.act(observation / 255.0)
    assert agent.act(observation.astype(np.float32)) == action  # whole numbers 0-255 in any dtype are pixels
    assert trained.act(observation) == action
    with pytest.raises(ValueError, match=r"a \(4, 84, 84\) array \(make_env's\), got shape \(84, 84\)"):
        agent.act(observation[-1])
    for epsilon in (2.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="epsilon must be within"):
            agent.act(observation, epsilon)
        with pytest.raises(ValueError, match=r"^epsilon must be within \[0, 1\], got"):
            agent.evaluate(episodes=1, epsilon=epsilon)
    with pytest.raises(ValueError, match="episodes must be a whole number of 1 or more, got -1"):
        agent.evaluate(episodes=-1)
    with pytest.raises(ValueError, match="full_action_space: the network chooses among the actions it was trained on"):
        agent.make_env(full_action_space=True)
    if not torch.cuda.is_available():  # a CPU build: one line, not an AssertionError from inside torch
        with pytest.raises(ValueError, match="device 'cuda': "):
            dqn.load_agent(run, device="cuda")
    env = agent.make_env()
    env.reset()
    for bad in (-1, "1", 1.7, 99, True):
        with pytest.raises(ValueError, match=r"an action is a whole number from 0 to 5, got"):
            env.step(bad)
    assert env.step(np.int64(1))[0].shape == (4, 84, 84)
    with pytest.raises(ValueError, match=r"sticky_actions is a probability, within \[0, 1\], got 2.0"):
        agent.make_env(sticky_actions=2.0)

    with pytest.raises(ValueError, match=r"^--lr must be positive and finite, got -1.0$"):
        dqn.train(env="Pong", lr=-1, out=tmp_path / "bad")
    assert not (tmp_path / "bad").exists()


def test_a_saved_agent_is_the_network_alone_and_plays_as_its_checkpoint(tmp_path, capsys):
    """agent.save writes the file to release a trained agent: plain tensors (weights_only), a fraction of the
    checkpoint, and load_agent and main.py --evaluate play it as they play the checkpoint it came from."""
    run, _ = dqn.train(env="Pong", steps=150, eval_every=150, target_every=50, out=tmp_path / "run", **TINY)
    released = tmp_path / "agent.pt"
    dqn.load_agent(run).save(released)
    payload = torch.load(released, weights_only=True)
    assert set(payload) == {"format", "config", "run", "agent", "versions"} and payload["run"] == {"step": 150}
    assert set(payload["agent"]) == {"online"} and payload["config"]["env"] == "ALE/Pong-v5"
    checkpoint = run / "model_001.pt"
    assert released.stat().st_size < checkpoint.stat().st_size / 2  # no optimizer, target network or RNGs
    agent, original = dqn.load_agent(released), dqn.load_agent(checkpoint)
    observation, _ = agent.make_env(seed=1).reset()
    assert agent.step == 150 and agent.act(observation) == original.act(observation)
    assert agent.evaluate(episodes=2, seed=3) == original.evaluate(episodes=2, seed=3)
    capsys.readouterr()
    played = []
    for path in (checkpoint, released):
        assert main.main(["--evaluate", str(path), "--eval-episodes", "2"]) == 0
        played.append([line for line in capsys.readouterr().out.splitlines() if line.startswith("Episode #")])
    assert played[0] == played[1] and len(played[0]) == 2
    # A folder that holds one released agent and no run (results/breakout-10m) plays it; one with several names them.
    shelf = tmp_path / "shelf"
    shelf.mkdir()
    shutil.copy(released, shelf / "pong-agent.pt")
    assert main.main(["--evaluate", str(shelf), "--eval-episodes", "2"]) == 0
    assert [line for line in capsys.readouterr().out.splitlines() if line.startswith("Episode #")] == played[0]
    assert dqn.load_agent(shelf).evaluate(episodes=2, seed=3) == original.evaluate(episodes=2, seed=3)
    shutil.copy(released, shelf / "another.pt")
    with pytest.raises(SystemExit):
        main.main(["--evaluate", str(shelf)])
    assert capsys.readouterr().err.strip() == (
        f"main.py: error: cannot evaluate: {shelf} holds no run but 2 agent files; give one of them: another.pt, "
        "pong-agent.pt"
    )
    # It plays; it does not train on, even named as a run's checkpoint: one line, nothing changed.
    folder = tmp_path / "released"
    folder.mkdir()
    shutil.copy(released, folder / "model_001.pt")
    assert main.main(["--resume", str(folder), "--steps", "300"]) == 1
    assert "cannot resume: the checkpoint holds a released agent, its network alone" in capsys.readouterr().err
    assert (folder / "model_001.pt").read_bytes() == released.read_bytes()


def test_the_api_turns_a_presets_switches_off_and_plays_a_run_with_its_own_stacks(tmp_path):
    """``double=False`` beside a preset that sets it is --no-double (it used to be dropped); the
    agent of a --preset atari100k run sees Dopamine's stacks (zeros before a game's first frame)."""
    small = {**TINY, "learning_starts": 100, "eval_every": 150, "steps": 150}
    options = {"preset": "atari100k", "double": False, "dueling": False, "save_memory": False}
    run = dqn.train(env="Pong", out=tmp_path / "run", **options, **small).folder
    config = json.loads((run / "config.json").read_text())
    assert (config["double"], config["dueling"], config["save_memory"]) == (False, False, False)
    assert config["network"] == "dopamine" and not (run / "memory.pt").exists()
    agent = dqn.load_agent(run)
    observation, _ = agent.make_env(seed=1).reset()
    assert not observation[:3].any() and observation[3].any()
    assert len(agent.evaluate(episodes=1)) == 1


def test_train_runs_from_a_thread(tmp_path):
    """Only the main thread gets signals: from another thread (a notebook's worker, a GUI) training
    runs without Ctrl-C handling rather than failing and leaving an empty folder."""
    done = []
    worker = threading.Thread(
        target=lambda: done.append(dqn.train(env="Pong", steps=150, eval_every=150, out=tmp_path / "run", **TINY))
    )
    worker.start()
    worker.join(timeout=300)
    assert [run.folder for run in done] == [tmp_path / "run"] and (tmp_path / "run" / "model_001.pt").exists()


def test_the_environment_is_a_gymnasium_env_that_wrappers_take():
    env = gymnasium.make("dqn/Atari-v0", game="Pong", seed=2, max_episode_frames=400)
    check_env(env.unwrapped, skip_render_check=True)
    assert env.observation_space.shape == (4, 84, 84) and env.action_space.n == 6
    env = gymnasium.wrappers.RecordEpisodeStatistics(env)
    env.reset(seed=5)
    done, steps, score = False, 0, 0.0
    while not done:
        observation, reward, terminated, truncated, info = env.step(env.action_space.sample())
        done, steps, score = terminated or truncated, steps + 1, score + reward
    assert info["episode"]["l"] == steps and info["episode"]["r"] == score and observation.dtype == np.uint8
    first = env.reset(seed=5)[0]
    assert np.array_equal(first, env.reset(seed=5)[0])  # a seed is a game machine seeded so
    frame = gymnasium.make("dqn/Atari-v0", game="Breakout", render_mode="rgb_array")
    frame.reset()
    assert frame.render().shape == (210, 160, 3)
    # The README's wrapper for a game's frames works with what make install installs.
    frames = gymnasium.wrappers.RenderCollection(
        gymnasium.make("dqn/Atari-v0", game="Breakout", render_mode="rgb_array")
    )
    frames.reset(seed=1)
    for _ in range(3):
        frames.step(0)
    assert len(frames.render()) == 4 and frames.render() == []  # the reset's frame and 3 steps', then emptied


def test_the_package_holds_every_module_and_its_commands():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["tool"]["setuptools"]["packages"] == ["dqn_atari"]
    assert project["tool"]["setuptools"]["package-dir"] == {"dqn_atari": "."}
    for path in ROOT.glob("*.py"):
        assert importlib.import_module(f"dqn_atari.{path.stem}").__file__ == str(path)
    for target in project["project"]["scripts"].values():
        module, function = target.split(":")
        assert callable(getattr(importlib.import_module(module), function))
    command = Path(sys.executable).parent / "dqn-train"  # `make install` installs the project (pip install -e .)
    if not command.exists():
        pytest.skip("the project is not installed in this environment (pip install -e .)")
    done = subprocess.run([str(command), "--help"], cwd="/", capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("usage: dqn-train")
    done = subprocess.run([str(command), "--lr", "-1"], cwd="/", capture_output=True, text=True, timeout=120)
    assert (
        done.returncode == 2 and done.stderr.strip() == "dqn-train: error: --lr must be positive and finite, got -1.0"
    )
    sweep_command = Path(sys.executable).parent / "dqn-sweep"
    done = subprocess.run(
        [str(sweep_command), "--report", "/no/such"], cwd="/", capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2 and done.stderr.strip() == "dqn-sweep: error: /no/such is not a folder of a sweep"


@pytest.mark.slow
def test_an_installed_copy_shadows_nothing_and_reports_outside_the_checkout(tmp_path):
    """``pip install .`` (not editable) into a fresh environment: from a folder holding a user's own
    main.py, utils_run.py and plot.py, ``from dqn_atari import dqn`` works and the user's modules stay
    theirs; ``dqn-sweep --report`` finds its reference scores and published runs in the package."""
    wheels, venv, user = tmp_path / "wheels", tmp_path / "venv", tmp_path / "user"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels), str(ROOT)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    # The dependencies are this environment's (a .pth file reaches them); only the project is installed.
    (Path(site) / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    wheel = next(wheels.glob("dqn_atari-*.whl"))
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", str(wheel)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr
    user.mkdir()
    for name in ("main", "utils_run", "plot"):
        (user / f"{name}.py").write_text(f"WHOSE = 'the user of {name}'\n")
    code = (
        "from dqn_atari import dqn; import main, utils_run, plot; "
        "print(main.WHOSE, utils_run.WHOSE, plot.WHOSE, sep=';'); print(callable(dqn.load_agent))"
    )
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [str(python), "-c", code], cwd=user, env=environment, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["the user of main;the user of utils_run;the user of plot", "True"]

    sweep = user / "sweep"
    for run in ("Pong-seed0", "Breakout-seed0"):
        shutil.copytree(ROOT / "results" / "atari100k" / run, sweep / run)
    done = subprocess.run(
        [str(venv / "bin" / "dqn-sweep"), "--report", str(sweep), "--samples", "200"],
        cwd=user, env=environment, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "DrQ" in (sweep / "report.md").read_text() and (sweep / "aggregate.png").stat().st_size > 0


def test_the_tests_that_share_ray_are_grouped_into_one_worker(request):
    """Under `make test`'s --dist loadgroup, every test that uses the shared local Ray carries the group in its id, so
    pytest-xdist sends them all to one worker and one Ray starts (conftest.py). Under pytest 9, pytest-xdist 3.8 groups
    nothing, and in two workers two Rays of 2 CPUs each ran at once."""
    if not request.config.getoption("loadgroup", default=False):
        pytest.skip("runs under --dist loadgroup (make test)")
    ray_tests = [item.nodeid for item in request.session.items if "ray_cluster" in item.fixturenames]
    if not ray_tests:
        pytest.skip("no test that uses Ray was selected")
    assert all(nodeid.endswith("@ray") for nodeid in ray_tests), ray_tests


def test_importing_dqn_leaves_its_host_process_as_it_was(tmp_path):
    """No OpenMP spin count in the environment, no glibc malloc settings, no torch thread count until
    the library is asked to train (from a folder of the user's own, with nothing of theirs set)."""
    code = (
        "import os, torch; from dqn_atari import utils_config; calls = []; "
        "utils_config.keep_freed_memory = lambda: calls.append(1); threads = torch.get_num_threads(); "
        "from dqn_atari import dqn; "
        "print(os.environ.get('GOMP_SPINCOUNT'), len(calls), torch.get_num_threads() == threads)"
    )
    environment = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    environment["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=environment, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["None", "0", "True"]


@pytest.mark.parametrize(("index", "expected"), [(None, ""), ("https://wheels.example/cpu", " --index-url ")])
def test_make_takes_torch_from_the_wheel_index_a_user_names(index, expected):
    """``make install TORCH_INDEX=URL`` (the README's way to PyTorch's CPU build) installs torch from
    that index; without it, from pip's own. Dry runs: nothing is installed."""
    command = ["make", "-n", "-B", "VENV=/nonexistent/venv", "/nonexistent/venv/installed"]
    command += [f"TORCH_INDEX={index}"] if index else []
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    torch_line = next(line for line in done.stdout.splitlines() if "torch==2.13.0" in line)
    assert torch_line.rstrip().endswith("torch==2.13.0" + (expected + index if index else ""))


def test_the_readmes_training_commands_are_accepted_as_written(tmp_path):
    """Every `python main.py` line of the README's bash blocks parses, flags and values as written, but for those
    that name a file or module the reader must make first (--resume, --evaluate, a package of their own). Each gets
    an empty --out last, so that a run the reader made with the same command does not refuse it."""
    manual = (ROOT / "README.md").read_text() + (ROOT / "docs" / "usage.md").read_text()  # and its detail
    blocks = re.findall(r"```bash\n(.*?)```", manual, re.S)
    lines = [line.split("  #")[0].strip() for block in blocks for line in block.splitlines()]
    commands = [line for line in lines if line.startswith("python main.py")]
    checked = [line for line in commands if not re.search(r"--resume|--evaluate|my_package", line)]
    assert len(checked) >= 10, commands
    for line in checked:
        try:
            utils_config.parse_config([*shlex.split(line)[2:], "--out", str(tmp_path / "run")])
        except SystemExit:  # argparse's refusal, its line in the captured stderr
            pytest.fail(f"the README's {line!r} is refused")


def test_the_suites_time_is_the_readmes_and_its_history_holds_it():
    """The README's Tests section gives the suite's latest time, its quick start rounds it to whole minutes, and
    docs/tests.md gives figures only in its history of the suite's time, which holds the README's."""
    readme = (ROOT / "README.md").read_text()
    minutes, seconds = map(int, re.search(r"nothing else training `make test` took (\d+) min (\d+) s", readme).groups())
    assert f"# the test suite, about {round(minutes + seconds / 60)} minutes on 2 CPU cores" in readme
    checks, history = (ROOT / "docs" / "tests.md").read_text().split("\n## The suite's time\n")
    assert not re.search(r"\d+ tests|\d+ min \d+ s", checks)
    assert f"then took {minutes} min {seconds} s" in history


def test_every_committed_file_the_readme_and_docs_name_exists():
    """A file the manual names under results/, docs/, scripts/ or tests/ (a name with a suffix; patterns such as
    seed{1,2,3} or attempt-K are not files), and every relative link, is in the checkout: a result moved or renamed
    must take its mentions with it."""
    named = re.compile(r"(?<![\w/.-])((?:results|docs|scripts|tests)/[\w./-]*\w\.[a-z]+)(?![\w/{<-])")
    link = re.compile(r"\]\(([^)#\s]+)\)")
    missing = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for number, line in enumerate(page.read_text().splitlines(), 1):
            paths = [ROOT / p for p in named.findall(line)]
            paths += [page.parent / p for p in link.findall(line) if not p.startswith(("http:", "https:"))]
            missing += [f"{page.relative_to(ROOT)}:{number}: {p.relative_to(ROOT)}" for p in paths if not p.exists()]
    assert not missing, "\n".join(missing)


def test_importing_dqn_registers_the_ids_of_installed_packages(tmp_path):
    """The README's `gymnasium.make("MinAtar/Breakout-v1")` after `from dqn_atari import dqn`, in a fresh process."""
    pytest.importorskip("minatar.gym", reason="pip install minatar==1.0.15 (make install does)")
    code = "import gymnasium; from dqn_atari import dqn; print(gymnasium.make('MinAtar/Breakout-v1').observation_space.shape)"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout.strip().splitlines()[-1] == "(10, 10, 4)", done.stderr
