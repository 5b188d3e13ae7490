"""FastTD3: TD3 with twin distributional (C51) critics and large parallel batches, as a LightningModule."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from unilab_lit import metrics
from unilab_lit.algos.c51 import (
    categorical_projection,
    clipped_double_target,
    distributional_cross_entropy,
    expected_value,
)
from unilab_lit.algos.offpolicy import (
    ACTOR,
    CRITIC,
    Minibatch,
    OffPolicyLearner,
    polyak_update,
)
from unilab_lit.nn.offpolicy_nets import DeterministicActor, TwinDistributionalCritic
from unilab_lit.nn.policies import Activation, PolicySpec
from unilab_lit.validation import check_arg


class FastTD3(OffPolicyLearner):
    """FastTD3: Seo et al. 2025, "FastTD3: Simple, Fast, and Capable Reinforcement Learning for
    Humanoid Control", on TD3 (Fujimoto et al. 2018, "Addressing Function Approximation Error in
    Actor-Critic Methods") with C51 critics (Bellemare et al. 2017).

    Per minibatch (see :class:`~unilab_lit.algos.offpolicy.OffPolicyLearner` for the iteration,
    step convention and non-finite handling):

    - critic: the target action is ``clamp(actor(s') + clamp(N(0, policy_noise²), ±noise_clip),
      ±1)`` (target-policy smoothing; like FastTD3, the online actor, no target actor); each
      target twin's distribution at ``(s', a')`` is projected onto the support through
      ``r + γ·bootstrap·z``; with ``use_cdq`` both heads learn the projected distribution of the
      twin with the smaller mean (clipped double Q); loss = Σ_heads mean cross-entropy. The
      critic targets then move by Polyak averaging with rate ``tau``.
    - actor (every ``policy_frequency``-th critic update): ``−mean Q(s, actor(s))`` with ``Q``
      the twins' expected values, their minimum under ``use_cdq``, else their mean.

    ``distributional=False`` swaps the C51 critics for TD3's plain ones (same networks with one
    output, the scalar Q): the target is ``r + γ·bootstrap·Q'(s', a')`` with ``Q'`` the smaller
    target twin under ``use_cdq`` (else each twin its own), the loss Σ_heads mean squared error,
    and ``num_atoms``, ``v_min`` and ``v_max`` are unused. It is the baseline the C51 critics are
    measured against (``configs/fast_td3.yaml`` states the comparison).

    The collector acts with :class:`~unilab_lit.nn.offpolicy_nets.DeterministicActor`: the
    published actor plus per-env exploration noise whose scales live only in the collector
    (outside the state dict, so weight syncs leave them alone); the collector calls its
    ``reset_episodes(done)`` to redraw the scales of finished envs.

    Defaults are FastTD3's base hyperparameters; the C51 support must cover the task's returns.

    Args:
        policy_obs_size: Width of the policy observation group (linked from the data module).
        critic_obs_size: Width of the critic observation group (linked from the data module).
        action_size: Width of the action vector (linked from the data module).
        actor_hidden_dims: Hidden-layer widths of the actor.
        critic_hidden_dims: Hidden-layer widths of each critic twin.
        activation: Hidden-layer activation of actor and critics.
        layer_norm: LayerNorm after every hidden layer of actor and critics.
        init_scale: Std of the actor's output-layer init (> 0).
        num_atoms: Atoms of the C51 support (>= 2).
        v_min: Lowest atom.
        v_max: Highest atom (> v_min).
        gamma: Discount factor, in (0, 1].
        tau: Polyak rate of the critic targets, in (0, 1].
        updates_per_step: Minibatches (critic updates) per replay item (>= 1).
        policy_frequency: Critic updates per actor update (>= 1).
        use_cdq: Clipped double Q in the critic target and the actor loss.
        distributional: C51 critics (FastTD3); ``False`` for TD3's scalar critics.
        policy_noise: Std of the target-policy smoothing noise (>= 0).
        noise_clip: Bound on the smoothing noise (>= 0).
        noise_std_min: Smallest per-env exploration std of the collector policy (>= 0).
        noise_std_max: Largest per-env exploration std (>= noise_std_min).
        critic_learning_rate: AdamW learning rate of the critics (> 0).
        actor_learning_rate: AdamW learning rate of the actor (> 0).
        weight_decay: AdamW decoupled weight decay (>= 0).
        adam_betas: AdamW ``(β1, β2)``, each in [0, 1).
        max_grad_norm: Per-network gradient-norm clip; 0 disables clipping (>= 0).
        compile_losses: ``torch.compile`` the critic and actor losses (CUDA only).
        max_nonfinite_steps: Consecutive skipped steps of one kind that stop training (>= 1).

    Raises:
        ValueError: If an argument is outside its valid range (the message names it).
    """

    def __init__(
        self,
        policy_obs_size: int,
        critic_obs_size: int,
        action_size: int,
        actor_hidden_dims: Sequence[int] = (512, 256, 128),
        critic_hidden_dims: Sequence[int] = (1024, 512, 256),
        activation: Activation = "relu",
        layer_norm: bool = False,
        init_scale: float = 0.01,
        num_atoms: int = 101,
        v_min: float = -250.0,
        v_max: float = 250.0,
        gamma: float = 0.99,
        tau: float = 0.1,
        updates_per_step: int = 2,
        policy_frequency: int = 2,
        use_cdq: bool = True,
        distributional: bool = True,
        policy_noise: float = 0.001,
        noise_clip: float = 0.5,
        noise_std_min: float = 0.001,
        noise_std_max: float = 0.4,
        critic_learning_rate: float = 3e-4,
        actor_learning_rate: float = 3e-4,
        weight_decay: float = 0.1,
        adam_betas: tuple[float, float] = (0.9, 0.999),
        max_grad_norm: float = 0.0,
        compile_losses: bool = False,
        max_nonfinite_steps: int = 10,
    ) -> None:
        super().__init__(
            policy_obs_size=policy_obs_size,
            critic_obs_size=critic_obs_size,
            action_size=action_size,
            num_atoms=num_atoms,
            v_min=v_min,
            v_max=v_max,
            gamma=gamma,
            tau=tau,
            updates_per_step=updates_per_step,
            policy_frequency=policy_frequency,
            critic_learning_rate=critic_learning_rate,
            actor_learning_rate=actor_learning_rate,
            weight_decay=weight_decay,
            adam_betas=adam_betas,
            max_grad_norm=max_grad_norm,
            compile_losses=compile_losses,
            max_nonfinite_steps=max_nonfinite_steps,
        )
        check_arg(policy_noise >= 0.0, "policy_noise", policy_noise, ">= 0")
        check_arg(noise_clip >= 0.0, "noise_clip", noise_clip, ">= 0")
        self._actor_kwargs: dict[str, Any] = {
            "obs_size": policy_obs_size,
            "action_size": action_size,
            "hidden_dims": list(actor_hidden_dims),
            "activation": activation,
            "layer_norm": layer_norm,
            "init_scale": init_scale,
            "noise_std_min": noise_std_min,
            "noise_std_max": noise_std_max,
        }
        self.actor = DeterministicActor(**self._actor_kwargs)
        self.critic = TwinDistributionalCritic(
            critic_obs_size,
            action_size,
            num_atoms if distributional else 1,
            list(critic_hidden_dims),
            activation,
            layer_norm,
        )
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)

    # ----------------------------------------------------------------- collector contract
    def collector_policy_spec(self) -> PolicySpec:
        """How the collector rebuilds :meth:`collector_policy` (same ``state_dict`` layout)."""
        cls = DeterministicActor
        return PolicySpec(f"{cls.__module__}:{cls.__name__}", dict(self._actor_kwargs))

    def collector_policy(self) -> nn.Module:
        """The learner's actor, whose parameters are published to the collector."""
        return self.actor

    # ------------------------------------------------------------------------- Lightning
    def configure_optimizers(self) -> list[torch.optim.Optimizer]:
        hp = self.hparams
        return [
            self._adamw(list(self.critic.parameters()), hp.critic_learning_rate, hp.weight_decay),
            self._adamw(list(self.actor.parameters()), hp.actor_learning_rate, hp.weight_decay),
        ]

    # --------------------------------------------------------------------------- update
    def _update(self, mb: Minibatch, update_actor: bool, counted: bool) -> dict[str, torch.Tensor]:
        loss, critic_terms = self._critic_loss_fn(mb)
        grad_norm = self._optimize(CRITIC, loss, list(self.critic.parameters()), counted)
        terms: dict[str, torch.Tensor] = {}
        if grad_norm is not None:
            terms.update(critic_terms)
            terms[metrics.CRITIC_GRAD_NORM] = grad_norm
        polyak_update(self.critic_target, self.critic, self.hparams.tau)
        if update_actor:
            loss, actor_terms = self._actor_loss_fn(mb)
            grad_norm = self._optimize(ACTOR, loss, list(self.actor.parameters()))
            if grad_norm is not None:
                terms.update(actor_terms)
                terms[metrics.ACTOR_GRAD_NORM] = grad_norm
        return terms

    def _critic_loss(self, mb: Minibatch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        hp = self.hparams
        with torch.no_grad():
            next_actions = self.actor(mb["next_obs"])
            noise = (torch.randn_like(next_actions) * hp.policy_noise).clamp(
                -hp.noise_clip, hp.noise_clip
            )
            next_actions = (next_actions + noise).clamp(-1.0, 1.0)
            # Targets in float32 even under bf16 autocast: C51 atoms are 1/num_atoms apart.
            next_out = self.critic_target(mb["next_critic_obs"], next_actions).float()
            if hp.distributional:
                next_probs = torch.softmax(next_out, dim=-1)
                target = categorical_projection(
                    next_probs, mb["reward"], mb["discount"], hp.v_min, hp.v_max
                )
                if hp.use_cdq:
                    target = clipped_double_target(target, self.support)
                target_q = expected_value(target, self.support)
            else:
                next_q = next_out.squeeze(-1)
                if hp.use_cdq:
                    next_q = next_q.min(dim=0).values
                target = target_q = mb["reward"] + mb["discount"] * next_q
        out = self.critic(mb["critic_obs"], mb["actions"]).float()
        if hp.distributional:
            loss = distributional_cross_entropy(out, target).mean(-1).sum()
        else:
            loss = (out.squeeze(-1) - target).square().mean(-1).sum()
        return loss, {
            metrics.LOSS_CRITIC: loss.detach(),
            metrics.Q_TARGET_MEAN: target_q.mean(),
            metrics.Q_TARGET_MAX: target_q.max(),
            metrics.Q_TARGET_MIN: target_q.min(),
        }

    def _actor_loss(self, mb: Minibatch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        actions = self.actor(mb["obs"])
        out = self.critic(mb["critic_obs"], actions).float()
        if self.hparams.distributional:
            q = expected_value(torch.softmax(out, dim=-1), self.support)
        else:
            q = out.squeeze(-1)
        q = q.min(dim=0).values if self.hparams.use_cdq else q.mean(dim=0)
        loss = -q.mean()
        return loss, {metrics.LOSS_ACTOR: loss.detach()}
