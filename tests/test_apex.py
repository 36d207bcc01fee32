"""Ape-X: the epsilon ladder, actors' chunks against the learner's own view of them, and runs of
two actors on Ray (outputs, resume, an actor killed mid-run, all actors lost)."""

import dataclasses
import http.server
import math
import os
import re
import signal
import socket
import sys
import threading
import time
from typing import ClassVar

import numpy as np
import pytest
import torch
from test_failures import popen_main, wait_until_training
from test_main import games, rewards, run_main

from dqn_atari import main, utils_apex, utils_config
from dqn_atari.utils_apex import Actor, ActorConfig, actor_epsilons, export_weights
from dqn_atari.utils_drl import Agent
from dqn_atari.utils_heads import CategoricalHead, ScalarHead
from dqn_atari.utils_memory import PrioritizedReplayMemory
from dqn_atari.utils_run import load_checkpoint

ray = pytest.importorskip("ray")

APEX = [
    "--env", "Pong", "--actors", "2", "--learning-starts", "200", "--memory-size", "2000", "--eval-episodes", "1",
    "--max-episode-frames", "400", "--target-every", "100", "--chunk-steps", "20", "--batch-size", "16",
]  # fmt: skip


PONG = {"env_id": "ALE/Pong-v5", "max_episode_frames": 400}  # an actor's game options


class RecordingPool(utils_apex.ActorPool):
    """The pool main.py starts, kept where a test can reach it."""

    started: ClassVar[list["RecordingPool"]] = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        RecordingPool.started.append(self)


@pytest.fixture
def pools(monkeypatch):
    RecordingPool.started = []
    monkeypatch.setattr(main, "ActorPool", RecordingPool)
    return RecordingPool.started


def test_epsilon_ladder():
    assert actor_epsilons(1) == [0.4]
    assert np.allclose(actor_epsilons(3), [0.4, 0.4**4.5, 0.4**8])
    assert np.all(np.diff(actor_epsilons(8)) < 0)


@pytest.mark.parametrize("n_step,head", [(1, ScalarHead()), (3, ScalarHead()), (3, CategoricalHead())])
def test_chunks_rebuild_the_actors_transitions_and_td_errors_in_the_learners_memory(n_step, head):
    """Chunk after chunk into one stream of a two-stream memory: the learner's stacks and
    n-step windows, rebuilt across chunk boundaries, give exactly the priorities the actor sent
    (TD errors, or C51's cross-entropies), and the sum tree holds the priorities of those errors."""
    config = ActorConfig(PONG, {"head": head}, 0, n_step, 0.99, chunk_steps=30, weights_every=1, td_errors=True)
    actor = Actor(config, index=1, count=2)
    learner = Agent(actor.agent.n_actions, seed=5, head=head)
    weights = export_weights(learner.online, version=0)
    memory = PrioritizedReplayMemory(1000, n_step=n_step, streams=2)
    sent = []
    for _ in range(8):  # 240 steps: a game of 400 frames ends (truncated) inside them
        chunk = actor.collect(weights)
        assert chunk.start == len(sent) and chunk.actor == 1
        for index in range(len(chunk)):
            chunk.push(memory, index)
        sent.extend(chunk.td_errors)
    assert memory.sizes.tolist() == [0, len(sent)]
    assert len(sent) == 8 * 30 - n_step  # the newest n steps wait for their windows
    slots = memory.stripe + np.arange(len(sent))
    sampleable = memory.sampleable(slots)
    sent = np.array(sent)
    # The newest n steps wait for the frames of their windows, which the next chunk brings.
    assert np.array_equal(sampleable[:-n_step], ~np.isnan(sent[:-n_step]))
    assert not (sampleable & np.isnan(sent)).any()
    learner_errors = learner.priorities(memory.transitions(slots[sampleable]))
    assert np.allclose(learner_errors, sent[sampleable], atol=1e-5)
    assert np.allclose(memory.tree.leaves[slots[sampleable]], memory.priority(sent[sampleable]))
    assert memory.starts[slots].sum() >= 2  # a game cut by the frame limit, and the next


