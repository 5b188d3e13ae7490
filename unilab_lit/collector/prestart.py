"""One collector process spawned before the learner imports Lightning, configured when the learner is built.

A collector spends most of its start-up importing torch; the learner spends seconds importing
Lightning before it knows the collector's config. :func:`prestart` (called first thing by
``cli.py fit``) spawns a child that does its imports meanwhile and then waits on a pipe; the
first :class:`~unilab_lit.collector.process.CollectorProcess` of the run adopts it through
:func:`claim` and sends it the config. A child nobody adopts (``--print_config``, a config
error, a run that builds no collector) is killed when this process exits: it ignores SIGTERM
(the learner owns shutdown), so multiprocessing's exit handler, which terminates and then joins
daemonic children, would otherwise wait for it forever.

Only the standard library and light modules at import time: the CLI calls this before any heavy
import.
"""

from __future__ import annotations

import atexit
import multiprocessing as mp
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess

from unilab_lit.collector import _entry
from unilab_lit.ipc.channel import MetricsChannel
from unilab_lit.ipc.control import ControlBlock

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
    # Registered after multiprocessing's own exit handler, so it runs before it.
    atexit.register(_discard_unclaimed)


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
    _discard(candidate)
    return None


def _discard_unclaimed() -> None:
    global _pending
    candidate, _pending = _pending, None
    if candidate is not None:
        _discard(candidate)


def _discard(candidate: PrestartedCollector) -> None:
    # Killed rather than left to read end-of-file: it may still be importing torch for seconds.
    candidate.connection.close()
    candidate.process.kill()
    candidate.process.join()
