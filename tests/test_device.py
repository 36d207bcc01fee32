"""The replay memory with its frames on the training device: the same batches as the host memory's,
checked here with the device code on the CPU; on a GPU (tests marked cuda, skipped without one) the
memories, the training loop, a resume across devices and an evaluation."""

import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from test_memory import fill_streams, play_log

from dqn_atari import main
from dqn_atari.utils_drl import Agent, GraphedLearning
from dqn_atari.utils_heads import CategoricalHead
from dqn_atari.utils_memory import PrioritizedReplayMemory, ReplayMemory
from dqn_atari.utils_run import load_checkpoint
from dqn_atari.utils_types import NATURE_STACKS, Batch, StackRule

ROOT = Path(__file__).resolve().parent.parent
DOPAMINE_STACKS = StackRule(zero_fill=True, per_life=True)
CPU_TINY = [
    "--env", "Breakout", "--learning-starts", "100", "--memory-size", "1000", "--eval-episodes", "1",
    "--max-episode-frames", "2000", "--target-every", "50",
]  # fmt: skip
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]


def memory_pair(memory_type, device, streams=1, **options):
    """The same memory twice, frames in host RAM and on ``device``, filled with the same random games."""
    capacity = 60 if streams == 1 else 90
    logs = [play_log(150 - 20 * stream, seed=7 + stream) for stream in range(streams)]
    pair = []
    for on_device in (False, True):
        memory = memory_type(
            capacity, frame_shape=(1, 3), device=device, seed=3, streams=streams, frames_on_device=on_device, **options
        )
        fill_streams(memory, logs, seed=2)
        pair.append(memory)
    return pair


