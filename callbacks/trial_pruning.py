"""Reports a monitored metric to an Optuna trial at every epoch end, prunes, and tells the result."""

from __future__ import annotations

import logging
import math
from typing import Any

from lightning.pytorch import Callback, LightningModule, Trainer
from typing_extensions import override

from unilab_lit.validation import check_arg

log = logging.getLogger(__name__)


class TrialPruning(Callback):
    """Ties one fit to one trial of an Optuna study kept in a storage (``sqlite:///sweep.db``).

    ``python -m unilab_lit.app.sweep`` adds it to each trial's fit; the fit runs in its own
    process and finds its trial in the storage by study name and trial number. At every epoch
    end (``trainer.limit_train_batches`` is the epoch length) it reports ``monitor`` to the
    trial as the value at that epoch and asks the study's median pruner whether to prune; a
    pruned trial is marked pruned in the storage and the fit stops as Lightning's ``should_stop``
    stops it (the epoch ends, the collector stops, the process exits 0). A trial that runs to
    its end is told its last ``monitor`` value, complete. An epoch end without the metric yet
    (no finished episode) reports nothing. Optuna Lightning's ``PyTorchLightningPruningCallback``
    does the same on ``on_validation_end``, which these fits never reach.

    Args:
        storage: The study's storage URL.
        study_name: The study.
        trial_number: The trial's number in the study (``Trial.number``).
        monitor: The metric reported and told (``Train/mean_reward``).
        n_startup_trials: Trials that complete before any is pruned (MedianPruner).
        n_warmup_epochs: Epochs of a trial before it can be pruned (MedianPruner).

    Raises:
        ModuleNotFoundError: If optuna is missing (``pip install -e ".[sweep]"``).
        ValueError: If a count is negative.
    """

    def __init__(
        self,
        storage: str,
        study_name: str,
        trial_number: int,
        monitor: str = "Train/mean_reward",
        n_startup_trials: int = 2,
        n_warmup_epochs: int = 1,
    ) -> None:
        check_arg(n_startup_trials >= 0, "TrialPruning.n_startup_trials", n_startup_trials, ">= 0")
        check_arg(n_warmup_epochs >= 0, "TrialPruning.n_warmup_epochs", n_warmup_epochs, ">= 0")
        import optuna

        self._optuna = optuna
        pruner = optuna.pruners.MedianPruner(n_startup_trials, n_warmup_epochs)
        study = optuna.load_study(study_name=study_name, storage=storage, pruner=pruner)
        backend = optuna.storages.get_storage(storage)
        trial_id = backend.get_trial_id_from_study_id_trial_number(
            backend.get_study_id_from_name(study_name), trial_number
        )
        self._study = study
        self._trial = optuna.trial.Trial(study, trial_id)
        self.monitor = monitor
        self._pruned = False

    @override
    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        value = self._value(trainer)
        if value is None or not trainer.is_global_zero:
            return
        epoch = trainer.current_epoch
        self._trial.report(value, epoch)
        if self._trial.should_prune():
            log.info(
                "trial %d pruned at epoch %d (%s %.4g)",
                self._trial.number,
                epoch,
                self.monitor,
                value,
            )
            self._study.tell(self._trial, state=self._optuna.trial.TrialState.PRUNED)
            self._pruned = True
            trainer.should_stop = True

    @override
    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._pruned or not trainer.is_global_zero:
            return
        value = self._value(trainer)
        if value is None:
            log.warning("trial %d ends without %s: marked failed", self._trial.number, self.monitor)
            self._study.tell(self._trial, state=self._optuna.trial.TrialState.FAIL)
        else:
            self._study.tell(self._trial, value)

    def _value(self, trainer: Trainer) -> float | None:
        value: Any = trainer.callback_metrics.get(self.monitor)
        if value is None or not math.isfinite(float(value)):
            return None
        return float(value)
