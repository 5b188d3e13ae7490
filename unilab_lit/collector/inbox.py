"""The collector's one message channel split for its two readers, and the trace switch over it."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from unilab_lit.ipc.futex import WAIT_SLICE_S
from unilab_lit.telemetry import tracing

if TYPE_CHECKING:
    from unilab_lit.ipc.channel import MetricsChannel
    from unilab_lit.ipc.control import ControlBlock

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