def assert_same_batch(a, b):
    assert np.array_equal(a.indices, b.indices)
    for name in ("states", "actions", "returns", "next_states", "discounts", "weights"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.device == y.device and x.dtype == y.dtype and torch.equal(x, y), name


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rule", [NATURE_STACKS, DOPAMINE_STACKS], ids=["nature", "dopamine"])
@pytest.mark.parametrize("n_step,streams", [(1, 1), (3, 1), (3, 3)])
@pytest.mark.parametrize("memory_type", [ReplayMemory, PrioritizedReplayMemory], ids=["uniform", "prioritized"])
def test_device_frames_give_the_host_memorys_batches(memory_type, n_step, streams, rule, device):
    host, on_device = memory_pair(memory_type, device, streams, n_step=n_step, gamma=0.9, stack_rule=rule)
    assert isinstance(on_device.frames, torch.Tensor) and on_device.frames.device.type == device
    rng = np.random.default_rng(0)
    for _ in range(5):
        a, b = host.sample(16, beta=0.4), on_device.sample(16, beta=0.4)
        assert_same_batch(a, b)
        assert a.states.device.type == device
        td_errors = rng.random(16).astype(np.float32)
        host.update_priorities(a.indices, td_errors)
        on_device.update_priorities(b.indices, torch.from_numpy(td_errors).to(device))  # as the learner gives them
    if memory_type is PrioritizedReplayMemory:
        assert np.array_equal(host.tree.nodes, on_device.tree.nodes)
    slots = host.sample(8).indices
    assert_same_batch(host.transitions(slots), on_device.transitions(slots))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("memory_type", [ReplayMemory, PrioritizedReplayMemory], ids=["uniform", "prioritized"])
def test_saved_memory_moves_between_host_and_device(memory_type, device):
    """A memory saved from either place loads into the other and samples the same batches."""
    host, on_device = memory_pair(memory_type, device, streams=2, n_step=3)
    for source, target_on_device in ((host, True), (on_device, False)):
        buffer = io.BytesIO()
        torch.save(source.state_dict(), buffer)
        buffer.seek(0)
        copy = memory_type(90, frame_shape=(1, 3), device=device, seed=99, streams=2, n_step=3,
                           frames_on_device=target_on_device)  # fmt: skip
        copy.load_state_dict(torch.load(buffer, weights_only=True))
        for _ in range(3):
            assert_same_batch(source.sample(16, beta=0.5), copy.sample(16, beta=0.5))


def test_memory_device_flag_on_the_cpu(tmp_path, capsys):
    """--memory-device device with --device cpu runs the device code in a whole run, which learns
    exactly what the host memory's run learns; each says where its memory is."""
    for where, said in (("device", "replay memory on cpu"), ("host", "replay memory in host RAM")):
        run = tmp_path / where
        argv = [*CPU_TINY, "--steps", "200", "--eval-every", "100", "--device", "cpu", "--memory-device", where]
        assert main.main([*argv, "--out", str(run)]) == 0
        assert said in capsys.readouterr().out.splitlines()[0]
    scores = [[line.split()[:3] for line in (tmp_path / where / "rewards.txt").read_text().splitlines()]
              for where in ("device", "host")]  # fmt: skip
    assert scores[0] == scores[1] and len(scores[0]) == 3
    weights = [load_checkpoint(tmp_path / where / "model_002.pt")["agent"]["online"] for where in ("device", "host")]
    assert all(torch.equal(weights[0][name], weights[1][name]) for name in weights[0])


def test_cuda_graphs_need_a_gpu():
    cpu = Agent(4, "cpu", cuda_graphs=True)
    assert not cpu.graphs and not cpu.graphed_acts  # the flag is harmless where there is no GPU
    if torch.cuda.is_available():
        assert Agent(4, "cuda", cuda_graphs=True).graphs
        augmented = Agent(4, "cuda", cuda_graphs=True, augment="dopamine")
        assert augmented.graphs and augmented.graphed_acts


def test_a_checkpoint_of_either_choice_loads_with_this_runs_cuda_graphs():
    """Adam's capturable flag is the loading run's: a state saved with --cuda-graphs on a GPU (capturable
    Adam) resumes without graphs, on the CPU too, and the other way."""
    saved = Agent(4, "cpu", seed=2)
    batch = random_batch(np.random.default_rng(1), "cpu", size=8)
    saved.learn(batch)
    state = saved.state_dict()
    state["optimizer"]["param_groups"][0]["capturable"] = True  # as a --cuda-graphs run saves it
    agent = Agent(4, "cpu", seed=3)
    agent.load_state_dict(state)
    assert not agent.optimizer.param_groups[0]["capturable"]
    agent.learn(batch)  # a capturable Adam on CPU parameters would refuse to step


def test_auto_keeps_the_memory_in_host_ram_without_a_gpu():
    from dqn_atari import utils_config

    args = utils_config.options_of(["--device", "cpu", "--memory-size", "1000"])
    assert args.memory_device == "auto" and not utils_config.memory_on_device(args)


# On a GPU.


def random_batch(rng: np.random.Generator, device: str, size: int = 32) -> Batch:
    frames = torch.from_numpy(rng.integers(0, 256, (size, 5, 84, 84), dtype=np.uint8)).to(device)
    return Batch(
        states=frames[:, :4],
        actions=torch.from_numpy(rng.integers(0, 4, size)).to(device),
        returns=torch.from_numpy(rng.normal(size=size).astype(np.float32)).to(device),
        next_states=frames[:, 1:],
        # Terminal windows (0), one step's gamma and n-step windows cut short (a power of it), mixed.
        discounts=torch.from_numpy(rng.choice(np.float32([0.0, 0.99, 0.99**2, 0.99**3]), size)).to(device),
        weights=torch.from_numpy(rng.random(size).astype(np.float32)).to(device),
        indices=np.arange(size),
    )


@pytest.mark.cuda
@pytest.mark.parametrize(
    "double,dueling,options",
    [(False, False, {}), (True, True, {}), (True, True, {"head": CategoricalHead(), "noisy_sigma0": 0.5})],
    ids=["dqn", "double-dueling", "c51-noisy"],
)
def test_the_graphed_learning_step_learns_as_the_eager_one(double, dueling, options):
    """--cuda-graphs replays one captured step: the same losses, priorities and weights as the eager
    steps, across a target sync and a checkpoint's load (C51 and noisy layers: their noise, drawn on the host,
    read by the graph in place)."""
    eager, graphed = (
        Agent(4, "cuda", seed=1, double=double, dueling=dueling, cuda_graphs=flag, **options) for flag in (False, True)
    )
    rng = np.random.default_rng(0)
    for step in range(12):
        batch = random_batch(rng, "cuda")
        a, b = eager.learn(batch), graphed.learn(batch)
        for x, y in zip(a, b, strict=True):
            torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-5)
        if step == 6:
            eager.sync_target()
            graphed.sync_target()
    assert graphed.graphed is not None and graphed.eager_steps == GraphedLearning.WARMUP_STEPS
    for name, weights in eager.online.state_dict().items():
        torch.testing.assert_close(graphed.online.state_dict()[name], weights, rtol=1e-4, atol=1e-5)
    state = eager.state_dict()
    graphed.load_state_dict(state)
    assert graphed.graphed is None  # captured again after the load, from the loaded tensors
    for _ in range(GraphedLearning.WARMUP_STEPS + 2):
        batch = random_batch(rng, "cuda")
        torch.testing.assert_close(eager.learn(batch).loss, graphed.learn(batch).loss, rtol=1e-4, atol=1e-5)
    assert graphed.graphed is not None
    # A state without Adam's moments (an agent that never learned): warmed up again, Adam's making left out of the
    # capture, and the weights those steps leave are the eager steps'.
    fresh = Agent(4, "cuda", seed=2, double=double, dueling=dueling, **options).state_dict()
    eager.load_state_dict(fresh)
    graphed.load_state_dict(fresh)
    assert graphed.eager_steps == 0
    for _ in range(GraphedLearning.WARMUP_STEPS + 3):
        batch = random_batch(rng, "cuda")
        torch.testing.assert_close(eager.learn(batch).loss, graphed.learn(batch).loss, rtol=1e-4, atol=1e-5)
    assert graphed.graphed is not None
    for name, weights in eager.online.state_dict().items():
        torch.testing.assert_close(graphed.online.state_dict()[name], weights, rtol=1e-4, atol=1e-5)


