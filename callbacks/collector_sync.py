"""Learner -> collector publishing: the weights and the observation statistics, on one schedule.

``WeightSync`` and ``ObsNormSync`` are the senders of the shared ``SharedWeights`` and
``SharedObsStats``; ``PeriodicPublisher`` is the schedule both follow. A collector data module adds
whichever of the two a trainer lacks (``unilab_lit.data.base``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from lightning.pytorch import Callback, LightningModule, Trainer
from typing_extensions import override

from unilab_lit.collector.link import collector_link
from unilab_lit.telemetry import tracing
from unilab_lit.validation import check_arg


class PeriodicPublisher(Callback, ABC):
    """Calls ``_publish`` in ``on_train_start`` and every ``every_n_steps`` iterations.

    ``on_train_start`` runs after a resume has restored the module, so the first
    thing the collector receives is the restored state. The learner's ``global_step``
    is the version: an iteration that did not advance it (every optimiser step was
    skipped) publishes nothing, so versions stay strictly increasing.

    Args:
        every_n_steps: Publish after every this many learner iterations (>= 1).

    Raises:
        ValueError: if ``every_n_steps`` is smaller than 1.
    """

    def __init__(self, every_n_steps: int = 1) -> None:
        check_arg(every_n_steps >= 1, f"{type(self).__name__}.every_n_steps", every_n_steps, ">= 1")
        self.every_n_steps = every_n_steps
        self._published_step: int | None = None

    @override
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._publish_once(trainer, pl_module)

    @override
    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if trainer.global_step % self.every_n_steps == 0:
            self._publish_once(trainer, pl_module)

    def _publish_once(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.global_step != self._published_step:
            with tracing.span(f"{type(self).__name__}.publish"):
                self._publish(trainer, pl_module)
            self._published_step = trainer.global_step

    @abstractmethod
    def _publish(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Push the learner-side state to the collector as version ``trainer.global_step``."""


class WeightSync(PeriodicPublisher):
    """Publishes the module's collector policy to the collector (``CollectorLink.weights``).

    The version is the learner's ``global_step`` (one step = one learner iteration):
    the collector stamps it on the data it generates, and the policy lag is measured
    in it.

    Args:
        every_n_steps: Publish after every this many learner iterations (>= 1).
    """

    def _publish(self, trainer: Trainer, pl_module: LightningModule) -> None:
        collector_link(trainer).weights.publish_module(
            pl_module.collector_policy(), version=trainer.global_step
        )


class ObsNormSync(PeriodicPublisher):
    """Publishes the module's ``obs_normalizer`` statistics to the collector (``SharedObsStats``).

    The collector normalises with exactly these statistics and the learner's ``eps``
    and ``clip`` (they travel in the collector's config), so both sides compute the
    same normalised observation.

    Args:
        every_n_steps: Publish after every this many learner iterations (>= 1).
    """

    def _publish(self, trainer: Trainer, pl_module: LightningModule) -> None:
        collector_link(trainer).obs_stats.publish_normalizer(
            pl_module.obs_normalizer, version=trainer.global_step
        )
