"""Many games at once: --envs N training games in the replay memory's streams, and evaluations of --eval-envs
games at a time whose games do not depend on how many play at once."""

import functools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from test_main import assert_same_run, rewards

from dqn_atari import main
from dqn_atari.utils_config import parse_config, saved_options
from dqn_atari.utils_drl import Agent
from dqn_atari.utils_env import AtariEnv, EnvironmentFailed, EvaluationStopped, Player, SeededGames, evaluate
from dqn_atari.utils_memory import ReplayMemory
from dqn_atari.utils_run import load_checkpoint, read_episodes
from dqn_atari.utils_workers import GameWorkers

ROOT = Path(__file__).resolve().parent.parent
TINY = [
    "--env", "Breakout", "--learning-starts", "100", "--memory-size", "1200", "--eval-episodes", "2",
    "--max-episode-frames", "2000", "--target-every", "50", "--threads", "1",
]  # fmt: skip


def short_games(seed: int, render: bool = False, sticky_actions: float = 0.0) -> AtariEnv:
    return AtariEnv("ALE/Breakout-v5", seed, sticky_actions, max_episode_frames=600)


def test_act_all_draws_as_act_does_one_game_after_another():
    """One game: ``act_all`` is ``act``, draw for draw. Several: game i explores with its own generator, and the
    greedy games get the actions of their states' Q-values."""
    states = np.random.default_rng(0).integers(0, 256, (6, 4, 84, 84), dtype=np.uint8)
    one, batched = Agent(4, seed=5), Agent(4, seed=5)
    for epsilon in (1.0, 0.5, 0.0):
        assert [one.act(state, epsilon) for state in states] == [
            int(batched.act_all(state[None], epsilon)[0]) for state in states
        ]
    assert one.rng.bit_generator.state == batched.rng.bit_generator.state
    rngs = [np.random.default_rng(seed) for seed in range(6)]
    alone = [one.act(state, 0.5, np.random.default_rng(seed)) for seed, state in enumerate(states)]
    assert batched.act_all(states, 0.5, rngs).tolist() == alone
    with torch.no_grad():
        greedy = one.q_values(torch.from_numpy(states)).argmax(dim=1).tolist()
    assert batched.act_all(states, 0.0).tolist() == greedy


@pytest.mark.parametrize("sticky_actions", [0.0, pytest.param(0.25, marks=pytest.mark.slow)])
def test_seeded_evaluation_games_are_the_same_however_many_play_at_once(sticky_actions):
    """Game k is seeded by (entropy, k): its emulator, no-op starts and epsilon draws. One at a time, three, or all
    five at once play the same games, on machines that played other games before (seeded again) as on new ones."""
    agent = Agent(4, seed=1)

    def games(reuse: bool) -> SeededGames:
        seeded = SeededGames(functools.partial(short_games, sticky_actions=sticky_actions), [7, 0, 1])
        if not reuse:
            seeded.done = lambda env: None  # every game on a new machine
        return seeded

    new = evaluate(agent.act_all, games(reuse=False), 5, 0.3, 1)
    assert len(set(new.scores)) > 1  # games that differ
    for at_once in (1, 3, 5):
        played = evaluate(agent.act_all, games(reuse=True), 5, 0.3, at_once)
        assert (played.scores, played.steps) == (new.scores, new.steps), at_once


def test_evaluation_machines_in_worker_processes_play_the_same_games_and_a_dead_one_is_one_line():
    """--env-workers: the evaluation's machines made in two worker processes (a playback's: no training games
    there), stepped there at once and seeded again for each game there, play the games of machines made here, the
    first one rendering here beside them; a worker killed under an evaluation ends it with one line."""
    agent = Agent(4, seed=1)
    here = evaluate(agent.act_all, SeededGames(short_games, [7, 0, 1], render_first=True), 5, 0.3, 3)
    workers = GameWorkers(functools.partial(AtariEnv, "ALE/Breakout-v5", max_episode_frames=600), [], 2)
    try:
        machines = workers.add([0, 1, 2])
        assert [machine.worker for machine in machines] == [0, 1, 0]
        played = evaluate(agent.act_all, SeededGames(short_games, [7, 0, 1], True, machines), 5, 0.3, 3)
        assert (played.scores, played.steps) == (here.scores, here.steps) and len(set(here.scores)) > 1
        workers.processes[1].kill()
        message = r"^the process of evaluation games \(worker 2 of 2\) died \(exit code -9\)$"
        with pytest.raises(EnvironmentFailed, match=message):
            evaluate(agent.act_all, SeededGames(short_games, [7, 0, 1], pool=machines), 5, 0.3, 3)
    finally:
        workers.close()


