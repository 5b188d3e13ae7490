"""The learner's side of a running collector as callbacks see it: ``CollectorLink`` and its parts.

``collector_link(trainer)`` reaches it; it carries the shared blocks callbacks publish into, the
``CollectorInbox`` of the collector's messages, the transport's counters and the data set's
``FeedStats``.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from torch.utils.data import IterableDataset

from unilab_lit.ipc.futex import WAIT_SLICE_S
from unilab_lit.telemetry import tracing

if TYPE_CHECKING:
    from lightning.pytorch import Trainer

    from unilab_lit.collector.options import CollectorOptions
    from unilab_lit.collector.transport import Transport
    from unilab_lit.ipc.channel import MetricsChannel
    from unilab_lit.ipc.control import ControlBlock
    from unilab_lit.ipc.obs_stats import SharedObsStats
    from unilab_lit.ipc.weights import SharedWeights


@dataclass
class FeedStats:
    """Statistics a data set keeps about its own items; the data module reads them.

    Attributes:
        env_steps: Collector env steps behind every batch delivered so far, earlier runs of a
            resumed fit included.
        learned_env_steps: Of those, the env steps of rollouts a batch contained: APPO's staging
            pool keeps only the newest ``staging_capacity`` of the rollouts it drains at once;
            off-policy data sets count every step they deliver.
        last_wait_s: Seconds the learner waited for its latest batch (the ``wait_for_data``
            span of the trace, measured once for both).
    """

    env_steps: int = 0
    learned_env_steps: int = 0
    last_wait_s: float = 0.0


class FeedingDataset(IterableDataset):
    """A data set of whole batches that keeps :class:`FeedStats` about what it delivered."""

    stats: FeedStats


# Messages held for a reader that has not drained yet (drop-oldest beyond, like the channel).
_INBOX_MESSAGES = 1024


class CollectorInbox:
    """Holds the metrics messages and the trace batches until their own reader drains them.

    The collector sends both over one channel; each drain pulls everything that arrived and
    keeps what belongs to the other reader.

    Args:
        channel: The collector's metrics channel (``drain()`` and its ``dropped`` count).
        control: The collector's control block (its trace switch).
        alive: Whether the collector still runs (a stopped one sends no final trace batch).
    """

    def __init__(
        self, channel: MetricsChannel, control: ControlBlock, alive: Callable[[], bool]
    ) -> None:
        self._channel = channel
        self._control = control
        self._alive = alive
        self._metrics: deque[dict[str, Any]] = deque(maxlen=_INBOX_MESSAGES)
        self._trace: deque[dict[str, Any]] = deque(maxlen=_INBOX_MESSAGES)
        self._dropped = 0

    @property
    def dropped(self) -> int:
        """Messages lost in the channel or here because their reader drained too late."""
        return self._channel.dropped + self._dropped

    def drain_metrics(self) -> list[dict[str, Any]]:
        """Every message that is not a trace batch, oldest first, since the last call."""
        self._pull()
        messages = list(self._metrics)
        self._metrics.clear()
        return messages

    def start_trace(self) -> None:
        """Ask the collector to record trace spans; :meth:`drain_trace` collects them."""
        self._control.request_trace(True)

    def drain_trace(self) -> tuple[list[tracing.TraceBatch], bool]:
        """Trace batches since the last call, and whether the collector's final one is among them."""
        self._pull()
        batches = [message["batch"] for message in self._trace]
        final = any(message["final"] for message in self._trace)
        self._trace.clear()
        return batches, final

    def stop_trace(self, timeout_s: float) -> list[tracing.TraceBatch]:
        """Ask the collector to stop recording; every batch not drained yet, up to its final one,
        which is waited for at most ``timeout_s`` (not at all once the collector is gone)."""
        self._control.request_trace(False)
        deadline = time.monotonic() + timeout_s
        batches: list[tracing.TraceBatch] = []
        sends = self._channel.sends
        while True:
            seen = sends.value
            arrived, final = self.drain_trace()
            batches += arrived
            if final or not self._alive() or time.monotonic() > deadline:
                return batches
            sends.wait(seen, WAIT_SLICE_S)

    def _pull(self) -> None:
        for message in self._channel.drain():
            inbox = self._trace if message["kind"] == tracing.MESSAGE_KIND else self._metrics
            if len(inbox) == inbox.maxlen:
                self._dropped += 1
            inbox.append(message)


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
        stop_requested: Set by a stop signal's handler (``unilab_lit.callbacks.InterruptGuard``); a
            plain flag, so setting it takes no lock. In one process the learner's waits for data
            then end without a batch (training stops), and the stop's checkpoint leaves out the
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
