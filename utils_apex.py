"""Ape-X (Horgan et al. 2018): actors that play in Ray worker processes and feed one learner.

Each actor owns one game, a CPU copy of the network with one torch thread, and its own
epsilon from a fixed ladder. It plays ``chunk_steps`` steps per call and returns them, with
the chunk's first-of-game flags and finished games, through Ray's object store; the learner
(main.py) pushes each chunk into that actor's own stream of the replay memory, so stacks and
n-step windows never mix two actors' frames.

An actor sends step t only once it has played step t + n, when t's n-step window is
complete: with ``td_errors`` it then computes t's priority (its TD error, or C51's cross-entropy) with its
own network, exactly as the learner would (its network standing in for the target), and the prioritized memory
gives the new transition that priority instead of the maximum.

``ActorPool`` is the Ray side: it keeps ``PIPELINE`` calls in flight per actor, so an actor
plays its next chunk while the learner takes the last one, and never more, which is the
back-pressure that stops actors running ahead of a slow learner. A failed call's chunk is
dropped, the actor restarted (by Ray when its process died), and the learner told in one line.
An actor is given up only when it has delivered nothing for longer than a restart can take on
this machine: three times the longest its actors took to deliver their first chunk (they start
like a restarted one does; on a loaded machine that is minutes), and at least a minute.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from dqn_atari.utils_drl import Agent
from dqn_atari.utils_env import STACK_DEPTH, AtariEnv, Player
from dqn_atari.utils_memory import ReplayMemory
from dqn_atari.utils_types import NATURE_STACKS, GameResult, StackRule

PIPELINE = 2  # calls in flight per actor: one playing, one queued behind it
RETRY_SECONDS = 2.0  # first wait before calling a failed actor again; the n-th failure waits n times this,
MAX_RETRY_SECONDS = 10.0  # up to this
RESTART_STARTS = 3.0  # a restart may take this many times the actors' first start
MIN_RESTART_SECONDS = 60.0
POLL_SECONDS = 1.0  # longest single wait for a chunk, so Ctrl-C and timeouts are seen promptly
PROJECT_DIR = Path(__file__).resolve().parent
# A checkout (whose dqn_atari/ gives this folder the package's name) is put on the actors' path, or
# shipped to a cluster's nodes; an installed package is already on every path it is installed on.
CHECKOUT = (PROJECT_DIR / "dqn_atari" / "__init__.py").is_file()


def actor_epsilons(count: int) -> list[float]:
    """Actor i of N explores with 0.4 ** (1 + 7 i / (N - 1)), from 0.4 down to 0.4 ** 8 (Ape-X's
    ladder); a single actor gets 0.4."""
    if count == 1:
        return [0.4]
    return [0.4 ** (1 + 7 * i / (count - 1)) for i in range(count)]


class ApexError(Exception):
    """The actors are gone; the message is one line for the user."""


class RayStartError(ApexError):
    """Ray cannot be started or joined; nothing has been trained."""


@dataclass(frozen=True)
class ActorConfig:
    env: dict[str, Any]  # AtariEnv's keyword arguments but the seed (main.env_options)
    agent: dict[str, Any]  # Agent's keyword arguments (main.agent_options)
    seed: int
    n_step: int
    gamma: float
    chunk_steps: int
    weights_every: int
    td_errors: bool  # compute each transition's TD error (for prioritized replay)
    stack_rule: StackRule = NATURE_STACKS  # how the learner's memory builds stacks (main.stack_rule)
    clip_rewards: bool = True  # the rewards the memory holds: clipped to their sign, or the game's own


@dataclass
class Weights:
    """The learner's online network as numpy arrays (read without a copy from Ray's object store)."""

    version: int
    arrays: dict[str, np.ndarray]


def export_weights(network: torch.nn.Module, version: int) -> Weights:
    return Weights(version, {name: value.detach().cpu().numpy() for name, value in network.state_dict().items()})


@dataclass
class Chunk:
    """Consecutive steps of one actor, in the replay memory's terms (see ``ReplayMemory.push``)."""

    actor: int
    process: int  # a random id of the actor process that played it: a restarted actor gets a new one
    start: int  # how many steps that process had sent before this chunk (0: its first, a new game)
    epsilon: float
    frames: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    dones: np.ndarray
    firsts: np.ndarray
    td_errors: np.ndarray  # nan where not computed
    games: dict[int, GameResult] = field(default_factory=dict)  # index of a game's last step -> the game

    def __len__(self) -> int:
        return len(self.actions)

    def push(self, memory: ReplayMemory, index: int) -> None:
        """Push step ``index`` into the actor's stream of ``memory``."""
        memory.push(
            self.frames[index],
            int(self.actions[index]),
            float(self.rewards[index]),
            bool(self.dones[index]),
            bool(self.firsts[index]),
            stream=self.actor,
            td_error=float(self.td_errors[index]),
        )


