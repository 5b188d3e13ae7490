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
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from unilab_lit.ipc.channel import MetricsChannel
    from unilab_lit.ipc.control import ControlBlock

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
    _ignore_stop_signals()
    entered = time.monotonic()
    _run(config_bytes, control, metrics, spawn_s=entered - spawned_at, began=entered, idle_s=0.0)


def main_prestarted(
    connection: Connection, control: ControlBlock, metrics: MetricsChannel, spawned_at: float
) -> None:
    """Import what every collector needs, then wait for the learner's config and run as :func:`main`.

    The learner spawns this before it imports Lightning, so these imports overlap its own. The
    child exits quietly when the learner closes the pipe or dies without sending a config (the
    run needed no collector).

    Args:
        connection: Receiving end of a pipe; the learner sends the pickled ``CollectorConfig``.
        control: Shared control block.
        metrics: Metrics channel.
        spawned_at: ``time.monotonic()`` in the learner just before the spawn.
    """
    _ignore_stop_signals()
    entered = time.monotonic()
    try:
        # Imported for their start-up time, before the config arrives.
        import torch  # noqa: F401

        import unilab_lit.collector.loop  # noqa: F401
        import unilab_lit.nn.policies  # noqa: F401
    except BaseException:
        _fail(control)
    waiting = time.monotonic()
    try:
        config_bytes = connection.recv_bytes()
    except EOFError:
        os._exit(0)
    finally:
        connection.close()
    _run(
        config_bytes,
        control,
        metrics,
        spawn_s=entered - spawned_at,
        began=entered,
        idle_s=time.monotonic() - waiting,
    )


def _ignore_stop_signals() -> None:
    # The learner owns shutdown: a Ctrl-C in the terminal, or a scheduler's SIGTERM / SIGUSR1,
    # reaches the whole process group, and a child dying first would turn a clean stop (finish
    # the iteration, checkpoint with the collector's state) into a "collector died" error. The
    # learner's stop request, its SIGKILL, or the learner's death (watched by the loop) end it.
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1):
        signal.signal(signum, signal.SIG_IGN)


def _run(
    config_bytes: bytes,
    control: ControlBlock,
    metrics: MetricsChannel,
    spawn_s: float,
    began: float,
    idle_s: float,
) -> None:
    try:
        config = pickle.loads(config_bytes)
        import torch

        torch.set_num_threads(config.options.collector_torch_threads)
        from unilab_lit.collector.loop import build_loop

        imported = time.monotonic()
        loop = build_loop(config, control, metrics)
        control.mark_ready(
            spawn_s=spawn_s,
            import_s=imported - began - idle_s,
            build_s=time.monotonic() - imported,
        )
        loop.run()
    except BaseException:
        _fail(control)
    control.mark_stopped()
    # Everything is closed and shared memory is the learner's to unlink; a full interpreter
    # shutdown (tearing down torch, mujoco and their modules) took 2-3 s on a loaded 2-core
    # machine, and the learner's stop, and with it a Ctrl-C, waits for this exit.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _fail(control: ControlBlock) -> NoReturn:
    text = traceback.format_exc()
    control.mark_failed(text)
    logger.error("collector failed:\n%s", text)
    sys.exit(1)
