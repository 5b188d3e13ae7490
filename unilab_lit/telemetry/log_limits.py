"""Rate limit for warnings that repeat every step (a NaN-producing env, a run of skipped updates)."""

from __future__ import annotations

import logging
import threading
import time

from unilab_lit.validation import check_arg


class RateLimitFilter(logging.Filter):
    """Passes the first record of each message, then at most one per ``interval_s``.

    Records count as the same message when logger and format string match (the arguments may
    differ: ``"%d env(s) went non-finite"`` with 3 and with 5 are one message). A record let
    through after a quiet spell says how many were held back; the counters the code keeps
    (``Train/nonfinite_resets``, ``Loss/nonfinite_skips``) stay the full record.

    Attach it to a module's logger: ``log.addFilter(RateLimitFilter())``.

    Args:
        interval_s: Shortest time between two records of one message (> 0).

    Raises:
        ValueError: if ``interval_s`` is not positive.
    """

    def __init__(self, interval_s: float = 60.0) -> None:
        super().__init__()
        check_arg(interval_s > 0, "interval_s", interval_s, "> 0")
        self.interval_s = interval_s
        self._lock = threading.Lock()
        # (logger name, format string) -> [time let through, records held back since]
        self._seen: dict[tuple[str, str], list[float]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        """Whether ``record`` is emitted; may append the held-back count to its message."""
        key = (record.name, str(record.msg))
        now = time.monotonic()
        with self._lock:
            state = self._seen.get(key)
            if state is None:
                self._seen[key] = [now, 0]
                return True
            since, held_back = state
            if now - since < self.interval_s:
                state[1] += 1
                return False
            state[0], state[1] = now, 0
        if held_back:
            record.msg = (
                f"{record.msg} [{int(held_back)} more like this in the last {now - since:.0f} s "
                "not shown]"
            )
        return True
