"""Lightning's ModelCheckpoint, with ``last`` always written at the step training stopped."""

from __future__ import annotations

import logging
from pathlib import Path

from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.plugins.io import TorchCheckpointIO
from lightning.pytorch.utilities.exceptions import SIGTERMException
from torch import Tensor
from typing_extensions import override

from unilab_lit.checkpoint_io import AtomicCheckpointIO
from unilab_lit.ipc.reclaim import remove_dead_writers_files

log = logging.getLogger(__name__)


class StopCheckpoint(ModelCheckpoint):
    """``ModelCheckpoint`` whose ``last`` checkpoint holds the step training stopped at.

    Lightning's ``ModelCheckpoint(save_last=True)`` writes ``last`` at the end of training
    only if it saved a regular checkpoint at that very step or has not written ``last`` yet.
    So once a periodic checkpoint exists (``every_n_train_steps=100``), a run stopped at step
    131 (Ctrl-C, ``max_steps`` off the interval) keeps ``last.ckpt`` at step 100, and
    ``--ckpt_path last`` silently resumes 31 iterations back. This subclass writes ``last`` at
    the stop step on every stop between iterations:

    - the end of training (``max_steps``, Ctrl-C, SIGTERM or SIGUSR1 through
      ``unilab_lit.callbacks.InterruptGuard``, early stopping);
    - Lightning's ``SIGTERMException``, raised once the iteration during which SIGTERM arrived
      has finished (without ``InterruptGuard``; one process only, since the exception path
      gathers no per-rank state).

    Nothing is written before the first trained step. Any other exception keeps Lightning's behaviour (``save_on_exception``). Without a
    ``filename``, checkpoints are named by the learner iteration alone (``step=300.ckpt``):
    the single endless epoch says nothing. Every argument is ``ModelCheckpoint``'s.

    Checkpoint files are written atomically (``unilab_lit.checkpoint_io.AtomicCheckpointIO``,
    installed in ``setup`` unless the trainer was given its own ``CheckpointIO`` plugin): a
    full disk leaves the earlier checkpoints and no partial file. The hidden partial files that
    killed runs left in ``dirpath`` are removed in ``setup`` (their names carry the writer's pid;
    a live writer's are kept).

    Raises:
        ValueError: in ``setup``, for ``save_last="link"`` (the link would point at the older
            periodic checkpoint).
    """

    @override
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if self.save_last == "link":
            raise ValueError(
                "StopCheckpoint(save_last='link') would link last.ckpt to an older checkpoint "
                "than the stop step; use save_last=true"
            )
        if type(trainer.strategy.checkpoint_io) is TorchCheckpointIO:
            trainer.strategy.checkpoint_io = AtomicCheckpointIO()
        super().setup(trainer, pl_module, stage)
        if stage == "fit" and self.dirpath is not None:
            remove_dead_writers_files(Path(self.dirpath))

    @override
    def format_checkpoint_name(
        self,
        metrics: dict[str, Tensor],
        filename: str | None = None,
        ver: int | None = None,
        prefix: str | None = None,
    ) -> str:
        if not (filename or self.filename):
            filename = "{step}" if self.auto_insert_metric_name else "step={step}"
        return super().format_checkpoint_name(metrics, filename, ver, prefix)

    @override
    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        # An epoch that a stop request ended before the first batch trained nothing, and
        # Lightning would write ``last`` at step 0 here and in ``on_train_end``.
        if trainer.global_step > 0:
            super().on_train_epoch_end(trainer, pl_module)

    @override
    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.global_step > 0:
            self._save_last_at_stop(trainer)
            super().on_train_end(trainer, pl_module)

    @override
    def on_exception(
        self, trainer: Trainer, pl_module: LightningModule, exception: BaseException
    ) -> None:
        if isinstance(exception, SIGTERMException):
            self._save_last_at_stop(trainer)
        else:
            super().on_exception(trainer, pl_module, exception)

    def _save_last_at_stop(self, trainer: Trainer) -> None:
        # Skipped when this step is saved already, before any step, and outside fitting.
        if not self.save_last or trainer.global_step == 0:
            return
        if self._should_skip_saving_checkpoint(trainer):
            return
        self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))
        log.info("last checkpoint at step %d: %s", trainer.global_step, self.last_model_path)