class Actor:
    """Plays one game with epsilon-greedy actions from the newest weights it was sent."""

    def __init__(self, config: ActorConfig, index: int, count: int) -> None:
        torch.set_num_threads(1)  # the learner and the other actors have the other cores
        self.config = config
        self.index = index
        self.process = int.from_bytes(os.urandom(7), "little")
        # Seeded per process: a restarted actor plays new games rather than replaying its first ones.
        seed = int(np.random.SeedSequence([config.seed, 2, index, self.process]).generate_state(1)[0])
        env = AtariEnv(seed=seed, **config.env)
        # Noisy networks explore by their noise, with no epsilon (Fortunato et al. 2018), as the single loop.
        self.epsilon = actor_epsilons(count)[index] if config.agent.get("noisy_sigma0") is None else 0.0
        self.agent = Agent(env.n_actions, "cpu", seed=seed, **config.agent)
        # The steps not sent yet and the 3 before them, whose frames their stacks need.
        capacity = config.chunk_steps + config.n_step + STACK_DEPTH + 1
        self.recent = ReplayMemory(
            capacity, STACK_DEPTH, n_step=config.n_step, gamma=config.gamma, seed=seed, stack_rule=config.stack_rule
        )
        self.player = Player(env, self.recent, config.clip_rewards)
        self.played = 0
        self.sent = 0
        self.games: list[tuple[int, GameResult]] = []  # (step, game) of games not sent yet
        self.weights_version = -1
        self.steps_on_weights = 0  # steps played with the current weights

    def collect(self, weights: Weights | None) -> Chunk:
        """Take ``weights`` if they are newer and the current ones have played ``weights_every``
        steps, play ``chunk_steps`` steps, and return every step whose n-step window is complete."""
        if (
            weights is not None
            and weights.version > self.weights_version
            and (self.weights_version < 0 or self.steps_on_weights >= self.config.weights_every)
        ):
            self.agent.online.load_state_dict({name: torch.from_numpy(value) for name, value in weights.arrays.items()})
            self.agent.sync_target()
            self.weights_version, self.steps_on_weights = weights.version, 0
        for _ in range(self.config.chunk_steps):
            game = self.player.step(self.agent.act(self.player.state, self.epsilon))
            if game is not None:
                self.games.append((self.played, game))
            self.played += 1
            self.steps_on_weights += 1
        return self._send(max(self.sent, self.played - self.config.n_step))

    def _send(self, end: int) -> Chunk:
        """The steps from ``self.sent`` to ``end`` (exclusive) as a chunk."""
        recent = self.recent
        slots = np.arange(self.sent, end) % recent.capacity
        td_errors = np.full(len(slots), np.nan, dtype=np.float32)
        if self.config.td_errors:
            complete = recent.sampleable(slots)  # not: the last step of a game cut by the frame limit
            if complete.any():
                td_errors[complete] = self.agent.priorities(recent.transitions(slots[complete]))
        chunk = Chunk(
            actor=self.index,
            process=self.process,
            start=self.sent,
            epsilon=self.epsilon,
            frames=recent.frames[slots],
            actions=recent.actions[slots],
            rewards=recent.rewards[slots],
            dones=recent.dones[slots],
            firsts=recent.starts[slots],
            td_errors=td_errors,
            games={step - self.sent: game for step, game in self.games if step < end},
        )
        self.games = [(step, game) for step, game in self.games if step >= end]
        self.sent = end
        return chunk