def test_chunks_shorter_than_the_n_step_window_still_send_every_step_in_order():
    config = ActorConfig(PONG, {}, 0, 5, 0.99, 2, 100, td_errors=False)
    actor = Actor(config, 0, 1)
    starts = []
    for _ in range(6):
        chunk = actor.collect(None)
        starts.append((chunk.start, len(chunk)))
    assert starts == [(0, 0), (0, 0), (0, 1), (1, 2), (3, 2), (5, 2)]


def test_weights_are_taken_every_weights_every_steps():
    config = ActorConfig(PONG, {}, 0, 1, 0.99, 20, weights_every=50, td_errors=False)
    actor = Actor(config, 0, 1)
    agent = Agent(actor.agent.n_actions, seed=9)
    first, second = export_weights(agent.online, 0), export_weights(Agent(actor.agent.n_actions, seed=10).online, 1)
    actor.collect(first)
    assert actor.weights_version == 0
    actor.collect(second)
    assert actor.weights_version == 0  # 20 steps on the first weights: too few
    actor.collect(second)
    actor.collect(second)
    assert actor.weights_version == 1
    for name, value in actor.agent.target.state_dict().items():
        assert torch.equal(value, torch.from_numpy(second.arrays[name]))


def test_apex_run_writes_the_usual_outputs_holds_the_replay_ratio_and_resumes(tmp_path, ray_cluster, pools):
    run = tmp_path / "run"
    summary = main.train(
        *utils_config.parse_config([*APEX, "--steps", "600", "--eval-every", "300", "--out", str(run)])
    )
    assert summary.exit_code == 0 and summary.steps == 600
    assert summary.updates == (600 - 200) // 4  # --replay-ratio fixed: one gradient step per --train-every steps
    assert [line[:2] for line in rewards(run)] == [(0, 0), (1, 300), (2, 600)]
    games(run, "model_002.pt")
    checkpoint = load_checkpoint(run / "model_002.pt")
    assert checkpoint["players"] is None and checkpoint["config"]["actors"] == 2
    assert pools[0].restarts == 0

    summary = main.train(*utils_config.parse_config(["--resume", str(run), "--steps", "800", "--save-memory"]))
    assert summary.exit_code == 0 and summary.steps == 800
    assert [line[:2] for line in rewards(run)][-1] == (3, 800)
    games(run, "model_003.pt")


@pytest.mark.slow
def test_an_actor_killed_mid_run_is_restarted_and_training_goes_on(tmp_path, ray_cluster, pools, capsys):
    run = tmp_path / "run"

    def kill_one_actor():
        while not pools or pools[0]._expected[0] is None:  # until actor 0 has delivered a chunk
            time.sleep(0.05)
        ray.kill(pools[0].handles[0], no_restart=False)

    killer = threading.Thread(target=kill_one_actor, daemon=True)
    killer.start()
    argv = [*APEX, "--steps", "1500", "--eval-every", "1500", "--out", str(run), "--replay-ratio", "free"]
    summary = main.train(*utils_config.parse_config(argv))
    killer.join(timeout=1)
    assert summary.exit_code == 0 and summary.steps == 1500 and summary.updates > 0
    assert pools[0].restarts >= 1 and pools[0].live == 2
    captured = capsys.readouterr()
    assert "actor 0 lost its chunk" in captured.out + captured.err


