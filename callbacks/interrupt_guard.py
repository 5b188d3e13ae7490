"""Ctrl-C, SIGTERM and SIGUSR1 end training after the current iteration, so the last checkpoint is a clean one."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
from types import FrameType
from typing import Any

import torch
from lightning.fabric.plugins.environments import SLURMEnvironment
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities.exceptions import SIGTERMException
from typing_extensions import override

from unilab_lit import distributed
from unilab_lit.collector.link import CollectorLink, collector_link, has_collector_link
from unilab_lit.ipc import ownership
from unilab_lit.telemetry.lightning_compat import cluster_environment

log = logging.getLogger(__name__)
# Exit status of a run stopped by SIGTERM / SIGUSR1 (the shell's 128 + SIGTERM).
SIGTERM_EXIT_STATUS = 128 + signal.SIGTERM


class InterruptGuard(Callback):
    """Turns a stop signal during training into a stop after the current iteration.

    The signal handlers only set a flag (no collective, no checkpoint inside a handler). After
    every iteration the ranks agree through ``unilab_lit.distributed.any_rank`` whether any of
    them was signalled, so under DDP all stop after the same iteration, whichever rank the signal
    reached; in one process the agreement is the flag itself.

    - **SIGINT** (Ctrl-C): training ends normally after the iteration;
      ``unilab_lit.callbacks.StopCheckpoint(save_last=True)`` writes ``last.ckpt`` at that step
      (every rank's collector state included), the data module stops the collector and unlinks its
      shared memory, and ``fit`` returns (exit status 0). A second SIGINT interrupts at once
      through Lightning's own path (which also stops the collector).
    - **SIGTERM** (a scheduler's preemption) and **SIGUSR1** (SLURM's
      ``--signal=USR1@<seconds>`` warning, when no other handler has it): the same stop, then ``SIGTERMException`` is raised
      from ``on_fit_end``, once ``last.ckpt`` is written; the data module stops the collector and
      ``unilab_lit.app.unilab_cli`` exits with status 143. Training ends through the normal path
      rather than Lightning's exception path so that the checkpoint gathers every rank's state
      (``unilab_lit.algos.data_parallel``).
    - **SLURM's requeue signal** (``SLURMEnvironment(auto_requeue=True)``, which Lightning picks
      in a SLURM job; SIGUSR1 unless ``requeue_signal`` says otherwise): the same stop as
      SIGTERM, agreed by every rank, and once ``last.ckpt`` is written rank 0 runs ``scontrol
      requeue`` (the job script resumes with ``--ckpt_path last``). Lightning's own handler
      for it would write a checkpoint and broadcast from inside the handler, mid-iteration.

    A stop request also reaches the data module's collector link (``stop_requested``): a
    learner blocked on data (a hung collector, the first rollout, the replay warm-up) stops
    waiting at once, training ends at the epoch end without the missing batch, and the stop
    takes the same path (``last.ckpt`` once a step was trained since the last save; a hung
    collector's state is left out of it and the collector is killed). Under DDP the ranks wait
    for data in agreed rounds (``unilab_lit.distributed.wait_on_every_rank``), so a request on
    any rank ends every rank's wait together, and once the ranks agree to stop every rank's
    link carries the request (its checkpoint does not wait for a hung collector either).

    The handlers are installed in ``on_train_start`` (after Lightning's, whose SIGTERM handler
    would broadcast from inside the handler) and the previous ones are put back when training
    ends, fails or is torn down; a repeated signal during the last checkpoint's write is
    ignored. A signal before training (collector start-up) takes Lightning's or the default
    path. Without effect outside the main thread, where Python delivers no signals.
    """

    def __init__(self) -> None:
        self._trainer: Trainer | None = None
        self._link: CollectorLink | None = None
        self._previous: dict[signal.Signals, Any] = {}
        self.interrupted = False
        self.terminated = False
        self.requeue = False

    @override
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.interrupted = False
        self.terminated = False
        self.requeue = False
        if threading.current_thread() is not threading.main_thread():
            return
        self._trainer = trainer
        self._link = collector_link(trainer) if has_collector_link(trainer) else None
        handlers: dict[signal.Signals, Any] = {
            signal.SIGINT: self._on_sigint,
            signal.SIGTERM: self._on_sigterm,
        }
        environment = cluster_environment(trainer)
        if isinstance(environment, SLURMEnvironment) and environment.auto_requeue:
            handlers[signal.Signals(environment.requeue_signal)] = self._on_requeue_signal
        elif signal.getsignal(signal.SIGUSR1) in (signal.SIG_DFL, None):
            handlers[signal.SIGUSR1] = self._on_sigterm
        for signum, handler in handlers.items():
            self._previous[signum] = signal.signal(signum, handler)
        ownership.set_graceful_sigterm(True)

    @override
    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._agree_to_stop(trainer)

    @override
    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        # A stop request that ended a wait for data ends the epoch without a batch end.
        self._agree_to_stop(trainer)

    @override
    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        # After a termination our handlers stay until ``on_fit_end``: the checkpoint callbacks
        # write last.ckpt after this hook, and a repeated SIGTERM must not kill that write.
        if not self.terminated:
            self._uninstall()

    @override
    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._uninstall()
        if self.terminated:
            if self.requeue and trainer.is_global_zero:
                _requeue_slurm_job()
            raise SIGTERMException

    @override
    def on_exception(
        self, trainer: Trainer, pl_module: LightningModule, exception: BaseException
    ) -> None:
        self._uninstall()

    @override
    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        self._uninstall()

    def _agree_to_stop(self, trainer: Trainer) -> None:
        # Every rank enters the same collectives here, once per iteration (and epoch): one while
        # running, a second only once some rank asks to stop (was it a termination?).
        if not distributed.any_rank(self.interrupted or self.terminated):
            return
        flags = torch.tensor([self.terminated, self.requeue], dtype=torch.int32)
        self.terminated, self.requeue = map(bool, distributed.reduce_over_ranks(flags, "max"))
        self.interrupted = not self.terminated
        trainer.should_stop = True
        self._request_stop()

    def _request_stop(self) -> None:
        if self._link is not None:
            self._link.stop_requested = True

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        if self.interrupted or self._trainer is None:
            # Second Ctrl-C: the user wants out now.
            self._uninstall()
            raise KeyboardInterrupt
        self.interrupted = True
        self._request_stop()
        log.warning(
            "SIGINT at step %d: training stops after this iteration and writes last.ckpt at "
            "the stop step (resume with --ckpt_path last); press Ctrl-C again to abort at once",
            self._trainer.global_step,
        )

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        trainer = self._trainer
        if trainer is None or self.terminated:
            return
        self.terminated = True
        self._request_stop()
        log.warning(
            "%s at step %d: training stops after this iteration, writes last.ckpt at the "
            "stop step and exits with status %d (resume with --ckpt_path last)",
            signal.Signals(signum).name,
            trainer.global_step,
            SIGTERM_EXIT_STATUS,
        )

    def _on_requeue_signal(self, signum: int, frame: FrameType | None) -> None:
        if self._trainer is None or self.requeue:
            return
        self.requeue = True
        log.warning(
            "%s: the SLURM job is requeued once last.ckpt is written", signal.Signals(signum).name
        )
        self._on_sigterm(signum, frame)

    def _uninstall(self) -> None:
        ours = {self._on_sigint, self._on_sigterm, self._on_requeue_signal}
        for signum, previous in self._previous.items():
            # After a termination Lightning's teardown (before ``on_fit_end``) already put the
            # pre-fit handlers back; its own must not come back after them.
            if signal.getsignal(signum) in ours:
                signal.signal(signum, previous)
        if self._previous:
            ownership.set_graceful_sigterm(False)
        self._previous = {}
        self._trainer = None
        self._link = None


def _requeue_slurm_job() -> None:
    """``scontrol requeue`` this SLURM job (an array job's own task); a failure is logged."""
    array_job = os.environ.get("SLURM_ARRAY_JOB_ID")
    if array_job is None:
        job = os.environ["SLURM_JOB_ID"]
    else:
        job = f"{array_job}_{os.environ['SLURM_ARRAY_TASK_ID']}"
    try:
        done = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True)
    except FileNotFoundError:
        log.error("SLURM job %s not requeued: scontrol is not on PATH", job)
        return
    if done.returncode == 0:
        log.info("SLURM job %s requeued", job)
    else:
        log.error(
            "SLURM job %s not requeued: scontrol exited %d: %s",
            job,
            done.returncode,
            done.stderr.strip(),
        )
