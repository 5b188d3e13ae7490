"""A progress bar that counts learner iterations and shows env steps, their rate and the return."""

from __future__ import annotations

from typing import Any

from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import TQDMProgressBar
from typing_extensions import override

from unilab_lit.telemetry import metrics as keys

# Shown first, under short names; other progress-bar metrics (APPO's policy lag) follow.
_LABELS = {keys.ENV_STEPS: "env_steps", keys.TOTAL_FPS: "env_steps/s", keys.MEAN_REWARD: "return"}
_DESCRIPTION = "Iterations"


class StepProgressBar(TQDMProgressBar):
    """``TQDMProgressBar`` over ``global_step`` / ``max_steps`` instead of the epoch's batches.

    One trainer step is one learner iteration and the data is endless, so the epoch's batch
    index says little, and a run resumed mid-epoch restarts it at ``1/?``. This bar shows
    ``137/300`` right after resuming at step 137 (``?`` only without ``max_steps``), and is
    labelled ``Iterations`` rather than by the epoch (a resumed run is not "Epoch 1"). After
    the counts it shows env steps, env-steps/s and the mean return (as
    ``unilab_lit.callbacks.EpisodeStatsMonitor`` logs them), not the logger's version. ``cli.py``
    puts it in place of Lightning's default bar; every argument is ``TQDMProgressBar``'s.

    Under an env-step budget (``unilab_lit.callbacks.EnvStepBudget``, whose share spent arrives in
    ``trainer.callback_metrics``) the total is the iteration the budget will be spent at, as
    the steps so far project it, so the ETA is the run's; ``max_steps`` is then only a cap.
    """

    @override
    def get_metrics(self, trainer: Trainer, pl_module: LightningModule) -> dict[str, Any]:
        metrics = super().get_metrics(trainer, pl_module)
        metrics.pop("v_num", None)
        shown: dict[str, Any] = {
            label: _compact(metrics.pop(key), key == keys.MEAN_REWARD)
            for key, label in _LABELS.items()
            if key in metrics
        }
        return {**shown, **metrics}

    @property
    @override
    def total_train_batches(self) -> int | float:
        max_steps = self.trainer.max_steps
        cap = max_steps if max_steps is not None and max_steps > 0 else float("inf")
        spent = float(self.trainer.callback_metrics.get(keys.BUDGET_SPENT, 0.0))
        if spent <= 0.0:
            return cap
        return min(cap, max(self.trainer.global_step, round(self.trainer.global_step / spent)))

    @override
    def on_train_start(self, trainer: Trainer, *args: Any) -> None:
        super().on_train_start(trainer, *args)
        self._show_global_step(trainer)

    @property
    @override
    def train_description(self) -> str:
        return _DESCRIPTION

    @override
    def on_train_epoch_start(self, trainer: Trainer, *args: Any) -> None:
        # Not the parent's: it relabels the bar "Epoch <n>" and redraws it from 0. The one
        # endless epoch starts right after on_train_start made the bar.
        self._show_global_step(trainer)

    @override
    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        # The parent shows ``batch_idx + 1``: make that the global step.
        if self._train_progress_bar is not None:  # a budget's projection moves the total
            total = self.total_train_batches
            self._train_progress_bar.total = None if total == float("inf") else total
        super().on_train_batch_end(trainer, pl_module, outputs, batch, trainer.global_step - 1)

    def _show_global_step(self, trainer: Trainer) -> None:
        bar = self.train_progress_bar
        total = self.total_train_batches
        bar.total = None if total == float("inf") else total
        # The rate counts this run's iterations only.
        bar.n = bar.initial = trainer.global_step
        bar.refresh()


def _compact(value: Any, decimals: bool) -> str:
    """``245.8k`` for 245760, ``1.23M`` for 1230000; a return keeps one decimal."""
    value = float(value)
    if decimals:
        return f"{value:.1f}"
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            scaled = value / scale
            return f"{scaled:.{2 if abs(scaled) < 10 else 1 if abs(scaled) < 100 else 0}f}{suffix}"
    return f"{value:.0f}"
