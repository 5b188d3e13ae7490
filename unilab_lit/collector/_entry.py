"""Entry point of the collector subprocess.

A spawn child imports this module before its first line runs, so the top level imports only the
standard library; torch and the env are imported inside :func:`main`, after the signal setup.
"""

from __future__ import annotations

import logging
import os
import pickle
import signal
import sys
import time
import traceback
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from unilab_lit.collector.control import ControlBlock
    from unilab_lit.collector.metrics import MetricsChannel

logger = logging.getLogger(__name__)


def main(
    config_bytes: bytes, control: ControlBlock, metrics: MetricsChannel, spawned_at: float
) -> None:
    """Build env + actor, signal ready, run the loop until stopped; record any failure in ``control``.

    Args:
        config_bytes: The pickled ``CollectorConfig``. It is unpickled here rather than by
            multiprocessing, so that the imports it triggers (torch, the policy's module) come
            after the signal setup and count in the reported start-up timings.
        control: Shared control block.
        metrics: Metrics channel.
        spawned_at: ``time.monotonic()`` in the learner just before the spawn.
    """
    # The learner owns shutdown: a Ctrl-C in the terminal, or a scheduler's SIGTERM / SIGUSR1,
    # reaches the whole process group, and a child dying first would turn a clean stop (finish
    # the iteration, checkpoint with the collector's state) into a "collector died" error. The
    # learner's stop request, its SIGKILL, or the learner's death (watched by the loop) end it.
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1):
        signal.signal(signum, signal.SIG_IGN)
    try:
        entered = time.monotonic()
        config = pickle.loads(config_bytes)
        import torch

        torch.set_num_threads(config.torch_threads)
        from unilab_lit.collector.loop import build_loop

        imported = time.monotonic()
        loop = build_loop(config, control, metrics)
        control.mark_ready(
            spawn_s=entered - spawned_at,
            import_s=imported - entered,
            build_s=time.monotonic() - imported,
        )
        loop.run()
    except BaseException:
        text = traceback.format_exc()
        control.mark_failed(text)
        logger.error("collector failed:\n%s", text)
        sys.exit(1)
    control.mark_stopped()
    # Everything is closed and shared memory is the learner's to unlink; a full interpreter
    # shutdown (tearing down torch, mujoco and their modules) took 2-3 s on a loaded 2-core
    # machine, and the learner's stop, and with it a Ctrl-C, waits for this exit.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