def start_ray(address: str | None, cpus: int) -> bool:
    """Start a local Ray with ``cpus`` CPUs, or join the cluster at ``address``; return whether
    this call started it (False when this process had already). The actors' output is kept off
    the terminal: the learner reports what happens to them itself."""
    import ray

    if ray.is_initialized():
        return False
    # A worker that exits (its driver killed, even by SIGKILL) would SIGKILL the processes it started,
    # a sweep's main.py runs among them: they are to get the SIGTERM their parent's death sends them
    # (sweep.stop_with_parent), and save their checkpoints.
    options: dict[str, Any] = {"_system_config": {"kill_child_processes_on_worker_exit": False}}
    if address is None:
        if CHECKOUT:
            path = os.pathsep.join(filter(None, [str(PROJECT_DIR), os.environ.get("PYTHONPATH")]))
            options["runtime_env"] = {"env_vars": {"PYTHONPATH": path}}
    else:  # the other nodes get a checkout's code (not its runs) from the cluster; it has its own config
        reach_cluster(address)
        excludes = ["runs/", "results/", ".venv/", ".git/", "docs/", "*.pt", "__pycache__/"]
        options = {"runtime_env": {"working_dir": str(PROJECT_DIR), "excludes": excludes}} if CHECKOUT else {}
    # A Ctrl-C inside ray.init can leave Ray half built: raised in its CoreWorker's constructor, the
    # process dies of SIGSEGV at exit; raised in one of its callbacks, it is dropped and the run goes
    # on. So the first one (or a SIGTERM before Ray swaps in its own) is held until ray.init returns,
    # then given to the caller's handler; a second one stops at once. ray.init also replaces the
    # SIGTERM handler (a stack dump, then abort): the caller's, which save a checkpoint, are put back.
    in_main_thread = threading.current_thread() is threading.main_thread()
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    handlers = {signum: handler for signum, handler in handlers.items() if handler is not None}
    held: list[int] = []

    def hold(signum: int, frame: Any) -> None:
        if held:
            raise KeyboardInterrupt
        held.append(signum)
        tqdm.write("Stopping once Ray has started (Ctrl-C again to stop at once).")

    if in_main_thread:
        for signum in handlers:
            signal.signal(signum, hold)
    try:
        ray.init(
            address=address,
            num_cpus=cpus if address is None else None,
            include_dashboard=False,
            logging_level=logging.ERROR,
            log_to_driver=False,
            **options,
        )
        if address is None:
            with contextlib.suppress(Exception):  # a private attribute of Ray's: without it, no reaper
                start_reaper(ray._private.worker._global_node.get_session_dir_path())
    except Exception as error:  # Ray raises several types; each ends the run the same way
        where = f"join the Ray cluster at {address}" if address else "start Ray"
        raise RayStartError(f"cannot {where}: {first_line(error)}") from error
    finally:
        if in_main_thread:
            for signum, handler in handlers.items():
                signal.signal(signum, handler)
            for signum in held[:1]:
                signal.raise_signal(signum)
    return True


# Run by a small process of its own (only the standard library: it starts in a blink): once the
# process that started it is gone, it stops every process still using that process's Ray session
# folder, SIGTERM first, SIGKILL 3 seconds later.
REAPER = """
import os, signal, sys, time
session, parent = sys.argv[1], int(sys.argv[2])
while os.getppid() == parent:
    time.sleep(0.5)

def uses_session(pid):
    try:
        if session.encode() in open(f"/proc/{pid}/cmdline", "rb").read():
            return True
        return any(os.readlink(f"/proc/{pid}/fd/{fd}").startswith(session) for fd in os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return False

for signum in (signal.SIGTERM, signal.SIGKILL):
    for pid in [int(name) for name in os.listdir("/proc") if name.isdigit() and int(name) != os.getpid()]:
        if uses_session(pid):
            try:
                os.kill(pid, signum)
            except OSError:
                pass
    time.sleep(3)
"""


def start_reaper(session: str) -> None:
    """After a Ray this process started, once this process is gone (even killed by SIGKILL, when
    Ray's own agents would otherwise live on for a minute): every process of its session stopped.
    Linux only (it reads /proc); elsewhere nothing is started."""
    if Path("/proc/self/fd").is_dir():
        subprocess.Popen(
            [sys.executable, "-c", REAPER, session, str(os.getpid())],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C to the terminal is not for it
        )


# An HTTP/2 client's first bytes (its preface and an empty SETTINGS frame): Ray's head answers on
# its port with gRPC, whose HTTP/2 server's first frame is a SETTINGS frame (type 4).
HTTP2_HELLO = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
SETTINGS_FRAME = 4