def play_to_the_end(workers: GameWorkers, game, here: AtariEnv) -> None:
    """Step ``game`` in its worker and ``here`` the same until the game ends, their frames equal all along."""
    while True:
        workers.step_games([game], [3])
        result, expected = game.step(3), here.step(3)
        np.testing.assert_array_equal(result.frame, expected.frame)
        if result.terminated or result.truncated:
            return


def test_a_training_game_ended_in_a_worker_comes_back_reset_once():
    """A step that ends a training game in a worker brings the first frame of the next game with it: the reset the
    game's Player asks for next is that frame, the one a game here gives; a reset after it goes to the worker again.
    An evaluation machine made there later is not reset behind the evaluation's back."""
    workers = GameWorkers(short_games, [5], 1)
    try:
        (game,), here = workers.games, short_games(5)
        np.testing.assert_array_equal(game.reset(), here.reset())
        play_to_the_end(workers, game, here)
        assert game.next_first_frame is not None
        np.testing.assert_array_equal(game.reset(), here.reset())  # the worker's, taken with the last step
        assert game.next_first_frame is None
        np.testing.assert_array_equal(game.reset(), here.reset())  # a second reset: a call of its own
        (machine,), evaluation = workers.add([6]), short_games(6)
        np.testing.assert_array_equal(machine.reset(), evaluation.reset())
        play_to_the_end(workers, machine, evaluation)
        assert machine.next_first_frame is None
    finally:
        workers.close()