@pytest.mark.cuda
@pytest.mark.parametrize("augment", ["shift", "dopamine"])
def test_the_graphed_augmented_step_learns_as_the_eager_one(augment):
    """With --augment, the draws made on the host are the graph's inputs: the Atari 100k preset's agent
    (Dopamine's network, double, dueling, no separate target) learns the same in a graph as eagerly,
    its draws the same values, and a loaded state's generator goes on drawing them."""
    eager, graphed = (
        Agent(
            4, "cuda", seed=1, double=True, dueling=True, network="dopamine", separate_target=False,
            augment=augment, cuda_graphs=flag,
        )
        for flag in (False, True)
    )  # fmt: skip
    rng = np.random.default_rng(0)
    for _ in range(GraphedLearning.WARMUP_STEPS + 6):
        batch = random_batch(rng, "cuda")
        for x, y in zip(eager.learn(batch), graphed.learn(batch), strict=True):
            torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-5)
    assert graphed.graphed is not None and graphed.graphed.draws is not None
    assert torch.equal(eager.augment_rng.get_state(), graphed.augment_rng.get_state())
    for name, weights in eager.online.state_dict().items():
        torch.testing.assert_close(graphed.online.state_dict()[name], weights, rtol=1e-4, atol=1e-5)
    graphed.load_state_dict(eager.state_dict())
    for _ in range(GraphedLearning.WARMUP_STEPS + 2):
        batch = random_batch(rng, "cuda")
        torch.testing.assert_close(eager.learn(batch).loss, graphed.learn(batch).loss, rtol=1e-4, atol=1e-5)
    assert graphed.graphed is not None


@pytest.mark.cuda
def test_the_graphed_action_follows_the_learning_weights():
    """The greedy action's graph reads the parameters in place: after learning steps (eager, then
    graphed), a target sync and a load, it picks the eager forward pass's action for every state."""
    agent = Agent(4, "cuda", seed=1, lr=1e-2, cuda_graphs=True)
    other = Agent(4, "cuda", seed=5, cuda_graphs=False)
    rng = np.random.default_rng(0)

    def assert_acts_as_eager() -> None:
        states = rng.integers(0, 256, (40, 4, 84, 84), dtype=np.uint8)
        with torch.no_grad():  # one state at a time, as the graph has it: the same kernels
            expected = [int(agent.q_values(torch.from_numpy(state[None]).cuda()).argmax()) for state in states]
        assert [agent.act(state, 0.0) for state in states] == expected
        for size in (3, 8):  # a graph per batch size, as --envs and --eval-envs ask
            with torch.no_grad():
                batch = agent.q_values(torch.from_numpy(states[:size]).cuda()).argmax(dim=1).tolist()
            assert agent.act_all(states[:size], 0.0).tolist() == batch

    assert_acts_as_eager()
    assert agent.graphed_acting
    for step in range(8):
        agent.learn(random_batch(rng, "cuda"))
        if step == 4:
            agent.sync_target()
        assert_acts_as_eager()
    agent.load_state_dict(other.state_dict())
    assert not agent.graphed_acting
    assert_acts_as_eager()


