"""FastTD3: TD3 with twin distributional (C51) critics and large parallel batches, as a LightningModule."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from lightning.pytorch.cli import OptimizerCallable

from unilab_lit.algos.offpolicy import Minibatch, OffPolicyLearner
from unilab_lit.algos.offpolicy_options import OffPolicyOptions
from unilab_lit.algos.optimizers import FastTD3AdamW
from unilab_lit.nn.offpolicy_nets import DeterministicActor
from unilab_lit.nn.policies import Activation
from unilab_lit.telemetry import metrics
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
        policy_noise: Std of the target-policy smoothing noise (>= 0).
        noise_clip: Bound on the smoothing noise (>= 0).
        noise_std_min: Smallest per-env exploration std of the collector policy (>= 0).
        noise_std_max: Largest per-env exploration std (>= noise_std_min).
        offpolicy: C51 support, discount, Polyak rate, update schedule and the other settings
            of the shared off-policy iteration.
        critic_optimizer: Optimizer of the critic twins (FastTD3's AdamW by default).
        actor_optimizer: Optimizer of the actor (FastTD3's AdamW by default).

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
        policy_noise: float = 0.001,
        noise_clip: float = 0.5,
        noise_std_min: float = 0.001,
        noise_std_max: float = 0.4,
        offpolicy: OffPolicyOptions = OffPolicyOptions(),
        critic_optimizer: OptimizerCallable = FastTD3AdamW,
        actor_optimizer: OptimizerCallable = FastTD3AdamW,
    ) -> None:
        super().__init__(
            policy_obs_size,
            critic_obs_size,
            action_size,
            offpolicy,
            critic_optimizer,
            actor_optimizer,
        )
        check_arg(policy_noise >= 0.0, "policy_noise", policy_noise, ">= 0")
        check_arg(noise_clip >= 0.0, "noise_clip", noise_clip, ">= 0")
        self.save_hyperparameters()
        self._build_actor(
            DeterministicActor,
            hidden_dims=list(actor_hidden_dims),
            activation=activation,
            layer_norm=layer_norm,
            init_scale=init_scale,
            noise_std_min=noise_std_min,
            noise_std_max=noise_std_max,
        )
        self._build_critics(action_size, critic_hidden_dims, activation, layer_norm)

    # --------------------------------------------------------------------------- losses
    def _critic_loss(self, mb: Minibatch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        hp = self.hparams
        with torch.no_grad():
            next_actions = self.actor(mb["next_obs"])
            noise = (torch.randn_like(next_actions) * hp.policy_noise).clamp(
                -hp.noise_clip, hp.noise_clip
            )
            next_actions = (next_actions + noise).clamp(-1.0, 1.0)
        return self._td_loss(mb, next_actions, mb["reward"])

    def _actor_loss(self, mb: Minibatch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        loss = -self._policy_q(mb["critic_obs"], self.actor(mb["obs"])).mean()
        return loss, {metrics.LOSS_ACTOR: loss.detach()}
