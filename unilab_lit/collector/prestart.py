"""One collector process spawned before the learner imports Lightning, configured when the learner is built.

A collector spends most of its start-up importing torch; the learner spends seconds importing
Lightning before it knows the collector's config. :func:`prestart` (called first thing by
``cli.py fit``) spawns a child that does its imports meanwhile and then waits on a pipe; the
first :class:`~unilab_lit.collector.process.CollectorProcess` of the run adopts it through
:func:`claim` and sends it the config. A run that never builds a collector leaves the child
waiting until this process exits, which closes the pipe and ends it.

Only the standard library and light modules at import time: the CLI calls this before any heavy
import.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess

from unilab_lit.collector import _entry
from unilab_lit.collector.control import ControlBlock
from unilab_lit.collector.metrics import MetricsChannel

# The MetricsChannel size every CollectorProcess uses unless told otherwise.
METRICS_CAPACITY = 64
METRICS_SLOT_BYTES = 64 * 1024


@dataclass
class PrestartedCollector:
    """A spawned collector child waiting for its config.

    Args:
        process: The child.
        control: Its control block (shared at spawn, so it cannot be replaced later).
        metrics: Its metrics channel (shared at spawn).
        connection: Sending end of the pipe the child reads its pickled config from.
        metrics_capacity: ``metrics``' capacity in messages.
        metrics_slot_bytes: ``metrics``' largest message.
    """

    process: BaseProcess
    control: ControlBlock
    metrics: MetricsChannel
    connection: Connection
    metrics_capacity: int
    metrics_slot_bytes: int


_pending: PrestartedCollector | None = None


def prestart() -> None:
    """Spawn a collector child that imports torch and the collector modules, then waits.

    Does nothing if one is already waiting to be claimed.
    """
    global _pending
    if _pending is not None:
        return
    ctx = mp.get_context("spawn")
    control = ControlBlock(ctx)
    metrics = MetricsChannel(METRICS_CAPACITY, METRICS_SLOT_BYTES, ctx)
    receiver, sender = ctx.Pipe(duplex=False)
    process = ctx.Process(
        target=_entry.main_prestarted,
        args=(receiver, control, metrics, time.monotonic()),
        name="unilab-collector",
        daemon=True,
    )
    process.start()
    # Only the child holds the receiving end now: closing ``sender`` (or exiting) ends its wait.
    receiver.close()
    _pending = PrestartedCollector(
        process, control, metrics, sender, METRICS_CAPACITY, METRICS_SLOT_BYTES
    )


def claim(metrics_capacity: int, metrics_slot_bytes: int) -> PrestartedCollector | None:
    """The waiting child, at most once per :func:`prestart`, if it is alive and its metrics
    channel has the requested size; ``None`` otherwise (the caller spawns its own)."""
    global _pending
    candidate, _pending = _pending, None
    if candidate is None:
        return None
    fits = (candidate.metrics_capacity, candidate.metrics_slot_bytes) == (
        metrics_capacity,
        metrics_slot_bytes,
    )
    if fits and candidate.process.is_alive():
        return candidate
    # The child reads end-of-file once its imports are done, and exits.
    candidate.connection.close()
    return None