@pytest.mark.cuda
def test_a_graphed_noisy_c51_agent_acts_as_the_eager_one():
    """The acting graph reads the noise each action draws (and the evaluations' zeros) in place."""
    eager, graphed = (
        Agent(4, "cuda", seed=3, head=CategoricalHead(), noisy_sigma0=0.5, cuda_graphs=flag) for flag in (False, True)
    )
    states = np.random.default_rng(0).integers(0, 256, (30, 4, 84, 84), dtype=np.uint8)
    assert [graphed.act(state, 0.0) for state in states] == [eager.act(state, 0.0) for state in states]
    assert graphed.act_evaluating(states[:8], 0.0).tolist() == eager.act_evaluating(states[:8], 0.0).tolist()
    assert graphed.graphed_acting


def run_main_on(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "main.py"), *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


GPU_TINY = [
    "--env", "Breakout", "--learning-starts", "200", "--memory-size", "5000", "--eval-episodes", "1",
    "--max-episode-frames", "1000", "--target-every", "100", "--eval-every", "300",
]  # fmt: skip


@pytest.mark.cuda
@pytest.mark.parametrize(
    "extra",
    [[], ["--prioritized", "--envs", "3", "--eps-start", "0.5"], ["--preset", "der", "--envs", "3"]],
    ids=["uniform", "prioritized-3-games", "der-3-games"],
)
def test_training_loop_on_the_gpu_with_either_memory(tmp_path, extra):
    """The loop end to end on CUDA, with its evaluations and checkpoints, frames on the GPU and in host RAM; the
    prioritized memory with three games at once, in three streams; DER's C51 and noisy layers in graphs."""
    for where in ("device", "host"):
        run = tmp_path / where
        done = run_main_on(*GPU_TINY, *extra, "--steps", "600", "--device", "cuda", "--memory-device", where,
                           "--out", str(run))  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "device cuda" in done.stdout and ("replay memory on cuda" in done.stdout) == (where == "device")
        lines = (run / "rewards.txt").read_text().splitlines()
        assert [int(line.split()[1]) for line in lines] == [0, 300, 600]
        assert json.loads((run / "config.json").read_text())["memory_device"] == where


@pytest.mark.cuda
def test_a_gpu_run_resumes_on_the_cpu_and_back(tmp_path):
    """A run saved with its memory on the GPU goes on on the CPU from the same memory, and back."""
    run = tmp_path / "run"
    first = run_main_on(*GPU_TINY, "--steps", "300", "--device", "cuda", "--save-memory", "--out", str(run))
    assert first.returncode == 0, first.stderr
    for device, steps in (("cpu", "600"), ("cuda", "900")):
        done = run_main_on("--resume", str(run), "--steps", steps, "--device", device)
        assert done.returncode == 0, done.stderr
        assert "refilling" not in done.stdout + done.stderr  # the saved memory was used
    assert [int(line.split()[1]) for line in (run / "rewards.txt").read_text().splitlines()] == [0, 300, 600, 900]


@pytest.mark.cuda
def test_evaluation_of_a_checkpoint_on_the_gpu(tmp_path):
    run = tmp_path / "run"
    assert run_main_on(*GPU_TINY, "--steps", "300", "--device", "cpu", "--out", str(run)).returncode == 0
    done = run_main_on("--evaluate", str(run / "model_001.pt"), "--eval-episodes", "2", "--device", "cuda")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("Episode #") == 2 and "Mean reward over 2 episodes" in done.stdout