def test_a_stopped_seeded_evaluation_goes_on_with_another_number_at_once():
    """Stopped with three games at a time, the finished games (not a prefix of the order) are kept and the others
    are played from their seeds again, one at a time: the scores of an evaluation never stopped."""
    agent = Agent(4, seed=1)
    games = SeededGames(short_games, [7, 0, 1])
    straight = evaluate(agent.act_all, games, 5, 0.3, 5)
    rounds = iter(range(10**6))
    with pytest.raises(EvaluationStopped) as stop:
        evaluate(agent.act_all, games, 5, 0.3, 3, stopped=lambda: next(rounds) == straight.steps // 5)
    finished = stop.value.finished
    assert 1 <= len(finished.scores) < 5 and finished.env is None
    assert finished.scores == [straight.scores[number] for number in finished.numbers]
    resumed = evaluate(agent.act_all, games, 5, 0.3, 1, finished=finished)
    assert (resumed.scores, resumed.steps) == (straight.scores, straight.steps)


def test_each_training_game_fills_its_own_stream_as_if_it_were_alone():
    """Three players pushing their steps in turn into one memory of three streams store exactly what three
    players would, each alone in a memory of one stripe's size: stacks and windows never cross games."""
    stripe, steps = 300, 500  # the stripes wrap around
    shared = ReplayMemory(3 * stripe, streams=3, n_step=3)
    players = [Player(short_games(seed), shared, stream=seed) for seed in range(3)]
    alone = [ReplayMemory(stripe, n_step=3) for _ in range(3)]
    solo = [Player(short_games(seed), memory) for seed, memory in enumerate(alone)]
    actions = np.random.default_rng(0).integers(4, size=(steps, 3))
    for row in actions:
        for game, action in enumerate(row):
            players[game].step(int(action))
            solo[game].step(int(action))
    for game, memory in enumerate(alone):
        assert shared.sizes[game] == memory.sizes[0] and shared.cursors[game] == memory.cursors[0]
        for name in ("frames", "actions", "rewards", "dones", "starts"):
            part = getattr(shared, name)[game * stripe : (game + 1) * stripe]
            np.testing.assert_array_equal(np.asarray(part), np.asarray(getattr(memory, name)), err_msg=name)


def stop_at(monkeypatch, step: int) -> None:
    """Ctrl-C (a real SIGINT to this process) as the training loop counts ``step``."""
    real = main.Trainer.step_done

    def step_done(self, *args, **kwargs):
        real(self, *args, **kwargs)
        if self.progress.step == step:
            signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(main.Trainer, "step_done", step_done)


@pytest.mark.parametrize(
    "memory,split_only",
    [
        ([], []),
        pytest.param(["--prioritized"], ["--env-workers", "4"], marks=pytest.mark.slow),
        pytest.param(["--learn-while-playing"], ["--env-workers", "2"], marks=pytest.mark.slow),
    ],
    ids=["uniform", "prioritized-stopped-run-in-worker-processes", "learning-while-playing-stopped-run-in-workers"],
)
def test_training_games_at_once_resume_exactly_from_a_stop_inside_a_round(tmp_path, monkeypatch, memory, split_only):
    """--envs 3: a Ctrl-C at step 200, inside a round, stops at the round's end (step 201); with --save-memory the
    resumed run is the one that never stopped, weight for weight and game for game, with either memory, and with
    its games stepped in four worker processes (their states saved and restored through them; the fourth and the
    first hold the evaluations' two machines) as in this one."""
    common = [*TINY, *memory, "--envs", "3", "--eval-every", "150", "--save-memory", "--seed", "3"]
    common += ["--max-episode-frames", "300"]  # games of 75 steps at most: each game ends in episodes.csv
    assert main.main([*common, "--steps", "300", "--out", str(tmp_path / "straight")]) == 0
    with monkeypatch.context() as patch:
        stop_at(patch, 200)
        assert main.main([*common, *split_only, "--steps", "300", "--out", str(tmp_path / "split")]) == 130
    interrupted = load_checkpoint(tmp_path / "split" / "model_interrupted.pt")
    assert interrupted["run"]["step"] == 201 and len(interrupted["players"]) == 3
    assert main.main(["--resume", str(tmp_path / "split")]) == 0
    assert_same_run(tmp_path / "straight", tmp_path / "split", "model_002.pt", "model_002.pt")
    assert rewards(tmp_path / "straight") == rewards(tmp_path / "split")  # with workers, evaluations 0 and 1 too
    assert len(read_episodes(tmp_path / "straight" / "episodes.csv")) >= 3


def test_a_rounds_batches_drawn_together_train_as_those_drawn_one_at_a_time(tmp_path, monkeypatch):
    """--envs 4 --train-every 1: four learning steps a round, whose batches the loop draws together after the
    round's pushes; the run is the one whose learning steps draw their batches one at a time, weight for weight."""
    common = [*TINY, "--envs", "4", "--train-every", "1", "--steps", "160", "--eval-every", "160"]
    common += ["--learning-starts", "50", "--eval-episodes", "1", "--max-episode-frames", "400", "--batch-size", "8"]
    drawn = []
    with monkeypatch.context() as patch:
        real = ReplayMemory.sample_batches
        patch.setattr(ReplayMemory, "sample_batches", lambda memory, *args: drawn.append(args) or real(memory, *args))
        assert main.main([*common, "--out", str(tmp_path / "together")]) == 0
    assert [count for count, _ in drawn] == [2] + [4] * 27  # from step 51 on: steps 51 and 52 of round 13
    with monkeypatch.context() as patch:
        patch.setattr(ReplayMemory, "draws_ahead", False)
        assert main.main([*common, "--out", str(tmp_path / "one-at-a-time")]) == 0
    assert_same_run(tmp_path / "together", tmp_path / "one-at-a-time", "model_001.pt", "model_001.pt")


def test_learning_while_playing_learns_on_the_memory_before_the_round_with_syncs_in_step_order(tmp_path, monkeypatch):
    """--learn-while-playing, --envs 4 --train-every 1 --target-every 6: every step's gradient step and target sync
    come once, in step order (syncs at 6, 12, ... between the rounds' gradient steps), while the memory holds the
    steps before their round (none of it pushed yet); the games in this process or in two workers, the same run."""
    common = [*TINY, "--envs", "4", "--train-every", "1", "--target-every", "6", "--steps", "160"]
    common += ["--eval-every", "160", "--learning-starts", "60", "--eval-episodes", "1", "--batch-size", "8"]
    common += ["--max-episode-frames", "400", "--learn-while-playing"]
    calls, syncs, real_learn_and_sync, real_sync = [], [], main.Trainer.learn_and_sync, Agent.sync_target
    with monkeypatch.context() as patch:

        def learn_and_sync(run, step, learn):
            calls.append((step, run.progress.step, len(run.memory), run.updates))
            real_learn_and_sync(run, step, learn)
            calls.append(None)  # what comes after: no longer this step's

        patch.setattr(main.Trainer, "learn_and_sync", learn_and_sync)
        patch.setattr(
            Agent, "sync_target", lambda agent: syncs.append(calls[-1] if calls else None) or real_sync(agent)
        )
        assert main.main([*common, "--out", str(tmp_path / "here")]) == 0
    calls = [call for call in calls if call is not None]
    assert [step for step, *_ in calls] == list(range(1, 161))
    for step, counted, held, updates in calls:
        assert counted == held == 4 * ((step - 1) // 4)  # the round's first step less one: nothing of it pushed
        assert updates == max(0, step - 1 - 60)  # one gradient step at each step past --learning-starts, before
    assert [call[0] for call in syncs if call] == list(range(6, 161, 6))  # the others: the agent's making
    assert main.main([*common, "--env-workers", "2", "--out", str(tmp_path / "workers")]) == 0
    assert_same_run(tmp_path / "here", tmp_path / "workers", "model_001.pt", "model_001.pt")


def test_one_game_trains_as_before_and_the_evaluation_scheme_is_recorded(tmp_path):
    """--envs 1 (the default) plays one game seeded by --seed in a memory of one stream; the run records its
    evaluation scheme, and a run saved before --eval-games (no eval_games in its config) evaluates serially."""
    args, _ = parse_config([*TINY, "--out", str(tmp_path / "run")])
    assert (args.envs, args.eval_games, args.eval_envs) == (1, "seeded", 32)
    assert main.training_seed(args.seed, 0) == args.seed and main.training_seed(args.seed, 1) != args.seed
    assert saved_options({"env": "ALE/Breakout-v5"})["eval_games"] == "serial"
    assert saved_options({})["eval_games"] == "seeded"
    args, _ = parse_config([*TINY, "--eval-games", "serial"])
    assert args.eval_envs == 1


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--envs", "3", "--steps", "1000"], "--steps 1,000 is not a multiple of --envs 3"),
        (["--envs", "4", "--steps", "1000", "--eval-every", "250"], "--eval-every 250 is not a multiple of --envs 4"),
        (["--envs", "4", "--steps", "1000", "--eval-every", "250"], "give --eval-every 248 or 252, or an --envs that"),
        (["--envs", "3", "--steps", "2", "--eval-every", "3"], "give --steps 3, or an --envs that divides 2"),
        (["--envs", "2", "--actors", "2"], "--envs 2 goes without --actors"),
        (["--envs", "0"], "--envs must be positive, got 0"),
        (["--eval-envs", "0"], "--eval-envs must be positive, got 0"),
        (["--eval-games", "serial", "--eval-envs", "4"], "--eval-envs 4: this run's evaluations are serial"),
        (["--envs", "250", "--steps", "1000", "--eval-every", "250"], "too small to give each of 250 games a stream"),
        (["--learn-while-playing", "--actors", "2"], "--learn-while-playing goes without --actors"),
        (
            ["--learn-while-playing", "--envs", "80", "--steps", "800", "--eval-every", "80"],
            "--learning-starts 100 must be at least 111 with --learn-while-playing",
        ),
    ],
)
def test_games_at_once_that_cannot_work_are_refused_in_one_line(argv, message, capsys, tmp_path):
    with pytest.raises(SystemExit):
        parse_config([*TINY, *argv, "--out", str(tmp_path / "run")])
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and message in error and not (tmp_path / "run").exists()