def reach_cluster(address: str, seconds: float = 10.0) -> None:
    """Fail at once, in one line, when nothing answers at a ``host:port`` address, or something
    that is not Ray does (Ray itself retries either for minutes). Other forms (``auto``,
    ``ray://...``) are left to Ray."""
    host, separator, port = address.rpartition(":")
    if not separator or not port.isdigit() or "/" in address:
        return
    try:
        connection = socket.create_connection((host, int(port)), timeout=seconds)
    except OSError as error:
        reason = error.strerror or str(error) or type(error).__name__
        raise RayStartError(
            f"cannot join the Ray cluster at {address}: {reason}; is `ray start --head` running there?"
        ) from error
    with connection:
        try:
            connection.sendall(HTTP2_HELLO)
            reply = connection.recv(9)
        except OSError:  # no answer in time, or the connection was dropped
            reply = b""
    if len(reply) < 9 or reply[3] != SETTINGS_FRAME:
        raise RayStartError(
            f"cannot join the Ray cluster at {address}: something answers there, but not Ray (no gRPC); "
            "is that the port `ray start --head` printed (6379 by default)?"
        )


def first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


def raised(error: BaseException) -> str:
    """What an actor raised, from Ray's error about it (the traceback's last line of the form
    ``module.SomeError: message``), else that error's first line."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).strip() for line in str(error).splitlines()]
    exceptions = [line for line in lines if re.fullmatch(r"(?:[a-z_]\w*\.)*[A-Z]\w*(?:: .*)?", line)]
    return exceptions[-1] if exceptions else first_line(error)


class ActorPool:
    """``count`` actors on Ray, each with ``PIPELINE`` ``collect`` calls in flight."""

    def __init__(self, config: ActorConfig, count: int, timeout: float, report: Callable[[str], None]) -> None:
        import ray

        self._ray = ray
        remote = ray.remote(num_cpus=1, max_restarts=-1, max_task_retries=0)(Actor)
        self.handles = [remote.remote(config, index, count) for index in range(count)]
        self.timeout = timeout
        self.report = report
        self.alive = [True] * count
        self.restarts = 0
        self._in_flight: list[deque[tuple[Any, int]]] = [deque() for _ in range(count)]  # (ref, call number)
        self._calls = 0
        self._echoes_before = [0] * count  # errors of calls made before a handled failure repeat it
        self._failures = [0] * count  # failed calls since the actor's last chunk
        self._failing_since: list[float | None] = [None] * count  # monotonic time of the first of them
        self._call_after = [0.0] * count  # monotonic time before which the actor gets no call
        self._expected: list[tuple[int, int] | None] = [None] * count  # (process, start) of the next chunk
        self._weights: Any = None
        self._created = time.monotonic()
        self._quiet_since: float | None = None  # the first call since the last chunk that found none
        self._first_start = 0.0  # the longest any actor took from its creation to its first chunk
        self.reasons: list[str | None] = [None] * count  # why each actor last failed

    @property
    def live(self) -> int:
        return sum(self.alive)

    def publish(self, weights: Weights) -> None:
        """Put ``weights`` in the object store; calls made from now on carry them."""
        with self._ray_alive():
            self._weights = self._ray.put(weights)

    def next_chunk(self, wait: bool) -> Chunk | None:
        """The next chunk to arrive, each actor's in order, or None if none did (within
        ``POLL_SECONDS`` when ``wait``, else at once) or one was lost. Raises ApexError once
        no actor is left, none has delivered for ``timeout`` seconds of waiting, or Ray itself
        is gone."""
        with self._ray_alive():
            return self._next_chunk(wait)

    @contextlib.contextmanager
    def _ray_alive(self) -> Iterator[None]:
        """Ray's own processes on this machine gone (its raylet or object store killed, a node
        shut down) surface as a broken connection: an ApexError, so the run saves its checkpoint."""
        try:
            yield
        except (OSError, self._ray.exceptions.RaySystemError) as error:
            raise ApexError(f"Ray stopped under the run ({first_line(error)})") from error

    def _next_chunk(self, wait: bool) -> Chunk | None:
        now = time.monotonic()
        for actor, alive in enumerate(self.alive):
            while alive and now >= self._call_after[actor] and len(self._in_flight[actor]) < PIPELINE:
                self._call(actor)
        if not any(self.alive):
            why = "; ".join(f"actor {actor}: {reason}" for actor, reason in enumerate(self.reasons) if reason)
            raise ApexError(f"every actor failed ({why})")
        heads = {queue[0][0]: actor for actor, queue in enumerate(self._in_flight) if queue}
        ready = []
        if heads:
            ready, _ = self._ray.wait(list(heads), num_returns=1, timeout=POLL_SECONDS if wait else 0)
        elif wait:  # every live actor is restarting
            time.sleep(POLL_SECONDS)
        if not ready:
            # Whether the learner waits or learns meanwhile (--replay-ratio free): hung actors stop the
            # run. The clock starts when the learner asks, not during an evaluation of its own.
            self._quiet_since = self._quiet_since or now
            if time.monotonic() - self._quiet_since > self.timeout:
                raise ApexError(
                    f"no actor delivered steps for {self.timeout:g} s ({self.live} of {len(self.alive)} "
                    "actors alive); see --actor-timeout"
                )
            return None
        actor = heads[ready[0]]
        _, call = self._in_flight[actor].popleft()
        try:
            chunk: Chunk = self._ray.get(ready[0])
        except self._ray.exceptions.ActorDiedError as error:
            if "creation task" in str(error):  # its constructor raised: Ray does not restart it
                self._give_up(actor, f"it could not start: {raised(error)}")
            else:
                self._give_up(actor, "it was killed for good, or its machine was lost")
            return None
        except self._ray.exceptions.RayActorError as error:  # Ray restarts it
            memory = "out of memory" in str(error).lower() or "low on memory" in str(error).lower()
            self._failed(actor, call, "its process died" + " (out of memory)" * memory, restart=False)
            return None
        except self._ray.exceptions.RayError as error:  # the actor's code raised: its game may be broken
            self._failed(actor, call, raised(error), restart=True)
            return None
        if chunk.start != 0 and self._expected[actor] != (chunk.process, chunk.start):
            # A chunk of this process was lost: the stream would join two pieces of a game.
            self._failed(actor, call, "it skipped a chunk", restart=True)
            return None
        if self._expected[actor] is None:
            self._first_start = max(self._first_start, time.monotonic() - self._created)
        self._expected[actor] = (chunk.process, chunk.start + len(chunk))
        self._failures[actor], self._failing_since[actor] = 0, None
        self._quiet_since = None
        return chunk

    def _call(self, actor: int) -> None:
        self._calls += 1
        self._in_flight[actor].append((self.handles[actor].collect.remote(self._weights), self._calls))

    def restart_budget(self) -> float:
        """How long a failing actor may go without a chunk before it is given up."""
        return max(MIN_RESTART_SECONDS, RESTART_STARTS * self._first_start)

    def _failed(self, actor: int, call: int, reason: str, restart: bool) -> None:
        """Handle a lost chunk: report the first loss since the actor's last chunk, restart the
        actor where Ray does not, and wait longer before each further call to it."""
        if call <= self._echoes_before[actor]:
            return  # a call made before a failure already handled: the same loss again
        self._echoes_before[actor] = self._calls
        self._failures[actor] += 1
        self.reasons[actor] = reason
        failures, now = self._failures[actor], time.monotonic()
        self._failing_since[actor] = self._failing_since[actor] or now
        if now - self._failing_since[actor] > self.restart_budget():
            self._give_up(
                actor, f"nothing delivered for {now - self._failing_since[actor]:.0f} s of restarts; {reason}"
            )
            return
        if restart:
            self._ray.kill(self.handles[actor], no_restart=False)
        # Calls to an actor that is still starting fail at once: give it time, more after each failure.
        self._call_after[actor] = now + min(RETRY_SECONDS * failures, MAX_RETRY_SECONDS)
        if failures == 1:
            self.restarts += 1
            self.report(f"actor {actor} lost its chunk ({reason}); restarting it")

    def _give_up(self, actor: int, reason: str) -> None:
        self.alive[actor] = False
        self.reasons[actor] = reason
        self._in_flight[actor].clear()
        self._ray.kill(self.handles[actor], no_restart=True)
        self.report(f"actor {actor} is gone ({reason}); going on without it")

    def close(self, shutdown: bool) -> None:
        """Stop the actors, and Ray itself when ``shutdown`` (this run started it). A Ray that is
        already gone raises nothing here: the run reports what happened to it."""
        with contextlib.suppress(OSError, self._ray.exceptions.RayError):
            self._close(shutdown)

    def _close(self, shutdown: bool) -> None:
        if shutdown:
            self._ray.shutdown()
            return
        for handle in self.handles:
            self._ray.kill(handle, no_restart=True)


def local_cpus_note(actors: int, cpus: int) -> str | None:
    """A warning when the actors and the learner are more busy processes than this machine has CPUs."""
    if actors + 1 <= cpus:
        return None
    return (
        f"{actors} actors and the learner share {cpus} CPUs here: they slow each other down; "
        f"--actors {max(1, cpus - 1)} leaves the learner a core"
    )
