"""The value heads (C51's projection, loss and priorities) and the noisy networks, against hand-computed values."""

import math

import numpy as np
import pytest
import torch
from test_drl import real_batch
from test_main import TINY
from torch import nn

from dqn_atari import main
from dqn_atari.utils_drl import Agent
from dqn_atari.utils_heads import CategoricalHead, project
from dqn_atari.utils_model import NOISY_SIGMA0, NoisyLinear, QNetwork
from dqn_atari.utils_types import Batch

SUPPORT = torch.tensor([-2.0, -1.0, 0.0, 1.0, 2.0])  # five atoms one apart


def small_batch(returns: list[float], discounts: list[float]) -> Batch:
    n = len(returns)
    return Batch(
        states=torch.zeros(n, 4, 2, 3, dtype=torch.uint8),
        actions=torch.zeros(n, dtype=torch.int64),
        returns=torch.tensor(returns),
        next_states=torch.zeros(n, 4, 2, 3, dtype=torch.uint8),
        discounts=torch.tensor(discounts),
        weights=torch.ones(n),
        indices=np.arange(n),
    )


def test_the_projection_by_hand():
    """Bellemare et al.'s equation 7 on five atoms: returns between atoms split by distance, returns on an atom go
    to it whole, returns beyond the support's ends to its end atoms, and a terminal's all to its reward."""
    head = CategoricalHead(5, -2.0, 2.0)
    assert torch.equal(head.support, SUPPORT)
    p = torch.tensor([0.1, 0.2, 0.3, 0.2, 0.2])
    batch = small_batch(returns=[0.5, 3.0, -3.0, -0.25], discounts=[0.5, 1.0, 0.5, 0.0])
    targets = head.target(batch, p.log().expand(4, 5))  # logits whose softmax is p
    expected = torch.tensor(
        [
            # 0.5 + 0.5 z = -0.5, 0, 0.5, 1, 1.5: halves of 0.1 to -1 and 0, 0.2 to 0, halves of 0.3 to 0 and 1,
            # 0.2 to 1, halves of 0.2 to 1 and 2.
            [0.0, 0.05, 0.05 + 0.2 + 0.15, 0.15 + 0.2 + 0.1, 0.1],
            # 3 + z = 1, 2, 3, 4, 5: the first on atom 1, the rest clipped onto the top atom, 2.
            [0.0, 0.0, 0.0, 0.1, 0.9],
            # -3 + 0.5 z = -4 ... -2: all clipped onto the bottom atom, -2 (one on it exactly).
            [1.0, 0.0, 0.0, 0.0, 0.0],
            # A terminal: -0.25 whatever the next state, a quarter of the way from 0 to -1.
            [0.0, 0.25, 0.75, 0.0, 0.0],
        ]
    )
    assert torch.allclose(targets, expected, atol=1e-6)
    assert torch.allclose(targets.sum(dim=1), torch.ones(4))
    # The expected value moves as the returns do, where nothing is clipped: 0.5 + 0.5 E[z].
    assert float(targets[0] @ SUPPORT) == pytest.approx(0.5 + 0.5 * float(p @ SUPPORT))
    # project() alone: one value on each atom keeps its probability there.
    assert torch.allclose(project(SUPPORT.expand(1, 5), p[None], SUPPORT), p[None])


def test_the_cross_entropy_and_its_gradient_against_finite_differences():
    head = CategoricalHead(5, -2.0, 2.0)
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, generator=generator, dtype=torch.float64, requires_grad=True)
    targets = torch.rand(3, 5, generator=generator, dtype=torch.float64)
    targets /= targets.sum(dim=1, keepdim=True)
    losses, priorities = head.losses(logits, targets)
    by_hand = -(targets * torch.log(torch.softmax(logits, dim=1))).sum(dim=1)
    assert torch.allclose(losses, by_hand) and torch.equal(priorities, losses.detach())
    assert not priorities.requires_grad
    assert torch.autograd.gradcheck(lambda x: head.losses(x, targets)[0], (logits,))
    # The gradient of a cross-entropy of logits: softmax less the target.
    losses.sum().backward()
    assert torch.allclose(logits.grad, torch.softmax(logits.detach(), dim=1) - targets)


class FixedLogits(nn.Module):
    """A fake network whose outputs are the same (actions, atoms) logits for every state."""

    def __init__(self, logits: torch.Tensor) -> None:
        super().__init__()
        self.logits = logits

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.logits.expand(len(x), *self.logits.shape)