def test_a_game_that_fails_inside_a_round_leaves_the_last_checkpoint(tmp_path, capsys):
    """With --envs 2 the other game has moved on when one fails: no model_interrupted.pt, whose games would be ahead
    of its step count; the one line names the last checkpoint and says what the game did, whether it ran in this
    process or in a worker (Misbehaving reads what to do from the environment: a worker is another process). With
    one game and --learn-while-playing, the round's learning is ahead of the count: no model_interrupted.pt either."""
    argv = ["--env", "misbehaving_envs:Misbehaving", "--learning-starts", "50", "--memory-size", "500"]
    argv += ["--eval-every", "100", "--eval-episodes", "1", "--steps", "300", "--threads", "1", "--envs", "2"]
    GameWorkers(short_games, [], 1).close()  # the fork server starts before MISBEHAVING is set: a worker still sees it
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MISBEHAVING", "step raises after 120")  # each game's 120th step: the round ending at 240
        for workers in ("0", "1"):
            run = tmp_path / f"workers{workers}"
            assert main.main([*argv, "--env-workers", workers, "--out", str(run)]) == 1
            captured = capsys.readouterr()
            assert "a game failed within a round of 2 games" in captured.out
            last = captured.err.strip().splitlines()[-1]
            assert last.startswith("main.py: error: misbehaving_envs:Misbehaving's step raised RuntimeError: ")
            assert last.endswith(f"the last checkpoint is {run / 'model_002.pt'} (step 200)")
            assert not (run / "model_interrupted.pt").exists()
        # One game whose round's learning ran ahead of the count (--learn-while-playing): the same.
        run = tmp_path / "ahead"
        argv[-1] = "1"
        assert main.main([*argv, "--learn-while-playing", "--out", str(run)]) == 1
        assert "a game failed within a round whose learning ran ahead of its step" in capsys.readouterr().out
        assert not (run / "model_interrupted.pt").exists() and (run / "model_001.pt").exists()


