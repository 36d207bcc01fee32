"""Value heads: what the agent reads from its network's outputs.

The network gives ``units`` outputs per action, (B, actions, units). A head says what they mean: the
action values the agent acts on, the learning target of a transition from the target network's outputs
at the next state, and each transition's loss and priority. The agent (``utils_drl.Agent``) does the
rest the same way for every head: acting, Double DQN's choice of the next action, importance weights,
the gradient step, CUDA graphs, checkpoints. A new head is one class here and its flag in
``utils_config``.

- ``ScalarHead``: one value per action (DQN, Mnih et al. 2015): the n-step TD target, a Huber or squared
  loss, the absolute TD error as priority (Schaul et al. 2016).
- ``CategoricalHead``: C51 (Bellemare et al. 2017): a distribution over ``atoms`` fixed returns, the target
  distribution projected onto them, a cross-entropy loss, which is also the priority as in Dopamine's Rainbow
  (``dopamine/agents/rainbow/rainbow_agent.py`` lines 265 and 285-286, commit 8842298; Hessel et al. 2018 prioritize
  by the KL divergence, which is the cross-entropy less the target's entropy).
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from dqn_atari.utils_types import Batch


class ValueHead:
    """The interface: every head has these, on (B, actions, units) outputs of the network."""

    units: int  # the network's outputs per action

    def to(self, device: torch.device) -> ValueHead:
        """The head for outputs on ``device``."""
        return self

    def q_values(self, outputs: torch.Tensor) -> torch.Tensor:
        """(B, actions, units) outputs to (B, actions) action values: what acting and Double DQN take the argmax of."""
        raise NotImplementedError

    def target(self, batch: Batch, next_outputs: torch.Tensor) -> torch.Tensor:
        """The learning target of each transition of ``batch`` from the target network's (B, units) outputs
        at its next state and next action."""
        raise NotImplementedError

    def losses(self, taken: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Each transition's loss (with gradient) from the online network's (B, units) outputs at its action,
        and its priority for prioritized replay (without)."""
        raise NotImplementedError


class ScalarHead(ValueHead):
    units = 1

    def __init__(self, loss: str = "huber") -> None:
        self.loss_function = {"huber": F.smooth_l1_loss, "mse": F.mse_loss}[loss]

    def q_values(self, outputs: torch.Tensor) -> torch.Tensor:
        return outputs.squeeze(2)

    def target(self, batch: Batch, next_outputs: torch.Tensor) -> torch.Tensor:
        """The n-step return plus the discounted value of the next state; the discount is gamma ** n, or 0
        when the window ended with a terminal step."""
        return batch.returns + batch.discounts * next_outputs.squeeze(1)

    def losses(self, taken: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q = taken.squeeze(1)
        return self.loss_function(q, targets, reduction="none"), (targets - q.detach()).abs()


class CategoricalHead(ValueHead):
    """Each action's return as a distribution over ``atoms`` returns evenly spaced from ``v_min`` to ``v_max``
    (the support); the outputs are its logits."""

    def __init__(self, atoms: int = 51, v_min: float = -10.0, v_max: float = 10.0) -> None:
        self.units = atoms
        self.support = torch.linspace(v_min, v_max, atoms)

    def to(self, device: torch.device) -> CategoricalHead:
        head = CategoricalHead(self.units, float(self.support[0]), float(self.support[-1]))
        head.support = head.support.to(device)
        return head

    def q_values(self, outputs: torch.Tensor) -> torch.Tensor:
        """The expected return of each action."""
        return (outputs.softmax(dim=2) * self.support).sum(dim=2)

    def target(self, batch: Batch, next_outputs: torch.Tensor) -> torch.Tensor:
        """The distribution of the n-step return plus the discounted next return, projected onto the support."""
        shifted = batch.returns[:, None] + batch.discounts[:, None] * self.support  # (B, atoms): a terminal's are all G
        return project(shifted, next_outputs.softmax(dim=1), self.support)

    def losses(self, taken: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        cross_entropy = -(targets * taken.log_softmax(dim=1)).sum(dim=1)
        return cross_entropy, cross_entropy.detach()


def project(values: torch.Tensor, probabilities: torch.Tensor, support: torch.Tensor) -> torch.Tensor:
    """Bellemare et al. (2017), equation 7: the (B, atoms) probabilities of the returns ``values``, each clipped
    into the support's range, shared between the two atoms around it in proportion to its distance from
    each (all of it to an atom it falls on). As Dopamine's ``project_distribution``
    (dopamine/jax/agents/rainbow/rainbow_agent.py, lines 493-533): every atom i takes
    sum_j clip(1 - |clip(value_j) - z_i| / dz, 0, 1) * p_j."""
    v_min, v_max = support[0], support[-1]
    spacing = (v_max - v_min) / (len(support) - 1)
    distances = (values.clamp(v_min, v_max)[:, None, :] - support[None, :, None]).abs()  # (B, atom i, value j)
    return ((1 - distances / spacing).clamp(0, 1) * probabilities[:, None, :]).sum(dim=2)


def value_head(args: argparse.Namespace) -> ValueHead:
    """The head the flags ask for."""
    if args.distributional:
        return CategoricalHead(args.atoms, args.v_min, args.v_max)
    return ScalarHead(args.loss)
