"""Sender side of the learner → collector weight sync."""

from __future__ import annotations

from lightning.pytorch import LightningModule, Trainer

from unilab_lit.collector.link import collector_link
from unilab_lit.collector.publisher import PeriodicPublisher


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
