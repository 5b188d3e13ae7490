"""Ctrl-C, SIGTERM and SIGUSR1 end training after the current iteration, so the last checkpoint is a clean one."""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType
from typing import Any

from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities.exceptions import SIGTERMException
from typing_extensions import override

from unilab_lit import distributed
from unilab_lit.app.unilab_cli import SIGTERM_EXIT_STATUS
from unilab_lit.ipc import ownership

log = logging.getLogger(__name__)


class InterruptGuard(Callback):
    """Turns a stop signal during training into a stop after the current iteration.

    - **SIGINT** (Ctrl-C): sets ``trainer.should_stop``; the iteration finishes, the epoch
      ends, ``callbacks.StopCheckpoint(save_last=True)`` writes ``last.ckpt`` at that step (the
      collector's state included), the data module stops the collector and unlinks its shared
      memory, and ``fit`` returns (exit status 0). A second SIGINT interrupts at once through
      Lightning's own path (which also stops the collector). Under DDP the ranks agree after
      every iteration whether any of them was interrupted, so all stop after the same one.
    - **SIGTERM** (a scheduler's preemption): logs, then hands the signal to Lightning's own
      handler, which lets the iteration finish and raises ``SIGTERMException`` after it;
      ``StopCheckpoint`` writes ``last.ckpt`` at that step from ``on_exception``, the data module
      stops the collector, and ``cli.py`` exits with status 143. Without this callback the
      shared-memory safety net (``unilab_lit.ipc.ownership``), which Lightning calls after its
      own handler, would kill the process at once.
    - **SIGUSR1** (SLURM's ``--signal=USR1@<seconds>`` warning): handled like SIGTERM, unless
      Lightning handles it (``SLURMEnvironment(auto_requeue=True)``), which then saves its own
      checkpoint and requeues the job.

    The handlers are installed in ``on_train_start`` (after Lightning's) and the previous ones
    are put back when training ends, fails or is torn down; a signal before training (collector
    start-up) takes Lightning's or the default path. Without effect outside the main thread,
    where Python delivers no signals.
    """

    def __init__(self) -> None:
        self._trainer: Trainer | None = None
        self._previous: dict[signal.Signals, Any] = {}
        self.interrupted = False
        self.terminated = False

    @override
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        self._trainer = trainer
        self.interrupted = False
        self.terminated = False
        handlers: dict[signal.Signals, Any] = {
            signal.SIGINT: self._on_sigint,
            signal.SIGTERM: self._on_sigterm,
        }
        if signal.getsignal(signal.SIGUSR1) in (signal.SIG_DFL, None):
            handlers[signal.SIGUSR1] = self._on_sigterm
        for signum, handler in handlers.items():
            self._previous[signum] = signal.signal(signum, handler)
        ownership.set_graceful_sigterm(True)

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
        if isinstance(exception, SIGTERMException):
            # ``StopCheckpoint`` writes last.ckpt after this hook: a repeated SIGTERM must not
            # kill the process mid-write, so our handler stays and ignores it from now on.
            # Lightning puts the pre-fit handlers back in its teardown, right after.
            self._trainer = None
            self._previous = {}
            ownership.set_graceful_sigterm(False)
            return
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
            "SIGINT at step %d: training stops after this iteration and writes last.ckpt at "
            "the stop step (resume with --ckpt_path last); press Ctrl-C again to abort at once",
            self._trainer.global_step,
        )

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        trainer = self._trainer
        if trainer is None:
            return
        if not self.terminated:
            self.terminated = True
            log.warning(
                "%s at step %d: training stops after this iteration, writes last.ckpt at the "
                "stop step and exits with status %d (resume with --ckpt_path last)",
                signal.Signals(signum).name,
                trainer.global_step,
                SIGTERM_EXIT_STATUS,
            )
        lightning_handler = self._previous.get(signal.SIGTERM)
        if callable(lightning_handler):
            # Lightning's notifier: raises SIGTERMException once the iteration is done (and in
            # DDP tells every rank to stop at the same iteration).
            lightning_handler(signal.SIGTERM, frame)
        else:
            trainer.should_stop = True

    def _uninstall(self) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        if self._previous:
            ownership.set_graceful_sigterm(False)
        self._previous = {}
        self._trainer = None