@pytest.mark.slow
def test_losing_every_actor_ends_in_one_line_with_a_checkpoint(tmp_path, ray_cluster, pools, capsys):
    run = tmp_path / "run"

    def kill_all_actors():
        # Not waiting for every actor's first chunk: one may wait for a CPU of Ray's still held by an earlier test's
        # actor (seen once in CI: actor 1 never started, so nothing was killed), and killed unstarted, it is lost too.
        while not pools or main_steps() < 250:
            time.sleep(0.05)
        for handle in pools[0].handles:
            ray.kill(handle, no_restart=True)

    def main_steps():
        return sum(expected[1] for expected in pools[0]._expected if expected)

    killer = threading.Thread(target=kill_all_actors, daemon=True)
    killer.start()
    summary = main.train(
        *utils_config.parse_config([*APEX, "--steps", "5000", "--eval-every", "5000", "--out", str(run)])
    )
    assert summary.exit_code == 1
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("main.py: error: every actor failed") and "model_interrupted.pt" in error
    assert load_checkpoint(run / "model_interrupted.pt")["run"]["step"] > 0


def test_actors_without_ray_is_one_line(monkeypatch, capsys):
    real_find_spec = utils_config.importlib.util.find_spec
    monkeypatch.setattr(
        utils_config.importlib.util, "find_spec", lambda name: None if name == "ray" else real_find_spec(name)
    )
    with pytest.raises(SystemExit) as stopped:
        utils_config.parse_config(["--actors", "2"])
    assert stopped.value.code == 2
    assert "pip install 'ray>=2.40'" in capsys.readouterr().err


@pytest.mark.parametrize("presses", [1, 2])
def test_ctrl_c_while_ray_starts_waits_for_ray_unless_pressed_twice(presses, monkeypatch, capsys):
    """A KeyboardInterrupt raised inside ray.init leaves Ray half built (seen: SIGSEGV at exit, or the
    interrupt dropped and a sweep going on to the end): the first Ctrl-C reaches the caller's handler
    once ray.init has returned; a second one stops ray.init at once."""
    steps_of_init = []

    def slow_init(**options):
        for step in range(20):
            if step < presses:
                os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.005)  # Python runs a pending handler here
            steps_of_init.append(step)

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", slow_init)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            utils_apex.start_ray(None, 1)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the caller's, put back
    finally:
        signal.signal(signal.SIGINT, previous)
    assert len(steps_of_init) == (20 if presses == 1 else 1)
    assert "Stopping once Ray has started (Ctrl-C again to stop at once)." in capsys.readouterr().out


@pytest.mark.slow
def test_ctrl_c_stops_actors_and_learner_with_a_checkpoint(tmp_path, ray_cluster, pools, capsys):
    run = tmp_path / "run"

    def press_ctrl_c():
        while not pools or pools[0]._expected[0] is None or pools[0]._expected[0][1] < 100:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)  # the handler runs in the main thread, which trains

    threading.Thread(target=press_ctrl_c, daemon=True).start()
    summary = main.train(
        *utils_config.parse_config([*APEX, "--steps", "20000", "--eval-every", "20000", "--out", str(run)])
    )
    assert summary.exit_code == 130 and 0 < summary.steps < 20000
    assert load_checkpoint(run / "model_interrupted.pt")["run"]["step"] == summary.steps
    assert f"continue with: python main.py --resume {run}" in capsys.readouterr().out
    with pytest.raises(ray.exceptions.ActorDiedError):
        ray.get(pools[0].handles[0].collect.remote(None), timeout=30)


@pytest.mark.slow
def test_a_cluster_address_where_nothing_answers_is_one_line(tmp_path):
    argv = [
        "--env",
        "Pong",
        "--actors",
        "1",
        "--learning-starts",
        "100",
        "--steps",
        "200",
        "--out",
        str(tmp_path / "r"),
    ]
    result = run_main(*argv, "--ray-address", "127.0.0.1:1", timeout=120)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "main.py: error: cannot join the Ray cluster at 127.0.0.1:1: Connection refused; "
        "is `ray start --head` running there?"
    )


