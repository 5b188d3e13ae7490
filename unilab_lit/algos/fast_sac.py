"""FastSAC: SAC with twin distributional (C51) critics and an auto-tuned temperature, as a LightningModule."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from lightning.pytorch.cli import OptimizerCallable
from torch import nn

from unilab_lit.algos.offpolicy import (
    TEMPERATURE,
    Minibatch,
    OffPolicyLearner,
)
from unilab_lit.algos.offpolicy_options import OffPolicyOptions
from unilab_lit.algos.optimizers import FastSACAdamW
from unilab_lit.nn.offpolicy_nets import SquashedGaussianActor
from unilab_lit.nn.policies import Activation
from unilab_lit.telemetry import metrics
from unilab_lit.validation import check_arg


class FastSAC(OffPolicyLearner):
    """FastSAC: soft actor-critic (Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and
    Applications", with the learned temperature) in the FastTD3 recipe for massively parallel
    simulation (Seo et al. 2025): C51 twin critics (Bellemare et al. 2017), large batches,
    several updates per replay item, LayerNorm networks.

    Per minibatch (see :class:`~unilab_lit.algos.offpolicy.OffPolicyLearner` for the iteration,
    step convention and non-finite handling):

    - critic: ``a' ~ π(·|s')`` with its log-density ``log π(a'|s')`` (tanh Jacobian included);
      each target twin's distribution at ``(s', a')`` is projected through the entropy-adjusted
      target ``r + γ·bootstrap·(z − α·log π(a'|s'))``; with ``use_cdq`` both heads learn the
      smaller-mean twin's projection, otherwise each its own; loss = Σ_heads mean cross-entropy.
      The critic targets then move by Polyak averaging with rate ``tau``.
    - actor (every ``policy_frequency``-th critic update): ``mean(α·log π(a|s) − Q(s, a))`` with
      ``a`` reparameterised, ``Q`` the twins' expected values (minimum under ``use_cdq``, else
      mean) and ``α`` held fixed.
    - temperature (with each actor update): ``α·(H − H̄)`` in ``log α``, with ``H = −mean log π``
      of that actor step held fixed and the target ``H̄ = action_size · target_entropy_per_dim``;
      α falls while the policy is more random than the target and rises while it is less.

    The collector acts with the published
    :class:`~unilab_lit.nn.offpolicy_nets.SquashedGaussianActor` (no per-env state), which
    returns each action's log-density.

    Args:
        policy_obs_size: Width of the policy observation group (linked from the data module).
        critic_obs_size: Width of the critic observation group (linked from the data module).
        action_size: Width of the action vector (linked from the data module).
        actor_hidden_dims: Hidden-layer widths of the actor.
        critic_hidden_dims: Hidden-layer widths of each critic twin.
        activation: Hidden-layer activation of actor and critics.
        layer_norm: LayerNorm after every hidden layer of actor and critics.
        log_std_min: Lower bound of the actor's pre-tanh log-std.
        log_std_max: Upper bound of the actor's pre-tanh log-std (> log_std_min).
        init_temperature: Initial entropy temperature α (> 0).
        target_entropy_per_dim: Target policy entropy per action dimension (SAC: −1).
        offpolicy: C51 support, discount, Polyak rate, update schedule (``policy_frequency``
            also paces the temperature) and the other settings of the shared off-policy
            iteration. ``use_cdq`` is on by default, unlike the seed project's FastSAC,
            because the Q targets overestimate without it (``configs/fast_sac.yaml``).
        critic_optimizer: Optimizer of the critic twins (FastSAC's AdamW by default).
        actor_optimizer: Optimizer of the actor (FastSAC's AdamW by default).
        temperature_optimizer: Optimizer of ``log α`` (FastSAC's AdamW by default); its weight
            decay is always 0, since decay would pull α toward 1 whatever the entropy.

    Raises:
        ValueError: If an argument is outside its valid range (the message names it).
    """

    def __init__(
        self,
        policy_obs_size: int,
        critic_obs_size: int,
        action_size: int,
        actor_hidden_dims: Sequence[int] = (512, 256, 128),
        critic_hidden_dims: Sequence[int] = (768, 384, 192),
        activation: Activation = "swish",
        layer_norm: bool = True,
        log_std_min: float = -5.0,
        log_std_max: float = 2.0,
        init_temperature: float = 0.01,
        target_entropy_per_dim: float = -1.0,
        offpolicy: OffPolicyOptions = OffPolicyOptions(
            tau=0.125, updates_per_step=4, policy_frequency=4
        ),
        critic_optimizer: OptimizerCallable = FastSACAdamW,
        actor_optimizer: OptimizerCallable = FastSACAdamW,
        temperature_optimizer: OptimizerCallable = FastSACAdamW,
    ) -> None:
        super().__init__(
            policy_obs_size,
            critic_obs_size,
            action_size,
            offpolicy,
            critic_optimizer,
            actor_optimizer,
        )
        check_arg(
            init_temperature > 0.0 and math.isfinite(init_temperature),
            "init_temperature",
            init_temperature,
            "a finite value > 0",
        )
        check_arg(
            math.isfinite(target_entropy_per_dim),
            "target_entropy_per_dim",
            target_entropy_per_dim,
            "finite",
        )
        self.save_hyperparameters()
        self._temperature_optimizer = temperature_optimizer
        self.target_entropy = action_size * target_entropy_per_dim
        self._build_actor(
            SquashedGaussianActor,
            hidden_dims=list(actor_hidden_dims),
            activation=activation,
            layer_norm=layer_norm,
            log_std_min=log_std_min,
            log_std_max=log_std_max,
        )
        self._build_critics(action_size, critic_hidden_dims, activation, layer_norm)
        self.log_temperature = nn.Parameter(torch.tensor(math.log(init_temperature)))

    @property
    def temperature(self) -> torch.Tensor:
        """The current entropy temperature α (detached)."""
        return self.log_temperature.detach().exp()

    # ------------------------------------------------------------------------- Lightning
    def configure_optimizers(self) -> list[torch.optim.Optimizer]:
        # Weight decay would pull log α toward 0 (α toward 1) regardless of the entropy.
        temperature = self._temperature_optimizer(
            [{"params": [self.log_temperature], "weight_decay": 0.0}]
        )
        return [*super().configure_optimizers(), temperature]

    # --------------------------------------------------------------------------- update
    def _update(self, mb: Minibatch, update_actor: bool, counted: bool) -> dict[str, torch.Tensor]:
        terms = super()._update(mb, update_actor, counted)
        # Only after a taken actor step: a skipped one has no trustworthy entropy.
        if metrics.ACTOR_GRAD_NORM in terms:
            loss = self._temperature_loss(terms[metrics.POLICY_ENTROPY])
            if self._optimize(TEMPERATURE, loss, [self.log_temperature]) is not None:
                terms[metrics.LOSS_TEMPERATURE] = loss.detach()
        terms[metrics.TEMPERATURE] = self.temperature
        return terms

    def _critic_loss(self, mb: Minibatch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        with torch.no_grad():
            next_actions, next_log_prob, _ = self.actor.sample(mb["next_obs"])
            # r + γb·(z − α·log π') = (r − γb·α·log π') + γb·z: a shifted reward, same projection.
            reward = mb["reward"] - mb["discount"] * self.temperature * next_log_prob
        return self._td_loss(mb, next_actions, reward)

    def _actor_loss(self, mb: Minibatch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        actions, log_prob, log_std = self.actor.sample(mb["obs"])
        q = self._policy_q(mb["critic_obs"], actions)
        loss = (self.temperature * log_prob - q).mean()
        return loss, {
            metrics.LOSS_ACTOR: loss.detach(),
            metrics.POLICY_ENTROPY: -log_prob.detach().mean(),
            metrics.ACTION_STD: log_std.detach().exp().mean(),
        }

    def _temperature_loss(self, entropy: torch.Tensor) -> torch.Tensor:
        return self.log_temperature.exp() * (entropy.detach() - self.target_entropy)
