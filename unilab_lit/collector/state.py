"""The collector's state between two steps: taken for a checkpoint, handed back on resume."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from unilab_lit.collector import snapshot
from unilab_lit.collector.process import CollectorError, CollectorProcess
from unilab_lit.collector.transport import Transport

log = logging.getLogger(__name__)


def _never() -> bool:
    return False


def take_snapshot(
    collector: CollectorProcess,
    state_dir: Path,
    transport: Transport,
    timeout_s: float,
    stopping: Callable[[], bool] = _never,
) -> dict[str, Any] | None:
    """The running collector's state at its next step boundary; ``None`` if it is not running
    or does not answer within ``timeout_s`` (logged: the checkpoint goes on without it).

    ``stopping()``: a stop request, polled while waiting, so that the checkpoint of a stop, or
    one being written when the request comes, does not wait ``timeout_s`` for a hung collector
    (``CollectorProcess.hung``): its state is left out as soon as it is hung.
    """
    if not collector.running:
        return None

    def abandon() -> bool:
        return stopping() and collector.hung

    try:
        transport.quiesce(collector, timeout_s, abandon)
        if abandon():
            raise CollectorError(f"collector (pid {collector.pid}) is hung at the stop")
        request = collector.control.request_snapshot()
        collector.wait_for(
            lambda: collector.control.snapshot_done >= request or abandon(),
            timeout=timeout_s,
            watch=collector.control.snapshot_watch(),
        )
        if collector.control.snapshot_done < request:
            raise CollectorError(f"collector (pid {collector.pid}) hung during the snapshot")
    except (CollectorError, TimeoutError) as err:
        # A checkpoint written because the collector failed must still be written.
        log.warning("checkpoint without the collector's state: %s", err)
        return None
    path = state_dir / snapshot.SNAPSHOT_FILE
    state = snapshot.read(path)
    path.unlink()
    return state


def hand_over(
    collector: CollectorProcess, state_dir: Path, state: dict[str, Any], weights_published: bool
) -> None:
    """Give ``state`` to the collector, which reads it instead of its first reset.

    Raises:
        RuntimeError: if weights were published already: the collector has reset its envs.
    """
    if weights_published:
        raise RuntimeError(
            "the collector's state was restored after the first weights publish; the "
            "collector has reset its envs already (restore before on_train_start)"
        )
    snapshot.write(state_dir / snapshot.RESTORE_FILE, state)
    collector.control.request_restore()
