"""The learner iteration FastTD3 and FastSAC share: replay-batch contract, minibatches, step counting, non-finite guard."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from lightning.pytorch import LightningModule
from tensordict import TensorDict
from torch import nn

from unilab_lit import distributed, metrics
from unilab_lit.algos.data_parallel import DataParallelHooks
from unilab_lit.algos.nonfinite import NonfiniteGuard
from unilab_lit.nn.normalization import ObsNormalizer
from unilab_lit.validation import check_arg

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
"""Keys of one replay item (a ``TensorDict`` of ``batch_size × updates_per_step`` rows)."""

_FLOAT_KEYS = ("obs", "next_obs", "actions", "reward", "critic_obs", "next_critic_obs")

# Optimizer indices in configure_optimizers' list; the critic's is the one Lightning counts.
CRITIC, ACTOR, TEMPERATURE = 0, 1, 2
_OPTIMIZER_NAMES = ("critic", "actor", "temperature")

Minibatch = dict[str, torch.Tensor]


def bootstrap_mask(done: torch.Tensor, truncated: torch.Tensor) -> torch.Tensor:
    """Rows whose target bootstraps from ``next_obs``: all but those whose episode terminated.

    A truncated row (time limit) bootstraps from its ``next_obs``, which the collector stores as
    the true final observation. ``done`` may hold terminated alone or terminated | truncated:
    ``truncated`` is never true where the episode terminated (the env guarantees it), so
    ``~done | truncated`` is "not terminated" under both conventions.

    Args:
        done: Boolean ``[...]``.
        truncated: Boolean ``[...]``.

    Returns:
        Boolean ``[...]``, true where the target bootstraps.
    """
    return ~done | truncated


@torch.no_grad()
def polyak_update(target: nn.Module, source: nn.Module, tau: float) -> None:
    """``θ_target ← (1 − τ)·θ_target + τ·θ_source`` over the parameters, in place."""
    torch._foreach_lerp_(list(target.parameters()), list(source.parameters()), tau)


def _steps(what: str) -> str:
    # Each optimiser (and the input check) has its own run of skips, e.g. "critic steps".
    return f"{what} steps"


class OffPolicyLearner(DataParallelHooks, LightningModule, ABC):
    """One learner iteration over one replay item, for actor-critic learners with C51 twin critics.

    One dataset item holds ``batch_size × updates_per_step`` rows (see :data:`BATCH_KEYS`) of raw
    observations ``obs``/``next_obs`` ``[R, Dp]``, ``critic_obs``/``next_critic_obs`` ``[R, Dc]``,
    ``actions [R, A]``, ``reward [R]`` and boolean ``done``/``truncated [R]``. Per item: the
    normalisers fold in ``obs`` and ``critic_obs`` (once per item, so each sampled row counts
    once), every observation is normalised, and the rows are sliced into ``updates_per_step``
    consecutive minibatches; the subclass's :meth:`_update` runs on each. Update ``k`` of the run
    (``k = global_step · updates_per_step + u``) also updates the actor when
    ``(k + 1) % policy_frequency == 0``, so the actor schedule carries across items and resumes.

    Step convention: one ``global_step`` is one iteration (one dataset item), as in APPO. Every
    optimizer step goes to the raw optimizer except the critic step of the last minibatch, which
    goes through Lightning's ``self.optimizers()[CRITIC].step()`` (taken even when that update is
    skipped; it then has no gradients and changes nothing). ``max_steps``,
    ``ModelCheckpoint(every_n_train_steps)``, the progress bar and the logger's x-axis all count
    iterations. Because the raw steps bypass Lightning's precision plugin, ``precision="16-mixed"``
    (loss scaling) is rejected; ``"bf16-mixed"`` is this module's AMP and works on any device.

    ``compile_losses=True`` wraps the subclass's critic and actor loss functions in
    ``torch.compile`` and is accepted on CUDA only: :meth:`on_fit_start` raises ``ValueError`` on
    any other device rather than silently training uncompiled.

    Non-finite handling: an item with a non-finite float entry is skipped whole (normalisers
    untouched); an update whose loss or gradient norm is non-finite skips that optimizer step.
    Both count in the ``nonfinite_skips`` buffer; ``max_nonfinite_steps`` consecutive skips of one
    kind (input batch, critic, actor, temperature) raise ``RuntimeError`` naming it.

    ``training_step`` takes the ``dataloader_iter`` so Lightning never fetches the next item before
    this iteration's update finishes.

    Subclasses build ``actor``, ``critic`` and ``critic_target``, implement
    :meth:`_critic_loss`, :meth:`_actor_loss`, :meth:`_update`, ``configure_optimizers`` (in
    ``CRITIC, ACTOR[, TEMPERATURE]`` order, via :meth:`_adamw`) and the collector contract
    (``collector_policy``, ``collector_policy_spec``).

    Args:
        policy_obs_size: Width of the policy observation group (>= 1).
        critic_obs_size: Width of the critic observation group (>= 1).
        action_size: Width of the action vector (>= 1).
        num_atoms: Atoms of the C51 support (>= 2).
        v_min: Lowest atom.
        v_max: Highest atom (> v_min).
        gamma: Discount factor, in (0, 1].
        tau: Polyak rate of the critic targets, in (0, 1].
        updates_per_step: Minibatches (critic updates) per item (>= 1).
        policy_frequency: Critic updates per actor update (>= 1).
        critic_learning_rate: AdamW learning rate of the critics (> 0).
        actor_learning_rate: AdamW learning rate of the actor (> 0).
        weight_decay: AdamW decoupled weight decay of critics and actor (>= 0).
        adam_betas: AdamW ``(β1, β2)``, each in [0, 1).
        max_grad_norm: Per-network gradient-norm clip; 0 disables clipping (>= 0).
        compile_losses: ``torch.compile`` the loss functions (CUDA only).
        max_nonfinite_steps: Consecutive skipped steps of one kind that stop training (>= 1).

    Raises:
        ValueError: If an argument is outside its valid range (the message names it).
    """

    def __init__(
        self,
        *,
        policy_obs_size: int,
        critic_obs_size: int,
        action_size: int,
        num_atoms: int,
        v_min: float,
        v_max: float,
        gamma: float,
        tau: float,
        updates_per_step: int,
        policy_frequency: int,
        critic_learning_rate: float,
        actor_learning_rate: float,
        weight_decay: float,
        adam_betas: tuple[float, float],
        max_grad_norm: float,
        compile_losses: bool,
        max_nonfinite_steps: int,
    ) -> None:
        super().__init__()
        for name, size in (
            ("policy_obs_size", policy_obs_size),
            ("critic_obs_size", critic_obs_size),
            ("action_size", action_size),
        ):
            check_arg(isinstance(size, int) and size >= 1, name, size, "an int >= 1")
        check_arg(num_atoms >= 2, "num_atoms", num_atoms, ">= 2")
        check_arg(v_max > v_min, "v_max", v_max, f"> v_min ({v_min})")
        check_arg(0.0 < gamma <= 1.0, "gamma", gamma, "in (0, 1]")
        check_arg(0.0 < tau <= 1.0, "tau", tau, "in (0, 1]")
        check_arg(updates_per_step >= 1, "updates_per_step", updates_per_step, ">= 1")
        check_arg(policy_frequency >= 1, "policy_frequency", policy_frequency, ">= 1")
        check_arg(critic_learning_rate > 0.0, "critic_learning_rate", critic_learning_rate, "> 0")
        check_arg(actor_learning_rate > 0.0, "actor_learning_rate", actor_learning_rate, "> 0")
        check_arg(weight_decay >= 0.0, "weight_decay", weight_decay, ">= 0")
        check_arg(
            len(adam_betas) == 2 and all(0.0 <= b < 1.0 for b in adam_betas),
            "adam_betas",
            adam_betas,
            "two values in [0, 1)",
        )
        check_arg(max_grad_norm >= 0.0, "max_grad_norm", max_grad_norm, ">= 0 (0 disables)")
        check_arg(max_nonfinite_steps >= 1, "max_nonfinite_steps", max_nonfinite_steps, ">= 1")
        # Collects the subclass's constructor arguments too (they are the checkpointed config).
        self.save_hyperparameters()
        self.automatic_optimization = False

        self.obs_normalizer = ObsNormalizer(policy_obs_size)
        self.critic_obs_normalizer = ObsNormalizer(critic_obs_size)
        # Derived from hyperparameters, so not checkpointed; a buffer so it follows the device.
        self.register_buffer("support", torch.linspace(v_min, v_max, num_atoms), persistent=False)
        # Total skipped steps; a buffer so the count survives a resume.
        self.register_buffer("nonfinite_skips", torch.zeros((), dtype=torch.int64))
        self._nonfinite = NonfiniteGuard(
            type(self).__name__,
            max_nonfinite_steps,
            "Check the environment's rewards and observations for NaN/inf, the C51 support "
            "(v_min/v_max) against the returns, or lower the learning rates.",
        )
        self._update_index = 0
        self._critic_loss_fn = self._critic_loss
        self._actor_loss_fn = self._actor_loss

    # ------------------------------------------------------------------- subclass verbs
    @abstractmethod
    def _critic_loss(self, mb: Minibatch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Distributional TD loss on one minibatch, and its logged terms."""

    @abstractmethod
    def _actor_loss(self, mb: Minibatch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Policy loss on one minibatch, and its logged terms."""

    @abstractmethod
    def _update(self, mb: Minibatch, update_actor: bool, counted: bool) -> dict[str, torch.Tensor]:
        """All optimizer steps of one minibatch; ``counted`` marks the critic step Lightning counts.

        Returns the logged terms of the steps that were taken.
        """

    # ------------------------------------------------------------------------ Lightning
    def on_fit_start(self) -> None:
        if self.trainer.precision == "16-mixed":
            raise ValueError(
                f"{type(self).__name__} does not support precision='16-mixed': its raw optimizer "
                "steps bypass Lightning's gradient scaler; use '32-true' or 'bf16-mixed'"
            )
        if self.hparams.compile_losses:
            if self.device.type != "cuda":
                raise ValueError(
                    f"compile_losses=True needs a CUDA device, but this run is on "
                    f"{self.device.type!r}; set compile_losses: false"
                )
            self._critic_loss_fn = torch.compile(self._critic_loss)
            self._actor_loss_fn = torch.compile(self._actor_loss)

    def training_step(self, dataloader_iter: Iterator[Any]) -> None:
        batch, _, _ = next(dataloader_iter)
        rows = self._check_batch(batch)
        # The dataloader_iter flavour skips Lightning's batch_to_device; a no-op for items the
        # data module already placed on the learner's device.
        batch = batch.to(self.device, non_blocking=True)
        iteration = self.global_step
        logged: dict[str, torch.Tensor] = {}
        if distributed.all_ranks(self._batch_is_finite(batch)):
            self._nonfinite.passed(_steps("input batch"))
            self._update_normalizers(batch)
            logged.update(self._run_updates(self._prepare(batch), iteration))
        else:
            self._skip_nonfinite("input batch")
            self._count_iteration()
        # Each logged key costs ~1 ms on a busy CPU: log only on iterations the loggers write.
        if self.trainer._logger_connector.should_update_logs:
            logged[metrics.NONFINITE_SKIPS] = self.nonfinite_skips.float()
            self.log_dict(logged, on_step=True, on_epoch=False, batch_size=rows)

    # ------------------------------------------------------------------------ iteration
    def _check_batch(self, batch: TensorDict) -> int:
        missing = [key for key in BATCH_KEYS if key not in batch]
        if missing:
            raise KeyError(
                f"replay batch lacks {missing}; it has {sorted(batch.keys())}, "
                f"expected {list(BATCH_KEYS)}"
            )
        rows = batch["reward"].shape[0]
        updates = self.hparams.updates_per_step
        if rows < updates or rows % updates:
            raise ValueError(
                f"a replay batch of {rows} rows does not split into updates_per_step={updates} "
                "equal minibatches; the data module must deliver batch_size x updates_per_step rows"
            )
        return rows

    @staticmethod
    def _batch_is_finite(batch: TensorDict) -> bool:
        return bool(torch.stack([batch[k].isfinite().all() for k in _FLOAT_KEYS]).all())

    @torch.no_grad()
    def _update_normalizers(self, batch: TensorDict) -> None:
        self.obs_normalizer.update(batch["obs"])
        self.critic_obs_normalizer.update(batch["critic_obs"])

    @torch.no_grad()
    def _prepare(self, batch: TensorDict) -> Minibatch:
        bootstrap = bootstrap_mask(batch["done"], batch["truncated"])
        return {
            "obs": self.obs_normalizer(batch["obs"]),
            "next_obs": self.obs_normalizer(batch["next_obs"]),
            "critic_obs": self.critic_obs_normalizer(batch["critic_obs"]),
            "next_critic_obs": self.critic_obs_normalizer(batch["next_critic_obs"]),
            "actions": batch["actions"],
            "reward": batch["reward"],
            "discount": self.hparams.gamma * bootstrap.to(batch["reward"].dtype),
        }

    def _run_updates(self, data: Minibatch, iteration: int) -> dict[str, torch.Tensor]:
        hp = self.hparams
        size = data["reward"].shape[0] // hp.updates_per_step
        sums: dict[str, list[torch.Tensor]] = {}
        for u in range(hp.updates_per_step):
            self._update_index = u
            mb = {key: value[u * size : (u + 1) * size] for key, value in data.items()}
            k = iteration * hp.updates_per_step + u
            terms = self._update(
                mb,
                update_actor=(k + 1) % hp.policy_frequency == 0,
                counted=u == hp.updates_per_step - 1,
            )
            for key, value in terms.items():
                sums.setdefault(key, []).append(value.detach().float())
        return {key: torch.stack(values).mean() for key, values in sums.items()}

    def _optimize(
        self, which: int, loss: torch.Tensor, params: Sequence[torch.Tensor], counted: bool = False
    ) -> torch.Tensor | None:
        """Backward into ``params`` only, clip, step optimizer ``which``.

        Returns:
            The pre-clip gradient norm, or ``None`` when the loss or norm was non-finite and the
            step was skipped.
        """
        lightning_optimizer = self.optimizers()[which]
        optimizer = lightning_optimizer.optimizer
        optimizer.zero_grad(set_to_none=True)
        # inputs= keeps e.g. the actor loss from filling the critic's gradients.
        self.manual_backward(loss, inputs=list(params))
        # Under DDP: gradients and loss averaged over the ranks (one all-reduce), so the norm,
        # the clip and the skip decision below are the same on every rank.
        loss_value = distributed.average_gradients(params, loss.detach())
        grad_norm = nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])
        # The one host sync per step: the skip decision needs the value.
        finite = bool(torch.isfinite(loss_value + grad_norm))
        name = _OPTIMIZER_NAMES[which]
        if finite:
            self._nonfinite.passed(_steps(name))
            if self.hparams.max_grad_norm > 0.0:
                nn.utils.clip_grads_with_norm_(params, self.hparams.max_grad_norm, grad_norm)
        else:
            optimizer.zero_grad(set_to_none=True)
            self._skip_nonfinite(name)
        if counted:
            lightning_optimizer.step()
        elif finite:
            optimizer.step()
        return grad_norm if finite else None

    def _count_iteration(self) -> None:
        # No gradients exist, so AdamW changes nothing; the call only advances global_step.
        self.optimizers()[CRITIC].optimizer.zero_grad(set_to_none=True)
        self.optimizers()[CRITIC].step()

    def _skip_nonfinite(self, what: str) -> None:
        self.nonfinite_skips += 1
        where = f"iteration {self.global_step}"
        if what != "input batch":
            where += f", update {self._update_index + 1}/{self.hparams.updates_per_step}"
        self._nonfinite.skipped(_steps(what), where)

    def _adamw(
        self, params: Sequence[torch.Tensor], lr: float, weight_decay: float
    ) -> torch.optim.AdamW:
        """AdamW with the configured betas; the fused kernel on CUDA."""
        return torch.optim.AdamW(
            params,
            lr=lr,
            betas=tuple(self.hparams.adam_betas),
            weight_decay=weight_decay,
            fused=self.device.type == "cuda",
        )
