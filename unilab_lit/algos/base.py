"""The algorithm base: the collector contract and what every learner shares besides its math."""

from __future__ import annotations

import logging
from abc import ABC
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

import torch
from lightning.pytorch.core.optimizer import LightningOptimizer
from torch import nn

from unilab_lit import distributed
from unilab_lit.algos.data_parallel import DataParallelHooks
from unilab_lit.algos.nonfinite import NonfiniteGuard
from unilab_lit.nn.normalization import ObsNormalizer
from unilab_lit.nn.policies import NormalizedPolicy, PolicySpec
from unilab_lit.telemetry import metrics, tracing
from unilab_lit.telemetry.log_schedule import loggers_write_this_step
from unilab_lit.validation import check_arg

log = logging.getLogger(__name__)

Fn = TypeVar("Fn", bound=Callable[..., Any])

COMPILE_SPAN = "torch_compile_first_iteration"
"""Trace span of the first iteration of a run with compiled losses: the compile is in it."""


class RLAlgorithm(DataParallelHooks, ABC):
    """A learner whose data comes from a collector process: the contract and the shared verbs.

    **Collector contract.** ``actor`` (built by :meth:`_build_actor`) is the policy the
    collector runs: the data module rebuilds :meth:`collector_policy` in the collector from
    :meth:`collector_policy_spec`; ``WeightSync`` publishes :meth:`collector_policy`'s
    ``state_dict`` and ``ObsNormSync`` publishes ``obs_normalizer``'s statistics, and the
    collector normalises raw policy observations with exactly those before acting.
    :meth:`inference_policy` is the same policy for evaluation and export: raw observation in,
    deterministic action out. The collector data module adds the two sync callbacks when the
    trainer has none, because without them the collector waits forever for its first weights
    and statistics.
    Each item of the data module is a ``TensorDict``: a time-major ``[T, M]`` rollout for APPO
    (``unilab_lit.algos.appo.ROLLOUT_KEYS``), ``[R]`` replay rows for the off-policy learners
    (``unilab_lit.algos.offpolicy.BATCH_KEYS``); ``training_step`` moves, indexes and splits it.

    **Shared state.** ``obs_normalizer`` / ``critic_obs_normalizer`` (running statistics in
    buffers, so checkpoints carry them) and ``nonfinite_skips`` (a buffer counting skipped
    non-finite updates). ``max_nonfinite_steps`` skips of one kind in a row raise.

    **Step convention.** One ``global_step`` is one iteration (one dataset item), however many
    optimizer steps it takes: every step goes to the raw optimizer except one per iteration,
    taken through Lightning's wrapper of the first optimizer of ``configure_optimizers`` (see
    :meth:`_step`; an iteration that skips every update calls :meth:`_count_iteration`).
    ``max_steps``, ``ModelCheckpoint(every_n_train_steps)``, the progress bar and the logger's
    x-axis therefore all count iterations. Because the raw steps bypass Lightning's precision
    plugin, ``precision="16-mixed"`` (loss scaling) is rejected; 32-bit and bf16 work.

    **Data parallel.** Under Lightning's DDP every rank is a whole learner with its own
    collector; :class:`~unilab_lit.algos.data_parallel.DataParallelHooks` keeps DDP's reducer
    out, and :meth:`_step` averages the gradients over the ranks instead, so every update (and
    every skip) is the same on every rank.

    Subclasses call ``self.save_hyperparameters()`` in their own ``__init__`` (after this one),
    so the checkpointed config is exactly their constructor's arguments.

    Args:
        policy_obs_size: Width of the policy observation group (>= 1).
        critic_obs_size: Width of the critic observation group (>= 1).
        action_size: Width of the action vector (>= 1).
        max_nonfinite_steps: Consecutive skipped updates of one kind that stop training (>= 1).
        nonfinite_advice: What to check, appended to the error that stops training.
        obs_clip: Bound of both normalisers' output (> 0), or ``None`` for unclipped; the
            normaliser carries it to the collector and into ``inference_policy()``.

    Raises:
        ValueError: If an argument is outside its valid range (the message names it).
    """

    obs_normalizer: ObsNormalizer
    """Running statistics of the policy observation; published to the collector by ``ObsNormSync``."""

    critic_obs_normalizer: ObsNormalizer
    """Running statistics of the critic observation (learner only)."""

    actor: nn.Module
    """The acting module the collector runs (:meth:`_build_actor`)."""

    nonfinite_skips: torch.Tensor

    trains_from: ClassVar[str]
    """Name of the data module class (or base class) whose items ``training_step`` takes; the
    data module refuses another model before its collector starts."""

    def __init__(
        self,
        policy_obs_size: int,
        critic_obs_size: int,
        action_size: int,
        max_nonfinite_steps: int,
        nonfinite_advice: str,
        obs_clip: float | None = 10.0,
    ) -> None:
        super().__init__()
        for name, size in (
            ("policy_obs_size", policy_obs_size),
            ("critic_obs_size", critic_obs_size),
            ("action_size", action_size),
        ):
            check_arg(isinstance(size, int) and size >= 1, name, size, "an int >= 1")
        check_arg(max_nonfinite_steps >= 1, "max_nonfinite_steps", max_nonfinite_steps, ">= 1")
        check_arg(obs_clip is None or obs_clip > 0, "obs_clip", obs_clip, "> 0 or null")
        self.automatic_optimization = False
        self._action_size = action_size
        self.obs_normalizer = ObsNormalizer(policy_obs_size, clip=obs_clip)
        self.critic_obs_normalizer = ObsNormalizer(critic_obs_size, clip=obs_clip)
        # Total skipped updates; a buffer so the count survives a resume.
        self.register_buffer("nonfinite_skips", torch.zeros((), dtype=torch.int64))
        self._nonfinite = NonfiniteGuard(type(self).__name__, max_nonfinite_steps, nonfinite_advice)
        # The first iteration after _compile (where torch.compile does its work) is timed.
        self._compile_pending = False
        self._compile_span: tracing._Span | None = None

    # ----------------------------------------------------------------- collector contract
    def collector_policy(self) -> nn.Module:
        """The learner's acting module ``actor``, whose ``state_dict`` ``WeightSync`` publishes.

        Its ``act(normalised_obs)`` returns ``{"actions": ...}`` (and ``"log_prob"`` where the
        algorithm needs the behaviour density); its ``forward`` is the deterministic action.
        """
        return self.actor

    def collector_policy_spec(self) -> PolicySpec:
        """How the collector rebuilds :meth:`collector_policy` (same ``state_dict`` layout)."""
        return self._actor_spec

    def inference_policy(self) -> nn.Module:
        """Raw policy observation ``[..., policy_obs_size]`` → deterministic action ``[..., action_size]``.

        The observation normaliser is folded in, and the forward pass has no data-dependent
        Python control flow, so ``torch.export.export`` / ``torch.onnx.export`` capture it. It uses
        the learner's live modules; copy it to freeze it.
        """
        return NormalizedPolicy(self.obs_normalizer, self.actor)

    def _build_actor(self, actor_class: Callable[..., nn.Module], **kwargs: Any) -> None:
        """Build ``actor`` as ``actor_class(obs_size=policy_obs_size, action_size=..., **kwargs)``.

        Subclasses call it once in ``__init__``; the same recipe is what the collector rebuilds
        (:meth:`collector_policy_spec`), so both sides have one ``state_dict`` layout.
        """
        sizes = {"obs_size": self.obs_normalizer.size, "action_size": self._action_size}
        self._actor_spec = PolicySpec.of(actor_class, {**sizes, **kwargs})
        self.actor = self._actor_spec.build()

    # ------------------------------------------------------------------------- Lightning
    def on_fit_start(self) -> None:
        super().on_fit_start()
        if self.trainer.precision == "16-mixed":
            raise ValueError(
                f"{type(self).__name__} does not support precision='16-mixed': its raw optimizer "
                "steps bypass Lightning's gradient scaler; use '32-true' or 'bf16-mixed'"
            )

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        super().on_train_batch_start(batch, batch_idx)
        if self._compile_pending:
            self._compile_span = tracing.timed(COMPILE_SPAN).__enter__()

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self._compile_span is not None:
            span, self._compile_span, self._compile_pending = self._compile_span, None, False
            span.__exit__(None, None, None)
            log.info(
                "torch.compile: the first iteration of %s took %.1f s with the compile of its "
                "losses (inductor caches it on disk: later runs compile faster)",
                type(self).__name__,
                span.seconds,
            )

    # ----------------------------------------------------------------------- shared verbs
    def _compile(self, loss_fn: Fn) -> Fn:
        """``loss_fn`` through ``torch.compile`` (inductor, any device); the compile happens on
        the first calls and the first iteration is timed (log line, trace span :data:`COMPILE_SPAN`).

        Random draws inside the loss stay eager's (inductor's ``fallback_random``, a process-wide
        switch): a compiled loss equals the eager one up to rounding on the same batch and RNG
        state, and a resumed run continues the same random stream as an eager one.
        """
        torch._inductor.config.fallback_random = True
        self._compile_pending = True
        return torch.compile(loss_fn)

    @torch.no_grad()
    def _update_normalizers(self, obs: torch.Tensor, critic_obs: torch.Tensor) -> None:
        self.obs_normalizer.update(obs)
        self.critic_obs_normalizer.update(critic_obs)

    def _step(
        self,
        optimizer: LightningOptimizer,
        loss: torch.Tensor,
        params: Sequence[torch.Tensor],
        *,
        max_grad_norm: float,
        counted: bool,
        kind: str,
        where: str,
    ) -> torch.Tensor | None:
        """Backward into ``params`` only, average over DDP ranks, clip, step; skip a non-finite update.

        Args:
            optimizer: Lightning's wrapper of the optimizer that owns ``params``.
            loss: Scalar loss.
            params: The parameters this step updates (``inputs=`` of the backward, so e.g. an
                actor loss leaves the critic's gradients alone).
            max_grad_norm: Global gradient-norm clip over ``params``; 0 disables clipping.
            counted: Step through Lightning's wrapper: the one step per iteration that advances
                ``global_step``. It is taken even when this update is skipped; its gradients are
                then ``None`` and the optimizer leaves every parameter alone.
            kind: The run of skips this update belongs to (e.g. ``"critic steps"``).
            where: Where this update is, for the warning and the error.

        Returns:
            The pre-clip gradient norm, or ``None`` when the loss or the norm was non-finite and
            the update was skipped.

        Raises:
            RuntimeError: On the ``max_nonfinite_steps``-th skipped update of ``kind`` in a row.
        """
        raw = optimizer.optimizer
        raw.zero_grad(set_to_none=True)
        self.manual_backward(loss, inputs=list(params))
        # Under DDP: gradients and loss averaged over the ranks in one all-reduce (DDP's reducer
        # is kept out, see DataParallelHooks), so the norm, the clip and the skip decision below
        # are the same on every rank: a non-finite value on one rank is non-finite in the mean.
        loss_value = distributed.average_gradients(params, loss.detach())
        grad_norm = nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])
        # The one host sync per update: the skip decision needs the value.
        finite = bool(torch.isfinite(loss_value + grad_norm))
        if finite:
            self._nonfinite.passed(kind)
            if max_grad_norm > 0.0:
                nn.utils.clip_grads_with_norm_(params, max_grad_norm, grad_norm)
        else:
            raw.zero_grad(set_to_none=True)
            self._skip_nonfinite(kind, where)
        if counted:
            optimizer.step()
        elif finite:
            raw.step()
        return grad_norm if finite else None

    def _count_iteration(self) -> None:
        """Advance ``global_step`` for an iteration that updates nothing.

        No gradients exist, so the optimizer changes nothing; the call only counts.
        """
        optimizer = self._counted_optimizer()
        optimizer.optimizer.zero_grad(set_to_none=True)
        optimizer.step()

    def _counted_optimizer(self) -> LightningOptimizer:
        optimizers = self.optimizers()
        return optimizers[0] if isinstance(optimizers, list) else optimizers

    def _skip_nonfinite(self, kind: str, where: str) -> None:
        self.nonfinite_skips += 1
        self._nonfinite.skipped(kind, where)

    def _loggers_write(self) -> bool:
        """Whether this iteration's metrics reach the loggers (call after its counted step).

        Each logged key costs ~1 ms on a busy CPU, so costly or numerous terms are logged only
        on the iterations the loggers write (Lightning's own ``LearningRateMonitor`` does the same).
        """
        return loggers_write_this_step(self.trainer)

    def _log_terms(self, terms: Mapping[str, torch.Tensor | float], batch_size: int) -> None:
        """Log ``terms`` and the skip count for this iteration (call when :meth:`_loggers_write`)."""
        logged = {**terms, metrics.NONFINITE_SKIPS: self.nonfinite_skips.float()}
        if distributed.is_distributed():
            logged = self._job_values(logged)
        self.log_dict(logged, on_step=True, on_epoch=False, batch_size=batch_size)

    def _job_values(self, terms: Mapping[str, torch.Tensor | float]) -> dict[str, torch.Tensor]:
        """Every term reduced over the ranks, in one all-gather for all of them.

        Every rank then logs the job's values, so a ``ModelCheckpoint`` or ``EarlyStopping``
        that monitors a ``Loss/*`` or ``Policy/*`` key decides the same on every rank. A term is
        the mean over the ranks (the ranks' batches are the same size), the extremes in
        ``metrics.MAX_OVER_RANKS`` / ``MIN_OVER_RANKS`` the maximum / minimum; terms the ranks
        share already (the averaged losses, the learning rate, the skip count) keep their value.
        """
        keys = sorted(terms)  # the same order on every rank
        values = [torch.as_tensor(terms[k], device=self.device).reshape(()) for k in keys]
        ranks = distributed.stack_over_ranks(torch.stack([v.to(torch.float64) for v in values]))
        is_max = torch.tensor([k in metrics.MAX_OVER_RANKS for k in keys], device=ranks.device)
        is_min = torch.tensor([k in metrics.MIN_OVER_RANKS for k in keys], device=ranks.device)
        job = torch.where(is_max, ranks.amax(0), torch.where(is_min, ranks.amin(0), ranks.mean(0)))
        return {k: job[i].to(v.dtype) for i, (k, v) in enumerate(zip(keys, values, strict=True))}
