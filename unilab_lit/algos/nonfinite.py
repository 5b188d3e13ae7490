"""Skip-and-count for non-finite updates, with a limit on how many may come in a row."""

from __future__ import annotations

import logging

from unilab_lit.telemetry.log_limits import RateLimitFilter

log = logging.getLogger(__name__)
# An env (or a learner) that keeps failing would print one line per step; counters keep the total.
log.addFilter(RateLimitFilter())


class NonfiniteGuard:
    """Counts consecutive skipped non-finite updates per kind and stops a run that keeps failing.

    A transient NaN (one bad batch, one exploding minibatch) is skipped; ``limit`` skips of one
    kind in a row mean the run is broken, and the error says where and what to check. The total
    count lives with the module (a buffer, so it is checkpointed); this keeps only the runs.

    Args:
        owner: Name used in messages (the algorithm).
        limit: Consecutive skips of one kind that raise (>= 1).
        advice: What to check, appended to the error.
    """

    def __init__(self, owner: str, limit: int, advice: str) -> None:
        self.owner = owner
        self.limit = limit
        self.advice = advice
        self._in_a_row: dict[str, int] = {}

    def passed(self, kind: str) -> None:
        """A finite update of ``kind``: its run of skips ends."""
        self._in_a_row[kind] = 0

    def skipped(self, kind: str, where: str) -> None:
        """Record a skipped update of ``kind`` at ``where``.

        Raises:
            RuntimeError: on the ``limit``-th skip of ``kind`` in a row.
        """
        in_a_row = self._in_a_row.get(kind, 0) + 1
        self._in_a_row[kind] = in_a_row
        log.warning("%s: non-finite %s at %s; skipped", self.owner, kind, where)
        if in_a_row >= self.limit:
            raise RuntimeError(
                f"{self.owner}: {in_a_row} non-finite {kind} in a row (last at {where}; "
                f"max_nonfinite_steps={self.limit}). {self.advice}"
            )