def child_pids(pid: int) -> list[int]:
    """The processes ``pid`` started that are still alive."""
    children = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(child) for child in children.read_text().split()] if children.exists() else []


def descendant_pids(pid: int) -> list[int]:
    """The processes ``pid`` started, those they started, and so on, still alive."""
    return [found for child in child_pids(pid) for found in [child, *descendant_pids(child)]]


def alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status  # a zombie has ended


@pytest.mark.slow
def test_worker_processes_end_with_the_run_even_killed_and_a_dead_worker_ends_the_run(tmp_path):
    """kill -9 of the training process: its game workers and their fork server end within seconds (no orphans). A
    worker killed under a running training process: the run ends in one line naming the games it held and the last
    checkpoint, exit 1."""
    argv = [sys.executable, str(ROOT / "main.py"), *TINY, "--envs", "4", "--env-workers", "2", "--steps", "100000"]
    argv += ["--eval-every", "100000"]
    for victim in ("training", "worker"):
        run = tmp_path / victim
        process = subprocess.Popen(
            [*argv, "--out", str(run)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        deadline = time.time() + 180
        while not (run / "model_000.pt").exists() and time.time() < deadline:
            time.sleep(0.2)
        # The workers are the children of multiprocessing's fork server, itself a child of the training process.
        (server,) = [
            pid for pid in child_pids(process.pid) if b"forkserver" in Path(f"/proc/{pid}/cmdline").read_bytes()
        ]
        workers = child_pids(server)
        assert len(workers) == 2
        started = descendant_pids(process.pid)  # the workers, their server, multiprocessing's resource tracker
        os.kill(process.pid if victim == "training" else workers[1], signal.SIGKILL)
        _, stderr = process.communicate(timeout=120)
        if victim == "worker":
            assert process.returncode == 1
            assert stderr.strip().splitlines()[-1] == (
                "main.py: error: the process of training games 2-3 died (exit code -9); the last checkpoint is "
                f"{run / 'model_000.pt'} (step 0)"
            )
        deadline = time.time() + 30
        while any(map(alive, started)) and time.time() < deadline:
            time.sleep(0.2)
        assert not any(map(alive, started))
