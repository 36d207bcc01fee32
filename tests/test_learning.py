"""The real agent, network and replay memories learn a small pixel game (Catch)."""

import numpy as np
import pytest

from catch import FRAME_SIZE, Catch
from dqn_atari.utils_drl import Agent, linear_schedule
from dqn_atari.utils_env import FrameStack, Player
from dqn_atari.utils_heads import CategoricalHead
from dqn_atari.utils_memory import PrioritizedReplayMemory, ReplayMemory
from dqn_atari.utils_model import NOISY_SIGMA0

STEPS = 3000
LEARNING_STARTS = 200


def success_rate(agent: Agent, episodes: int = 100) -> float:
    env, stack, caught = Catch(seed=12345), FrameStack(frame_shape=(FRAME_SIZE, FRAME_SIZE)), 0
    for _ in range(episodes):
        state, done = stack.reset(env.reset()), False
        while not done:
            result = env.step(agent.act(state, 0.0, noise=False))  # a noisy network on its mean weights
            state, done = stack.push(result.frame), result.terminated
        caught += result.reward > 0
    return caught / episodes


C51 = {"head": CategoricalHead(51, -10.0, 10.0)}
NOISY = {"noisy_sigma0": NOISY_SIGMA0}


# Each part (memories, n-step windows, heads, noise) is checked against hand-computed values in its own tests; these
# check that the parts learn together: Nature DQN, and the parts Rainbow adds all at once (prioritized, 3-step, C51,
# noisy). Each takes about 40 seconds; Nature DQN's is in the slow tier, as test_gym_env's MinAtar run from the command
# line shows the defaults learning in every `make test`.
@pytest.mark.parametrize(
    "prioritized,n_step,device,options",
    [
        pytest.param(False, 1, "cpu", {}, marks=pytest.mark.slow),  # Nature DQN
        (True, 3, "cpu", {**C51, **NOISY}),  # Rainbow's parts but dueling and double: exploring by the noise alone
        pytest.param(True, 1, "cuda", {}, marks=pytest.mark.cuda),  # frames on the GPU
        pytest.param(True, 3, "cuda", {**C51, **NOISY}, marks=pytest.mark.cuda),
    ],
    ids=[
        "uniform",
        "c51-noisy-prioritized-3-step",
        "prioritized-cuda",
        "c51-noisy-cuda",
    ],
)
def test_agent_learns_catch(prioritized, n_step, device, options):
    memory_type = PrioritizedReplayMemory if prioritized else ReplayMemory
    memory = memory_type(5000, frame_shape=(FRAME_SIZE, FRAME_SIZE), seed=0, n_step=n_step, gamma=0.9,
                         device=device, frames_on_device=device != "cpu")  # fmt: skip
    agent = Agent(Catch.n_actions, device, lr=1e-3, input_shape=(4, FRAME_SIZE, FRAME_SIZE), seed=0, **options)
    player = Player(Catch(seed=0), memory)
    before = success_rate(agent)
    for step in range(1, STEPS + 1):
        epsilon = 0.0 if "noisy_sigma0" in options else linear_schedule(step, 1.0, 0.05, STEPS // 2)
        player.step(agent.act(player.state, epsilon))
        if step > LEARNING_STARTS:
            batch = memory.sample(32, linear_schedule(step, 0.4, 1.0, STEPS))
            memory.update_priorities(batch.indices, agent.learn(batch).priorities)
        if step % 100 == 0:
            agent.sync_target()
    after = success_rate(agent)
    assert before < 0.5  # a random paddle catches about 1 ball in 5
    assert after >= 0.9, f"caught {after:.0%} after training ({before:.0%} before)"
    if prioritized:
        leaves = memory.tree.leaves[memory.sampleable(np.arange(memory.capacity))]
        assert np.unique(leaves).size > 100  # priorities follow the TD errors
