"""Sender side of the learner → collector observation-normaliser sync."""

from __future__ import annotations

from lightning.pytorch import LightningModule, Trainer

from unilab_lit.collector.link import collector_link
from unilab_lit.collector.publisher import PeriodicPublisher


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
