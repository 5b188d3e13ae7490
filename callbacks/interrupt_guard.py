"""Ctrl-C ends training after the current iteration, so the last checkpoint is a clean one."""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType
from typing import Any

from lightning.pytorch import Callback, LightningModule, Trainer
from typing_extensions import override

from unilab_lit import distributed

log = logging.getLogger(__name__)


class InterruptGuard(Callback):
    """Turns the first SIGINT (Ctrl-C) during training into a stop after the current iteration.

    Without it, Lightning raises ``KeyboardInterrupt`` wherever the main thread is, often in the
    middle of an iteration's minibatch updates: a checkpoint written then (``ModelCheckpoint(
    save_on_exception=True)``) holds a half-updated iteration, and no checkpoint is written
    otherwise. With it, the first SIGINT sets ``trainer.should_stop``: the iteration finishes,
    the epoch ends, ``ModelCheckpoint(save_last=True)`` writes ``last.ckpt`` at that step (the
    collector's state included), the data module stops the collector and unlinks its shared
    memory, and ``fit`` returns. A second SIGINT interrupts at once through Lightning's own
    path (which also stops the collector).

    The handler is installed in ``on_train_start`` and the previous one is put back when
    training ends, fails or is torn down; a SIGINT before training (collector start-up) takes
    Lightning's path. Without effect outside the main thread, where Python delivers no signals.
    """

    def __init__(self) -> None:
        self._trainer: Trainer | None = None
        self._previous: Any = None
        self._installed = False
        self.interrupted = False

    @override
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        self._trainer = trainer
        self.interrupted = False
        self._previous = signal.signal(signal.SIGINT, self._on_sigint)
        self._installed = True

    @override
    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        # Under DDP a Ctrl-C reaches the ranks at different moments; every rank must stop after
        # the same iteration, or the others wait in the next one's collectives.
        if distributed.any_rank(self.interrupted):
            trainer.should_stop = True

    @override
    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._uninstall()

    @override
    def on_exception(
        self, trainer: Trainer, pl_module: LightningModule, exception: BaseException
    ) -> None:
        self._uninstall()

    @override
    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        self._uninstall()

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        if self.interrupted or self._trainer is None:
            # Second Ctrl-C: the user wants out now.
            self._uninstall()
            raise KeyboardInterrupt
        self.interrupted = True
        if not distributed.is_distributed():
            self._trainer.should_stop = True
        log.warning(
            "SIGINT: training stops after this iteration and writes its last checkpoint "
            "(resume with --ckpt_path last); press Ctrl-C again to abort at once"
        )

    def _uninstall(self) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)
            self._installed = False
        self._trainer = None
