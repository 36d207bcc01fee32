"""Training games stepped in worker processes (``--env-workers W``): the ``--envs`` games split among W processes,
each stepping its own while the others step theirs, so that a round of N games takes the time of N / W emulator
steps rather than N. The emulator's Python binding holds the GIL, so threads would not run them side by side.

Each game is the object the training loop would make in its own process (``main.make_env`` with the game's seed), so
a run with workers plays the frames, scores and draws of the same run without them, bit for bit; only where the
emulators run changes. The loop sends every game its action, then each ``Player`` takes its game's result from its
``RemoteGame`` as it would from the game itself. Resets, and a checkpoint's emulator states, go to the one worker
that holds the game. A worker ignores Ctrl-C (the run's stop is the training process's to handle) and ends when the
training process does, killed or not: its end of the pipe closes.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
import signal
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from dqn_atari.utils_env import AtariEnv, EmulatorStateError, EnvironmentFailed, GymEnv
from dqn_atari.utils_types import StepResult

START_SECONDS = 120.0  # for a worker to import torch and make its games (a loaded machine takes a while)


def serve(connection: multiprocessing.connection.Connection, make: Callable[[int], Any], seeds: list[int]) -> None:
    """A worker's life: make the games of ``seeds``, then do what the training process asks of them until it says
    stop or goes away."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group: the run stops the games
    torch.set_num_threads(1)  # the frames' resize is torch's: one thread per worker, the training process has its own
    try:
        games = [make(seed) for seed in seeds]
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
            if command == "step":
                answer: Any = [game.step(action) for game, action in zip(games, argument, strict=True)]
            elif command == "reset":
                answer = games[argument].reset()
            elif command == "get_state":
                answer = games[argument].get_state()
            else:  # set_state
                index, state = argument
                answer = games[index].set_state(state)
            connection.send(("ok", answer))
        except Exception as error:  # the game's own failure, said in the training process
            connection.send(("error", type(error).__name__, str(error)))


class GameWorkers:
    """The training games of ``seeds`` made by ``make(seed)`` in ``workers`` processes (consecutive games in each);
    ``games`` stand in for them in the training process."""

    def __init__(self, make: Callable[[int], AtariEnv | GymEnv], seeds: list[int], workers: int) -> None:
        context = multiprocessing.get_context("spawn")  # a fork of a process running torch's threads can hang
        self.blocks = [list(block) for block in np.array_split(np.arange(len(seeds)), workers)]
        self.connections: list[multiprocessing.connection.Connection] = []
        self.processes: list[Any] = []
        self.games: list[RemoteGame] = []
        try:
            for block in self.blocks:
                mine, theirs = context.Pipe()
                process = context.Process(target=serve, args=(theirs, make, [seeds[g] for g in block]), daemon=True)
                process.start()
                theirs.close()  # the worker's end lives in the worker alone: its death closes the pipe here
                self.connections.append(mine)
                self.processes.append(process)
            for worker, block in enumerate(self.blocks):
                if not self.connections[worker].poll(START_SECONDS):
                    raise EnvironmentFailed(f"the process of training games {describe(block)} did not start")
                for index, layout in enumerate(self.receive(worker)):
                    self.games.append(RemoteGame(self, worker, index, *layout))
        except BaseException:
            self.close()
            raise

    def step(self, actions: np.ndarray) -> None:
        """Every game's step with its action, in every worker at once; each ``RemoteGame.step`` then gives its own."""
        for worker, block in enumerate(self.blocks):
            self.send(worker, ("step", [int(actions[g]) for g in block]))
        for worker, block in enumerate(self.blocks):
            for g, result in zip(block, self.receive(worker), strict=True):
                self.games[g].result = result

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
        raise EnvironmentFailed(f"a training game raised {kind}: {message}")

    def gone(self, worker: int) -> EnvironmentFailed:
        process = self.processes[worker]
        process.join(timeout=5)
        return EnvironmentFailed(
            f"the process of training games {describe(self.blocks[worker])} died (exit code {process.exitcode})"
        )

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


def describe(block: list[int]) -> str:
    return f"{block[0]}-{block[-1]}" if len(block) > 1 else str(block[0])


class RemoteGame:
    """A training game in a worker process, with the surface ``Player`` uses: ``step`` gives the result of the
    step ``GameWorkers.step`` took for it; ``reset`` and the emulator's state go to its worker and back."""

    def __init__(
        self, workers: GameWorkers, worker: int, index: int, n_actions: int, stack_depth: int, frame_shape: tuple
    ) -> None:
        self.workers, self.worker, self.index = workers, worker, index
        self.n_actions, self.stack_depth, self.frame_shape = n_actions, stack_depth, tuple(frame_shape)
        self.result: StepResult | None = None

    def step(self, action: int) -> StepResult:
        result, self.result = self.result, None
        if result is None:
            raise RuntimeError("a game in a worker steps only through GameWorkers.step")
        return result

    def reset(self) -> np.ndarray:
        return self.workers.call(self.worker, "reset", self.index)

    def get_state(self) -> dict[str, Any]:
        return self.workers.call(self.worker, "get_state", self.index)

    def set_state(self, state: dict[str, Any]) -> None:
        self.workers.call(self.worker, "set_state", (self.index, state))
