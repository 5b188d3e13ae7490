"""What callbacks may use of a running collector (``CollectorLink``) and how they reach it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lightning.pytorch import Trainer

    from unilab_lit.collector.inbox import CollectorInbox
    from unilab_lit.collector.options import CollectorOptions
    from unilab_lit.collector.transport import Transport
    from unilab_lit.data.feed_stats import FeedStats
    from unilab_lit.ipc.obs_stats import SharedObsStats
    from unilab_lit.ipc.weights import SharedWeights


@dataclass
class CollectorLink:
    """The learner's side of one running collector, as callbacks see it: its collaborators.

    A ``CollectorSession`` builds it when it starts the collector; a data module hands it out
    as its ``collector_link`` between ``setup("fit")`` and ``teardown``.

    Attributes:
        options: The collector's options (``task``, ``num_envs``, ...).
        weights: The block ``WeightSync`` publishes the collector policy into.
        obs_stats: The block ``ObsNormSync`` publishes the observation statistics into.
        inbox: The collector's metrics messages and trace batches, its trace switch, and the
            messages lost because the learner drained too late (``dropped``).
        transport: The data blocks: rollouts overwritten unread (``dropped``) and the shared
            replay (``replay``, ``None`` for on-policy data).
        feed: Counters of the data set that delivers the batches (env steps behind them,
            those trained on, the latest wait); replaced when a new data set attaches.
        stop_requested: Set by a stop signal's handler (``callbacks.InterruptGuard``); a plain
            flag, so setting it takes no lock. In one process the learner's waits for data then
            end without a batch (training stops), and the stop's checkpoint leaves out the
            state of a collector that stopped beating instead of waiting for it.
    """

    options: CollectorOptions
    weights: SharedWeights
    obs_stats: SharedObsStats
    inbox: CollectorInbox
    transport: Transport
    feed: FeedStats
    stop_requested: bool = False


def collector_link(trainer: Trainer) -> CollectorLink:
    """The link to the collector that ``trainer``'s data module runs.

    Raises:
        TypeError: if the trainer's data module runs no collector (it has no ``collector_link``).
        RuntimeError: if the collector is not running (before ``setup("fit")``, after ``teardown``).
    """
    datamodule = trainer.datamodule
    if not has_collector_link(trainer):
        raise TypeError(
            "this callback talks to the collector, so it needs a data module with a "
            "`collector_link` (a CollectorDataModule such as RolloutDataModule or "
            f"ReplayDataModule); the trainer's data module is {type(datamodule).__name__}"
        )
    return datamodule.collector_link


def has_collector_link(trainer: Trainer) -> bool:
    """Whether ``trainer``'s data module runs a collector (provides ``collector_link``)."""
    datamodule = trainer.datamodule
    # Looked up on the class and the instance, not by hasattr(): asking must not run the
    # property, which raises while the collector is stopped.
    return hasattr(type(datamodule), "collector_link") or "collector_link" in getattr(
        datamodule, "__dict__", {}
    )
