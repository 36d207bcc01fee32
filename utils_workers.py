"""Games stepped in worker processes (``--env-workers W``): the ``--envs`` training games split among W processes,
each stepping its own while the others step theirs, so that a round of N games takes the time of N / W emulator
steps rather than N. The same processes hold the game machines of the evaluations (as many as play at once), which
they step while the training games wait. The emulator's Python binding holds the GIL, so threads would not run them
side by side.

Each game is the object the training loop would make in its own process (``main.make_env`` with the game's seed), so
a run with workers plays the frames, scores and draws of the same run without them, bit for bit; only where the
emulators run changes. The loop sends every game its action, then each ``Player`` takes its game's result from its
``RemoteGame`` as it would from the game itself. A training game that a step ends is reset by its worker in the same
call (its ``Player`` resets it next in any case); other resets, and a checkpoint's emulator states, go to the one
worker that holds the game; so does an evaluation machine's new seed for its next game. A worker ignores Ctrl-C
(the run's stop is the training process's to handle) and ends when the training process does, killed or not: its
end of the pipe closes.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
import os
import signal
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from dqn_atari.utils_env import AtariEnv, EmulatorStateError, EnvironmentFailed, GymEnv
from dqn_atari.utils_types import StepResult

START_SECONDS = 120.0  # for a worker to import torch and make its games (a loaded machine takes a while)


def serve(
    connection: multiprocessing.connection.Connection,
    make: Callable[[int], Any],
    seeds: list[int],
    environment: dict[str, str],
) -> None:
    """A worker's life: make the games of ``seeds``, then do what the training process asks of them until it says
    stop or goes away. ``environment``: the training process's variables as they are now (the server that forked
    this worker holds those of when it started, which a program may have changed since)."""
    os.environ.clear()
    os.environ.update(environment)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group: the run stops the games
    torch.set_num_threads(1)  # the frames' resize is torch's: one thread per worker, the training process has its own
    try:
        games = [make(seed) for seed in seeds]
        training = len(games)  # the first games are the training games; ``make`` adds evaluation machines after them
        connection.send(("ok", [(game.n_actions, game.stack_depth, game.frame_shape) for game in games]))
    except Exception as error:  # making someone else's environment can raise anything
        connection.send(("error", type(error).__name__, str(error)))
        return
    while True:
        try:
            command, argument = connection.recv()
        except (EOFError, OSError):  # the training process is gone
            return
        if command == "close":
            return
        try:
            if command == "step":  # the games of this worker that step, with their actions
                answer: Any = [step_and_reset(games[index], action, index < training) for index, action in argument]
            elif command == "make":  # more games: an evaluation's machines
                made = [make(seed) for seed in argument]
                games += made
                answer = [(game.n_actions, game.stack_depth, game.frame_shape) for game in made]
            elif command == "reset":
                answer = games[argument].reset()
            elif command == "reseed":
                index, seed = argument
                answer = games[index].reseed(seed)
            elif command == "get_state":
                answer = games[argument].get_state()
            else:  # set_state
                index, state = argument
                answer = games[index].set_state(state)
            connection.send(("ok", answer))
        except Exception as error:  # the game's own failure, said in the training process
            connection.send(("error", type(error).__name__, str(error)))


def step_and_reset(game: Any, action: int, training: bool) -> tuple[StepResult, np.ndarray | None]:
    """A game's step, and the first frame of its next game where the step ended a training game: its ``Player``
    resets it at once, so the worker does it here, beside the others, rather than in a call of its own."""
    result = game.step(action)
    return result, game.reset() if training and (result.terminated or result.truncated) else None


class GameWorkers:
    """The training games of ``seeds`` (none for a playback) made by ``make(seed)`` in ``workers`` processes
    (consecutive games in each, none in some when there are more workers than games); ``games`` stand in for them in
    the training process. ``add`` makes more there."""

    def __init__(self, make: Callable[[int], AtariEnv | GymEnv], seeds: list[int], workers: int) -> None:
        # Each worker is forked from a server process that imported the program and this module once, rather than
        # started afresh to import torch again (seconds each); the server runs nothing of torch's, so forking it is
        # safe, where a fork of this process, with torch's threads running, can hang. Windows has no such server.
        if "forkserver" in multiprocessing.get_all_start_methods():
            context = multiprocessing.get_context("forkserver")
            context.set_forkserver_preload(["__main__", __name__])
        else:
            context = multiprocessing.get_context("spawn")
        self.blocks = [list(block) for block in np.array_split(np.arange(len(seeds)), workers)]
        self.connections: list[multiprocessing.connection.Connection] = []
        self.processes: list[Any] = []
        self.games: list[RemoteGame] = []
        self.held = [len(block) for block in self.blocks]  # games made in each worker, those of ``add`` too
        try:
            for block in self.blocks:
                mine, theirs = context.Pipe()
                process = context.Process(
                    target=serve, args=(theirs, make, [seeds[g] for g in block], dict(os.environ)), daemon=True
                )
                process.start()
                theirs.close()  # the worker's end lives in the worker alone: its death closes the pipe here
                self.connections.append(mine)
                self.processes.append(process)
            for worker in range(len(self.blocks)):
                if not self.connections[worker].poll(START_SECONDS):
                    raise EnvironmentFailed(f"the process of {self.holding(worker)} did not start")
                for index, layout in enumerate(self.receive(worker)):
                    self.games.append(RemoteGame(self, worker, index, *layout))
        except BaseException:
            self.close()
            raise

    def add(self, seeds: list[int]) -> list[RemoteGame]:
        """Games of ``seeds`` made in the workers, each in the one holding fewest; what stands in for them here, in
        that order."""
        held, owners = list(self.held), []
        for _ in seeds:
            owners.append(held.index(min(held)))
            held[owners[-1]] += 1
        workers = sorted(set(owners))
        for worker in workers:
            self.send(worker, ("make", [seed for seed, owner in zip(seeds, owners, strict=True) if owner == worker]))
        made = {}
        for worker in workers:
            layouts = self.receive(worker)
            first, self.held[worker] = self.held[worker], self.held[worker] + len(layouts)
            made[worker] = iter([RemoteGame(self, worker, first + k, *layout) for k, layout in enumerate(layouts)])
        return [next(made[owner]) for owner in owners]

    def step(self, actions: np.ndarray, meanwhile: Callable[[], None] | None = None) -> None:
        """Every game's step with its action, in every worker at once (``meanwhile`` done here as they play); each
        ``RemoteGame.step`` then gives its own."""
        self.step_games(self.games, actions, meanwhile)

    def step_games(
        self, games: Sequence[Any], actions: Sequence[int] | np.ndarray, meanwhile: Callable[[], None] | None = None
    ) -> None:
        """A step of each of ``games`` that is one of these workers' (any other is left alone), with its action, in
        every worker at once, ``meanwhile`` done here as they play; each ``RemoteGame.step`` then gives its own."""
        steps: dict[int, list[tuple[RemoteGame, int]]] = {}
        for game, action in zip(games, actions, strict=True):
            if isinstance(game, RemoteGame) and game.workers is self:
                steps.setdefault(game.worker, []).append((game, int(action)))
        for worker, pairs in steps.items():
            self.send(worker, ("step", [(game.index, action) for game, action in pairs]))
        if meanwhile is not None:
            meanwhile()
        for worker, pairs in steps.items():
            for (game, _), (result, next_first_frame) in zip(pairs, self.receive(worker), strict=True):
                game.result, game.next_first_frame = result, next_first_frame

    def call(self, worker: int, command: str, argument: Any) -> Any:
        self.send(worker, (command, argument))
        return self.receive(worker)

    def send(self, worker: int, message: tuple[str, Any]) -> None:
        try:
            self.connections[worker].send(message)
        except OSError:  # a broken pipe: the worker is gone
            raise self.gone(worker) from None

    def receive(self, worker: int) -> Any:
        try:
            answer = self.connections[worker].recv()
        except (EOFError, OSError):
            raise self.gone(worker) from None
        if answer[0] == "ok":
            return answer[1]
        _, kind, message = answer
        if kind == EmulatorStateError.__name__:
            raise EmulatorStateError(message)
        if kind in (EnvironmentFailed.__name__, "ObservationError"):
            raise EnvironmentFailed(message)
        raise EnvironmentFailed(f"a game raised {kind}: {message}")

    def gone(self, worker: int) -> EnvironmentFailed:
        process = self.processes[worker]
        process.join(timeout=5)
        return EnvironmentFailed(f"the process of {self.holding(worker)} died (exit code {process.exitcode})")

    def close(self) -> None:
        """End the workers (they end by themselves when this process does, too)."""
        for connection in self.connections:
            with contextlib.suppress(OSError):  # a worker already gone
                connection.send(("close", None))
            connection.close()
        for process in self.processes:
            process.join(timeout=5)
            if process.is_alive():
                process.kill()
                process.join()
        self.connections, self.processes = [], []

    def holding(self, worker: int) -> str:
        """What a worker holds, for messages: its training games, else evaluation games."""
        block = self.blocks[worker]
        if not block:
            return f"evaluation games (worker {worker + 1} of {len(self.blocks)})"
        return f"training games {block[0]}-{block[-1]}" if len(block) > 1 else f"training games {block[0]}"


class RemoteGame:
    """A game in a worker process, with the surface ``Player`` and an evaluation use: ``step`` gives the result of
    the step ``GameWorkers.step_games`` took for it; ``reset`` gives the first frame the worker already took when that
    step ended a training game, else goes to the worker and back, as ``reseed`` and the emulator's state do."""

    def __init__(
        self, workers: GameWorkers, worker: int, index: int, n_actions: int, stack_depth: int, frame_shape: tuple
    ) -> None:
        self.workers, self.worker, self.index = workers, worker, index
        self.n_actions, self.stack_depth, self.frame_shape = n_actions, stack_depth, tuple(frame_shape)
        self.result: StepResult | None = None
        self.next_first_frame: np.ndarray | None = None  # the reset the worker did after the step that ended a game

    def step(self, action: int) -> StepResult:
        result, self.result = self.result, None
        if result is None:
            raise RuntimeError("a game in a worker steps only through GameWorkers.step")
        return result

    def reset(self) -> np.ndarray:
        frame, self.next_first_frame = self.next_first_frame, None
        return self.workers.call(self.worker, "reset", self.index) if frame is None else frame

    def reseed(self, seed: int) -> None:
        self.next_first_frame = None
        self.workers.call(self.worker, "reseed", (self.index, seed))

    def get_state(self) -> dict[str, Any]:
        return self.workers.call(self.worker, "get_state", self.index)

    def set_state(self, state: dict[str, Any]) -> None:
        self.next_first_frame = None
        self.workers.call(self.worker, "set_state", (self.index, state))