@pytest.mark.slow
def test_sigterm_stops_an_apex_run_with_a_checkpoint(tmp_path):
    """SIGTERM, as a scheduler or `timeout` stops a job, to a run that starts Ray itself: ray.init
    installs its own handler (a stack dump, then abort) unless the run keeps its own."""
    run = tmp_path / "run"
    process = popen_main(*APEX, "--steps", "50000", "--eval-every", "50000", "--out", str(run))
    wait_until_training(process, run)  # the actors' games are being learned from
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=180)
    assert process.returncode == 130, stderr
    assert "SIGTERM received" not in stderr and "Traceback" not in stderr
    assert load_checkpoint(run / "model_interrupted.pt")["run"]["step"] > 0
    assert f"continue with: python main.py --resume {run}" in stdout


@pytest.mark.slow
@pytest.mark.parametrize("ratio", ["fixed", "free"])
def test_hung_actors_time_out_under_both_replay_ratios(ratio, tmp_path, ray_cluster, pools, capsys, monkeypatch):
    """Actors that stop answering (a hung node, a partition, SIGSTOP): with --replay-ratio free the
    learner learns while no chunk waits, and must still notice that none has come for --actor-timeout."""
    real_wait = ray.wait

    def hung_after_learning_starts(refs, **options):
        if sum(expected[1] for expected in pools[0]._expected if expected) > 300:  # past --learning-starts
            pools[0].timeout = 3.0  # --actor-timeout: long enough for the actors to start, short from here
            time.sleep(min(options.get("timeout") or 0.0, 0.05))
            return [], list(refs)
        return real_wait(refs, **options)

    monkeypatch.setattr(ray, "wait", hung_after_learning_starts)
    watchdog = threading.Timer(120, lambda: os.kill(os.getpid(), signal.SIGINT))  # fail rather than hang
    watchdog.start()
    argv = [*APEX, "--steps", "5000", "--eval-every", "5000", "--actor-timeout", "100", "--replay-ratio", ratio]
    summary = main.train(*utils_config.parse_config([*argv, "--out", str(tmp_path / "run")]))
    watchdog.cancel()
    assert summary.exit_code == 1
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "no actor delivered steps for 3 s (2 of 2 actors alive); see --actor-timeout" in error
    assert "model_interrupted.pt" in error


@pytest.mark.slow
def test_actors_that_cannot_start_say_why_in_the_learners_one_line(tmp_path, ray_cluster, pools, capsys, monkeypatch):
    """An exception in an actor's constructor (here a game that does not exist; a MemoryError for a
    huge chunk) reaches the learner's last line, not 'its machine was lost'."""
    real_actor_config = main.actor_config

    def broken(args, env):
        config = real_actor_config(args, env)
        return dataclasses.replace(config, env={**config.env, "env_id": "ALE/NoSuchGame-v5"})

    monkeypatch.setattr(main, "actor_config", broken)
    summary = main.train(*utils_config.parse_config([*APEX, "--steps", "600", "--out", str(tmp_path / "run")]))
    assert summary.exit_code == 1
    captured = capsys.readouterr()
    assert "actor 0 is gone (it could not start: " in captured.out + captured.err
    error = captured.err.strip().splitlines()[-1]
    assert error.startswith("main.py: error: every actor failed (actor 0: it could not start: ")
    assert "NoSuchGame" in error


class FakeRay:
    """Just enough of Ray for an ActorPool of one actor on a clock the test turns: each call returns
    a chunk of 10 steps, or fails at once while the clock is before ``down_until`` (its process
    died, and Ray is restarting it)."""

    class exceptions:
        RayError = type("RayError", (Exception,), {})
        RayActorError = type("RayActorError", (RayError,), {})
        ActorDiedError = type("ActorDiedError", (RayActorError,), {})
        RaySystemError = type("RaySystemError", (RayError,), {})

    def __init__(self):
        self.clock, self.down_until = 1000.0, 0.0
        self.chunks = self.deaths = 0

    def remote(self, **options):
        collect = type("Collect", (), {"remote": staticmethod(lambda weights: object())})
        handle = type("Handle", (), {"collect": collect})
        return lambda cls: type("Remote", (), {"remote": staticmethod(lambda *args: handle())})

    def wait(self, refs, num_returns, timeout):
        return refs[:1], refs[1:]

    def get(self, ref):
        if self.clock < self.down_until:
            self.deaths += 1
            raise self.exceptions.RayActorError("The actor died unexpectedly before finishing this task.")
        self.chunks += 1
        return utils_apex.Chunk(0, 7, (self.chunks - 1) * 10, 0.4, *(np.zeros(10) for _ in range(6)))

    def kill(self, handle, no_restart):
        pass

    def put(self, value):
        return value


