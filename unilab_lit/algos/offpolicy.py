"""The learner iteration FastTD3 and FastSAC share: replay-batch contract, minibatches, step counting, non-finite guard."""

from __future__ import annotations

import copy
from abc import abstractmethod
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from lightning.pytorch.cli import OptimizerCallable
from tensordict import TensorDict

from unilab_lit import distributed
from unilab_lit.algos.base import RLAlgorithm
from unilab_lit.algos.batch_mirror import BatchMirror
from unilab_lit.algos.c51 import (
    categorical_projection,
    clipped_double_target,
    distributional_cross_entropy,
    expected_value,
)
from unilab_lit.algos.functional import all_finite, bootstrap_mask, mean_terms, polyak_update
from unilab_lit.algos.offpolicy_options import OffPolicyOptions
from unilab_lit.envs.symmetry import MirrorSpec
from unilab_lit.nn.offpolicy_nets import TwinDistributionalCritic
from unilab_lit.nn.policies import Activation
from unilab_lit.telemetry import metrics

BATCH_KEYS = (
    "obs",
    "next_obs",
    "actions",
    "reward",
    "done",
    "truncated",
    "critic_obs",
    "next_critic_obs",
)
"""Keys of one replay item, a ``TensorDict`` of batch size ``[batch_size × updates_per_step]``."""

_FLOAT_KEYS = ("obs", "next_obs", "actions", "reward", "critic_obs", "next_critic_obs")


# Optimizer indices in configure_optimizers' list; the critic's is the one Lightning counts.
CRITIC, ACTOR, TEMPERATURE = 0, 1, 2
_OPTIMIZER_NAMES = ("critic", "actor", "temperature")

Minibatch = TensorDict
"""Prepared rows ``[R]`` (:meth:`OffPolicyLearner._prepare`); each update takes one slice."""


def _steps(what: str) -> str:
    # Each optimiser (and the input check) has its own run of skips, e.g. "critic steps".
    return f"{what} steps"


