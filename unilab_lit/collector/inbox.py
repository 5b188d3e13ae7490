"""The collector's one message channel split for its two readers, and the trace hand-off over it."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

from unilab_lit import tracing

# Messages held for a reader that has not drained yet (drop-oldest beyond, like the channel).
_INBOX_MESSAGES = 1024
# Poll interval while waiting for the collector's last trace batch.
_TRACE_POLL_S = 0.005


class CollectorInbox:
    """Holds the metrics messages and the trace batches until their own reader drains them.

    The collector sends both over one channel; each drain pulls everything that arrived and
    keeps what belongs to the other reader.

    Args:
        source: Returns the messages the collector sent since its previous call.
    """

    def __init__(self, source: Callable[[], list[dict[str, Any]]]) -> None:
        self._source = source
        self._metrics: deque[dict[str, Any]] = deque(maxlen=_INBOX_MESSAGES)
        self._trace: deque[dict[str, Any]] = deque(maxlen=_INBOX_MESSAGES)
        self.dropped = 0

    def drain_metrics(self) -> list[dict[str, Any]]:
        """Every message that is not a trace batch, oldest first, since the last call."""
        self._pull()
        messages = list(self._metrics)
        self._metrics.clear()
        return messages

    def drain_trace(self) -> tuple[list[tracing.TraceBatch], bool]:
        """Trace batches since the last call, and whether the collector's final one is among them."""
        self._pull()
        batches = [message["batch"] for message in self._trace]
        final = any(message["final"] for message in self._trace)
        self._trace.clear()
        return batches, final

    def drain_trace_until_final(
        self, timeout_s: float, alive: Callable[[], bool]
    ) -> list[tracing.TraceBatch]:
        """Trace batches until the final one arrives, ``alive()`` turns false or ``timeout_s``
        passes (the collector was asked to stop recording before)."""
        deadline = time.monotonic() + timeout_s
        batches: list[tracing.TraceBatch] = []
        while True:
            arrived, final = self.drain_trace()
            batches += arrived
            if final or not alive() or time.monotonic() > deadline:
                return batches
            time.sleep(_TRACE_POLL_S)

    def _pull(self) -> None:
        for message in self._source():
            inbox = self._trace if message["kind"] == tracing.MESSAGE_KIND else self._metrics
            if len(inbox) == inbox.maxlen:
                self.dropped += 1
            inbox.append(message)
