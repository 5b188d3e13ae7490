"""A progress bar that counts global steps, so a resumed run shows where it is."""

from __future__ import annotations

from typing import Any

from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import TQDMProgressBar
from typing_extensions import override


class StepProgressBar(TQDMProgressBar):
    """``TQDMProgressBar`` over ``global_step`` / ``max_steps`` instead of the epoch's batches.

    One trainer step is one learner iteration and the data is endless, so the epoch's batch
    index says little, and a run resumed mid-epoch restarts it at ``1/?``. This bar shows
    ``137/300`` right after resuming at step 137 (``?`` only without ``max_steps``).
    ``cli.py`` puts it in place of Lightning's default bar; every argument is
    ``TQDMProgressBar``'s.
    """

    @property
    @override
    def total_train_batches(self) -> int | float:
        max_steps = self.trainer.max_steps
        return max_steps if max_steps is not None and max_steps > 0 else float("inf")

    @override
    def on_train_start(self, trainer: Trainer, *args: Any) -> None:
        super().on_train_start(trainer, *args)
        self._show_global_step(trainer)

    @override
    def on_train_epoch_start(self, trainer: Trainer, *args: Any) -> None:
        super().on_train_epoch_start(trainer, *args)
        self._show_global_step(trainer)

    @override
    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        # The parent shows ``batch_idx + 1``: make that the global step.
        super().on_train_batch_end(trainer, pl_module, outputs, batch, trainer.global_step - 1)

    def _show_global_step(self, trainer: Trainer) -> None:
        bar = self.train_progress_bar
        total = self.total_train_batches
        bar.total = None if total == float("inf") else total
        bar.n = trainer.global_step
        bar.refresh()