def test_a_restarting_actor_is_given_the_time_its_first_start_took(monkeypatch):
    """On a loaded machine an actor takes minutes to start, and as long to restart: it is given up
    only after three times its first start (at least a minute) without a chunk, however many calls
    to it fail meanwhile (they fail at once while it starts)."""
    fake = FakeRay()
    monkeypatch.setitem(sys.modules, "ray", fake)
    monkeypatch.setattr(utils_apex.time, "monotonic", lambda: fake.clock)
    monkeypatch.setattr(utils_apex.time, "sleep", lambda seconds: None)
    lines: list[str] = []
    pool = utils_apex.ActorPool(None, 1, timeout=10_000, report=lines.append)
    fake.clock += 150  # its first start took 150 s
    assert len(pool.next_chunk(wait=True)) == 10
    assert pool.restart_budget() == 450

    fake.down_until = fake.clock + 440  # it dies, and its restart takes 440 s
    while fake.chunks < 2 and pool.live:
        pool.next_chunk(wait=True)
        fake.clock += 1
    assert pool.live == 1 and fake.deaths > 40
    assert lines == ["actor 0 lost its chunk (its process died); restarting it"]

    fake.down_until = math.inf  # it dies again, for good
    while pool.live:
        pool.next_chunk(wait=True)
        fake.clock += 1
    assert re.fullmatch(
        r"actor 0 is gone \(nothing delivered for 4[5-6]\d s of restarts; its process died\); going on without it",
        lines[-1],
    )
    with pytest.raises(utils_apex.ApexError, match=r"every actor failed \(actor 0: nothing delivered for 4[5-6]\d s"):
        pool.next_chunk(wait=True)


def test_an_address_where_something_else_answers_is_one_line(ray_cluster):
    """A --ray-address whose port is a web server, or a server that never answers: Ray would retry
    for minutes (ignoring the first Ctrl-C); the check says at once that it is not Ray."""
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with pytest.raises(utils_apex.RayStartError, match=r"at 127.0.0.1:\d+: something answers there, but not Ray"):
        utils_apex.reach_cluster(f"127.0.0.1:{server.server_port}", seconds=5)
    server.shutdown()
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        with pytest.raises(utils_apex.RayStartError, match="but not Ray"):
            utils_apex.reach_cluster(f"127.0.0.1:{silent.getsockname()[1]}", seconds=1)
    utils_apex.reach_cluster(ray.get_runtime_context().gcs_address)  # a Ray head answers


def test_ray_gone_under_the_learner_is_an_apex_error(monkeypatch):
    """Ray's raylet or object store killed under a run: its calls fail with a broken connection,
    which becomes the ApexError on which the learner saves its checkpoint."""
    fake = FakeRay()
    monkeypatch.setitem(sys.modules, "ray", fake)
    pool = utils_apex.ActorPool(None, 1, timeout=100, report=print)

    def broken(*args, **options):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(fake, "wait", broken)
    with pytest.raises(utils_apex.ApexError, match=r"Ray stopped under the run \(\[Errno 32\] Broken pipe\)"):
        pool.next_chunk(wait=True)
    monkeypatch.setattr(fake, "put", broken)
    with pytest.raises(utils_apex.ApexError, match="Ray stopped under the run"):
        pool.publish(None)
    monkeypatch.setattr(fake, "kill", broken)
    pool.close(shutdown=False)  # a Ray already gone raises nothing more