def test_c51_bootstraps_from_the_target_networks_distribution_of_the_chosen_action():
    """The next action maximises the expected return: the target network's (DQN), or the online network's (Double
    DQN); the distribution projected is always the target network's for that action."""
    head = CategoricalHead(5, -2.0, 2.0)
    one_hot = torch.eye(5)
    # The target network: action 0 is worth 2 for sure, action 1 is -2; the online network thinks the opposite.
    target_logits = torch.stack([one_hot[4], one_hot[0]]) * 50
    online_logits = torch.stack([one_hot[0], one_hot[4]]) * 50
    agent = Agent(2, head=head)
    agent.online, agent.target = FixedLogits(online_logits), FixedLogits(target_logits)
    batch = small_batch(returns=[0.0], discounts=[0.5])
    assert torch.allclose(agent.td_targets(batch), torch.tensor([[0.0, 0.0, 0.0, 1.0, 0.0]]), atol=1e-6)  # 0.5 * 2
    agent.double = True  # action 1 by the online network, the target network's -2 for it
    assert torch.allclose(agent.td_targets(batch), torch.tensor([[0.0, 1.0, 0.0, 0.0, 0.0]]), atol=1e-6)


def test_a_c51_learning_step_weighs_the_cross_entropies_and_reports_them_as_priorities():
    agent = Agent(4, seed=1, lr=1e-3, head=CategoricalHead(51, -10.0, 10.0))
    batch = real_batch()
    with torch.no_grad():
        logits = agent.online(batch.states)[torch.arange(8), batch.actions]  # (8, 51)
        targets = agent.td_targets(batch)
        cross_entropy = -(targets * logits.log_softmax(dim=1)).sum(dim=1)
        expected_q = (logits.softmax(dim=1) * torch.linspace(-10, 10, 51)).sum(dim=1)
    result = agent.learn(batch)
    assert torch.allclose(result.priorities, cross_entropy, atol=1e-5)
    assert result.loss == pytest.approx((batch.weights * cross_entropy).mean().item(), rel=1e-5)
    assert result.mean_q == pytest.approx(expected_q.mean().item(), abs=1e-6)
    assert agent.priorities(batch).shape == (8,)  # Ape-X's initial priorities, without learning


def test_the_c51_network_has_atoms_per_action_and_duels_atom_by_atom():
    torch.manual_seed(0)
    network = QNetwork(6, dueling=True, network="dopamine", units=51)
    frames = torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8)
    logits = network(frames)
    assert logits.shape == (2, 6, 51)
    hidden = network.hidden(network.features(frames / 255.0))
    advantages, value = network.head(hidden).view(2, 6, 51), network.value(hidden).view(2, 1, 51)
    assert torch.allclose(logits, value + advantages - advantages.mean(dim=1, keepdim=True), atol=1e-5)
    q = CategoricalHead().q_values(logits)
    assert q.shape == (2, 6) and bool((q.abs() <= 10).all())


def test_factorised_noise_statistics_and_initialisation():
    """Fortunato et al. (2018), section 3: f(e) = sgn(e) sqrt|e| of standard normal e, weights' noise the outer
    product f(e_out) f(e_in)^T (one rank), the biases' f(e_out); mu uniform in +-1/sqrt(p), sigma sigma0/sqrt(p)."""
    torch.manual_seed(0)
    layer = NoisyLinear(400, 300, NOISY_SIGMA0)
    bound = 1 / math.sqrt(400)
    assert layer.weight_mu.abs().max() <= bound and layer.weight_mu.abs().max() > 0.99 * bound
    assert torch.equal(layer.weight_sigma, torch.full((300, 400), 0.5 / 20))
    assert torch.equal(layer.bias_sigma, torch.full((300,), 0.5 / 20))
    assert layer.bias_mu.abs().max() <= bound
    generator = torch.Generator().manual_seed(1)
    draws = []
    for _ in range(200):
        layer.set_noise(generator)
        draws.append(layer.noise_in.clone())
    noise = torch.cat(draws)
    assert abs(noise.mean().item()) < 0.01
    assert (noise**2).mean().item() == pytest.approx(math.sqrt(2 / math.pi), rel=0.02)  # E f(e)^2 = E|e|
    # f keeps the sign and takes the root: the draws are sgn(e) sqrt|e| of the generator's normals.
    replay = torch.Generator().manual_seed(1)
    normals = torch.randn(400, generator=replay)
    assert torch.allclose(draws[0], normals.sign() * normals.abs().sqrt())
    x = torch.randn(5, 400)
    weight_noise = torch.outer(layer.noise_out, layer.noise_in)
    assert torch.linalg.matrix_rank(weight_noise) == 1
    expected = x @ (layer.weight_mu + layer.weight_sigma * weight_noise).T + layer.bias_mu
    expected += layer.bias_sigma * layer.noise_out
    assert torch.allclose(layer(x), expected, atol=1e-5)
    layer.set_noise(None)  # off: the mean weights
    assert torch.allclose(layer(x), x @ layer.weight_mu.T + layer.bias_mu, atol=1e-5)