class OffPolicyLearner(RLAlgorithm):
    """One learner iteration over one replay item, for actor-critic learners with C51 twin critics.

    One dataset item holds ``batch_size × updates_per_step`` rows (see :data:`BATCH_KEYS`) of raw
    observations ``obs``/``next_obs`` ``[R, Dp]``, ``critic_obs``/``next_critic_obs`` ``[R, Dc]``,
    ``actions [R, A]``, ``reward [R]`` and boolean ``done``/``truncated [R]``. Per item: the
    normalisers fold in ``obs`` and ``critic_obs`` (once per item, so each sampled row counts
    once), every observation is normalised, and the rows are sliced into ``updates_per_step``
    consecutive minibatches; :meth:`_update` runs on each. Update ``k`` of the run
    (``k = global_step · updates_per_step + u``) also updates the actor when
    ``(k + 1) % policy_frequency == 0``, so the actor schedule carries across items and resumes.

    The critic step of the last minibatch is the one per iteration Lightning counts (the step
    convention of :class:`~unilab_lit.algos.base.RLAlgorithm`); ``"bf16-mixed"`` is this
    module's AMP and works on any device.

    ``compile_losses=True`` wraps the subclass's critic and actor loss functions in
    ``torch.compile`` at fit start, on any device (CPU: inductor's C++ backend).

    Non-finite handling: an item with a non-finite float entry is skipped whole (normalisers
    untouched); an update whose loss or gradient norm is non-finite skips that optimizer step.
    Both count in the ``nonfinite_skips`` buffer; ``max_nonfinite_steps`` consecutive skips of one
    kind (input batch, critic, actor, temperature) raise ``RuntimeError`` naming it.

    ``training_step`` takes the ``dataloader_iter`` so Lightning never fetches the next item before
    this iteration's update finishes.

    Symmetry augmentation (``use_symmetry``): the mirror comes from the task, through the data
    module's ``env_spec.mirror`` (read in :meth:`setup`; set :attr:`mirror` yourself to fit
    without a data module). Each sampled row is followed by its mirror (observations, critic
    observations and actions mirrored; reward, done and truncated repeated), so every minibatch
    slice holds rows and their mirrors and both critic and actor losses see both. The
    normalisers fold in the mirrored rows too: statistics that are themselves symmetric keep
    ``normalise(mirror(x)) == mirror(normalise(x))``, which the augmentation relies on.

    Subclasses build ``actor`` (``_build_actor``, which also serves the collector contract) and
    then the critics (:meth:`_build_critics`), implement :meth:`_critic_loss` and
    :meth:`_actor_loss`, and call ``save_hyperparameters()``; a learner with more to update per
    minibatch extends :meth:`_update` and ``configure_optimizers`` (in ``CRITIC, ACTOR[,
    TEMPERATURE]`` order).

    Args:
        policy_obs_size: Width of the policy observation group (>= 1).
        critic_obs_size: Width of the critic observation group (>= 1).
        action_size: Width of the action vector (>= 1).
        offpolicy: The shared settings of the iteration.
        critic_optimizer: Optimizer of the critic twins.
        actor_optimizer: Optimizer of the actor.

    Raises:
        ValueError: If an argument is outside its valid range (the message names it).
    """

    trains_from = "ReplayDataModule"

    def __init__(
        self,
        policy_obs_size: int,
        critic_obs_size: int,
        action_size: int,
        offpolicy: OffPolicyOptions,
        critic_optimizer: OptimizerCallable,
        actor_optimizer: OptimizerCallable,
    ) -> None:
        super().__init__(
            policy_obs_size,
            critic_obs_size,
            action_size,
            offpolicy.max_nonfinite_steps,
            "Check the environment's rewards and observations for NaN/inf, the C51 support "
            "(v_min/v_max) against the returns, or lower the learning rates.",
        )
        self.offpolicy = offpolicy
        self._critic_optimizer = critic_optimizer
        self._actor_optimizer = actor_optimizer
        support = torch.linspace(offpolicy.v_min, offpolicy.v_max, offpolicy.num_atoms)
        # Derived from hyperparameters, so not checkpointed; a buffer so it follows the device.
        self.register_buffer("support", support, persistent=False)
        self._update_index = 0
        self.mirror: MirrorSpec | None = None
        self._mirrors: BatchMirror | None = None
        self._critic_loss_fn = self._critic_loss
        self._actor_loss_fn = self._actor_loss

    @property
    def updates_per_step(self) -> int:
        """Minibatches per replay item; the replay data module sizes its items by it."""
        return self.offpolicy.updates_per_step

    # ------------------------------------------------------------------- subclass verbs
    @abstractmethod
    def _critic_loss(self, mb: Minibatch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Distributional TD loss on one minibatch, and its logged terms."""

    @abstractmethod
    def _actor_loss(self, mb: Minibatch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Policy loss on one minibatch, and its logged terms."""

    def _build_critics(
        self, action_size: int, hidden_dims: Sequence[int], activation: Activation, layer_norm: bool
    ) -> None:
        """``critic`` (C51 twins on the support's atoms) and its frozen copy ``critic_target``."""
        self.critic = TwinDistributionalCritic(
            self.critic_obs_normalizer.size,
            action_size,
            self.offpolicy.num_atoms,
            list(hidden_dims),
            activation,
            layer_norm,
        )
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)

    # ------------------------------------------------------------------------ Lightning
    def configure_optimizers(self) -> list[torch.optim.Optimizer]:
        """Critic and actor optimizers, in ``CRITIC, ACTOR`` order (subclasses may append)."""
        return [
            self._critic_optimizer(list(self.critic.parameters())),
            self._actor_optimizer(list(self.actor.parameters())),
        ]

    def setup(self, stage: str) -> None:
        """Take the task's mirror from the data module (``use_symmetry``).

        Raises:
            ValueError: If ``use_symmetry`` is on and the task declares no mirror, or the
                mirror does not fit the model's sizes.
        """
        if stage != "fit" or not self.offpolicy.use_symmetry:
            return
        env_spec = getattr(self.trainer.datamodule, "env_spec", None)
        if env_spec is not None:
            self.mirror = env_spec.mirror
        if self.mirror is None:
            raise ValueError(
                "offpolicy.use_symmetry=True needs a task with a left-right mirror "
                "(EnvSpec.mirror), and this task declares none; set use_symmetry: false"
            )
        self.mirror.check_sizes(
            self.obs_normalizer.size, self.critic_obs_normalizer.size, self._action_size
        )
        self._mirrors = BatchMirror(self.mirror)

    def on_fit_start(self) -> None:
        super().on_fit_start()
        if self.offpolicy.compile_losses:
            self._critic_loss_fn = self._compile(self._critic_loss)
            self._actor_loss_fn = self._compile(self._actor_loss)

    def training_step(self, dataloader_iter: Iterator[Any]) -> None:
        batch, _, _ = next(dataloader_iter)
        rows = self._check_batch(batch)
        # The dataloader_iter flavour skips Lightning's batch_to_device; a no-op for items the
        # data module already placed on the learner's device.
        batch = batch.to(self.device, non_blocking=True)
        iteration = self.global_step
        logged: dict[str, torch.Tensor] = {}
        # Under DDP a non-finite batch on one rank skips the iteration on every rank.
        if distributed.all_ranks(all_finite(batch, _FLOAT_KEYS)):
            self._nonfinite.passed(_steps("input batch"))
            if self._mirrors is not None:
                batch = self._mirrors.interleave(batch, BATCH_KEYS)
            self._update_normalizers(batch["obs"], batch["critic_obs"])
            logged.update(self._run_updates(self._prepare(batch), iteration))
        else:
            self._skip_nonfinite(_steps("input batch"), f"iteration {iteration}")
            self._count_iteration()
        if self._loggers_write():
            self._log_terms(logged, rows)

    # ------------------------------------------------------------------------ iteration
    def _check_batch(self, batch: TensorDict) -> int:
        if batch.batch_dims != 1:
            raise ValueError(
                f"a replay batch must be a TensorDict of batch size [rows], got {list(batch.shape)}"
            )
        missing = [key for key in BATCH_KEYS if key not in batch]
        if missing:
            raise KeyError(
                f"replay batch lacks {missing}; it has {sorted(batch.keys())}, "
                f"expected {list(BATCH_KEYS)}"
            )
        rows = batch.shape[0]
        updates = self.offpolicy.updates_per_step
        if rows < updates or rows % updates:
            raise ValueError(
                f"a replay batch of {rows} rows does not split into updates_per_step={updates} "
                "equal minibatches; the data module must deliver batch_size x updates_per_step rows"
            )
        return rows

    @torch.no_grad()
    def _prepare(self, batch: TensorDict) -> Minibatch:
        bootstrap = bootstrap_mask(batch["done"], batch["truncated"])
        return TensorDict(
            {
                "obs": self.obs_normalizer(batch["obs"]),
                "next_obs": self.obs_normalizer(batch["next_obs"]),
                "critic_obs": self.critic_obs_normalizer(batch["critic_obs"]),
                "next_critic_obs": self.critic_obs_normalizer(batch["next_critic_obs"]),
                "actions": batch["actions"],
                "reward": batch["reward"],
                "discount": self.offpolicy.gamma * bootstrap.to(batch["reward"].dtype),
            },
            batch_size=batch.batch_size,
            device=batch.device,
        )

    def _run_updates(self, data: Minibatch, iteration: int) -> dict[str, torch.Tensor]:
        updates = self.offpolicy.updates_per_step
        steps = []
        for u, mb in enumerate(data.split(data.shape[0] // updates)):
            self._update_index = u
            k = iteration * updates + u
            steps.append(
                self._update(
                    mb,
                    update_actor=(k + 1) % self.offpolicy.policy_frequency == 0,
                    counted=u == updates - 1,
                )
            )
        return mean_terms(steps)

    def _update(self, mb: Minibatch, update_actor: bool, counted: bool) -> dict[str, torch.Tensor]:
        """The critic step, the Polyak step of its targets and (``update_actor``) the actor step.

        Args:
            mb: One minibatch of :meth:`_prepare`'s entries.
            update_actor: Take an actor step after the critic step.
            counted: The critic step is the one per iteration Lightning counts.

        Returns:
            The logged terms of the steps that were taken.
        """
        loss, critic_terms = self._critic_loss_fn(mb)
        grad_norm = self._optimize(CRITIC, loss, list(self.critic.parameters()), counted)
        terms: dict[str, torch.Tensor] = {}
        if grad_norm is not None:
            terms.update(critic_terms)
            terms[metrics.CRITIC_GRAD_NORM] = grad_norm
        polyak_update(self.critic_target, self.critic, self.offpolicy.tau)
        if update_actor:
            loss, actor_terms = self._actor_loss_fn(mb)
            grad_norm = self._optimize(ACTOR, loss, list(self.actor.parameters()))
            if grad_norm is not None:
                terms.update(actor_terms)
                terms[metrics.ACTOR_GRAD_NORM] = grad_norm
        return terms

    def _td_loss(
        self, mb: Minibatch, next_actions: torch.Tensor, reward: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """C51 loss of both twins against the target twins' projection at ``(s', next_actions)``.

        Each target twin's next-state distribution is projected onto the support through
        ``reward + discount·z``; with ``use_cdq`` both heads learn the projection of the twin
        with the smaller mean, otherwise each its own; loss = Σ_heads mean cross-entropy.
        """
        options = self.offpolicy
        with torch.no_grad():
            # Distributions in float32 even under bf16 autocast: atoms are 1/num_atoms apart.
            next_logits = self.critic_target(mb["next_critic_obs"], next_actions).float()
            target = categorical_projection(
                torch.softmax(next_logits, dim=-1),
                reward,
                mb["discount"],
                options.v_min,
                options.v_max,
            )
            if options.use_cdq:
                target = clipped_double_target(target, self.support)
            target_q = expected_value(target, self.support)
        logits = self.critic(mb["critic_obs"], mb["actions"]).float()
        loss = distributional_cross_entropy(logits, target).mean(-1).sum()
        return loss, {
            metrics.LOSS_CRITIC: loss.detach(),
            metrics.Q_TARGET_MEAN: target_q.mean(),
            metrics.Q_TARGET_MAX: target_q.max(),
            metrics.Q_TARGET_MIN: target_q.min(),
        }

    def _policy_q(self, critic_obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """``Q(s, a)`` for the actor loss: the twins' expected values, min under ``use_cdq``, else mean."""
        logits = self.critic(critic_obs, actions).float()
        q = expected_value(torch.softmax(logits, dim=-1), self.support)
        return q.min(dim=0).values if self.offpolicy.use_cdq else q.mean(dim=0)

    def _optimize(
        self, which: int, loss: torch.Tensor, params: Sequence[torch.Tensor], counted: bool = False
    ) -> torch.Tensor | None:
        """Backward into ``params`` only, clip, step optimizer ``which`` (see ``RLAlgorithm._step``).

        Returns:
            The pre-clip gradient norm, or ``None`` when the loss or norm was non-finite and the
            step was skipped.
        """
        where = (
            f"iteration {self.global_step}, "
            f"update {self._update_index + 1}/{self.offpolicy.updates_per_step}"
        )
        return self._step(
            self.optimizers()[which],
            loss,
            params,
            max_grad_norm=self.offpolicy.max_grad_norm,
            counted=counted,
            kind=_steps(_OPTIMIZER_NAMES[which]),
            where=where,
        )