def test_noisy_networks_are_noisy_in_every_fully_connected_layer_and_in_no_state_dict():
    for network, dueling in (("nature", True), ("dopamine", True), ("minatar", False)):
        shape = (4, 10, 10) if network == "minatar" else (4, 84, 84)
        plain = QNetwork(3, shape, dueling, network)
        noisy = QNetwork(3, shape, dueling, network, noisy_sigma0=0.5)
        assert not any(isinstance(module, nn.Linear) for module in noisy.modules())
        linear = sum(isinstance(module, nn.Linear) for module in plain.modules())
        assert sum(isinstance(module, NoisyLinear) for module in noisy.modules()) == linear
        assert not any("noise" in key for key in noisy.state_dict())


def test_noise_is_drawn_for_each_action_choice_and_learning_step_and_off_in_evaluations():
    agent = Agent(4, seed=2, noisy_sigma0=0.5)
    layer = agent.online.head[2]
    states = np.random.default_rng(0).integers(0, 256, (3, 4, 84, 84), dtype=np.uint8)
    draws = []
    for _ in range(3):
        agent.act_all(states, 0.0)
        draws.append(layer.noise_out.clone())
    assert not torch.equal(draws[0], draws[1]) and not torch.equal(draws[1], draws[2])
    agent.act_evaluating(states, 0.0)
    assert not layer.noise_out.any()
    mean_actions = agent.act_evaluating(states, 0.0)
    with torch.no_grad():
        agent.online.set_noise(None)
        assert mean_actions.tolist() == agent.q_values(torch.from_numpy(states)).argmax(dim=1).tolist()
    # A learning step draws the online network's noise, then the target network's: both on, not the same.
    agent.learn(real_batch())
    online_noise, target_noise = layer.noise_out.clone(), agent.target.head[2].noise_out.clone()
    assert online_noise.any() and target_noise.any() and not torch.equal(online_noise, target_noise)
    # The generator is part of the agent's state: a restored agent draws what this one draws next.
    restored = Agent(4, seed=99, noisy_sigma0=0.5)
    restored.load_state_dict(agent.state_dict())
    assert agent.act_all(states, 0.0).tolist() == restored.act_all(states, 0.0).tolist()
    assert torch.equal(layer.noise_out, restored.online.head[2].noise_out)


def test_a_noisy_run_acts_with_noise_in_training_and_without_in_evaluations(tmp_path, monkeypatch):
    """Through main's loop: every training action and learning step draws noise, every evaluation action is
    on the mean weights, and the training epsilon is 0."""
    calls = []
    evaluating = False
    greedy, evaluate = Agent.greedy, main.evaluate

    def recording_greedy(agent, states, noise=True):
        calls.append((evaluating, noise))
        return greedy(agent, states, noise)

    def recording_evaluate(*args, **kwargs):
        nonlocal evaluating
        evaluating = True
        try:
            return evaluate(*args, **kwargs)
        finally:
            evaluating = False

    monkeypatch.setattr(Agent, "greedy", recording_greedy)
    monkeypatch.setattr(main, "evaluate", recording_evaluate)
    argv = [*TINY, "--noisy", "--steps", "200", "--eval-every", "200", "--out", str(tmp_path / "run"), "--seed", "1"]
    assert main.main(argv) == 0
    training = [noise for during_evaluation, noise in calls if not during_evaluation]
    evaluation = [noise for during_evaluation, noise in calls if during_evaluation]
    assert len(training) == 200 and all(training)  # epsilon 0: every training action is the network's
    assert evaluation and not any(evaluation)
    epsilons = np.loadtxt(tmp_path / "run" / "episodes.csv", delimiter=",", skiprows=1, ndmin=2)[:, 3]
    assert not epsilons.any()
