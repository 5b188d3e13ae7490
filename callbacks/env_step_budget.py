"""Ends training once the learner has trained on a given number of env steps."""

from __future__ import annotations

import logging

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from typing_extensions import override

from unilab_lit import distributed
from unilab_lit.collector.link import collector_link
from unilab_lit.telemetry import metrics as keys
from unilab_lit.validation import check_arg

log = logging.getLogger(__name__)


class EnvStepBudget(Callback):
    """Stops ``fit`` once ``Train/learned_env_steps`` reaches ``max_env_steps``.

    A callback, as Lightning's own ``max_time`` is (its ``Timer``): a run's length in env steps
    is a stop condition next to ``max_steps``, not a property of the data. RL runs are budgeted
    in env steps (SB3's ``total_timesteps``, papers' curves), and an env-step budget gives the
    same amount of experience on every machine, where a number of iterations does not (APPO's
    staging pool takes more env steps per iteration when the learner is slower).

    The count is the data module's counter of env steps in the batches the learner trained on
    (``CollectorLink.feed.learned_env_steps``, summed over the ranks under DDP). Checkpoints carry
    it and a resume restores it before ``on_fit_start``, so the budget counts from the start of
    the run, not of the resumed process; this callback keeps no state of its own. The check
    runs after every iteration, so a run ends within one iteration's env steps past the budget.
    The stop is Lightning's ``trainer.should_stop``: the iteration finishes, the epoch ends,
    ``unilab_lit.callbacks.StopCheckpoint(save_last=True)`` writes ``last.ckpt`` and ``fit``
    returns. A run resumed with its budget already spent ends before its first iteration. The
    shipped configs list it first: callbacks that log only when the loggers write
    (``EpisodeStatsMonitor``) then see the stop in the same ``on_train_batch_end`` and log the last
    iteration's counters too.

    Args:
        max_env_steps: Env steps the learner trains on before training stops (>= 1).

    Raises:
        ValueError: if ``max_env_steps`` is smaller than 1.
    """

    def __init__(self, max_env_steps: int) -> None:
        check_arg(max_env_steps >= 1, "max_env_steps", max_env_steps, ">= 1")
        self.max_env_steps = max_env_steps

    @override
    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._stop_if_spent(trainer)

    @override
    def on_train_batch_end(
        self,
        trainer: Trainer,
        pl_module: LightningModule,
        outputs: object,
        batch: object,
        batch_idx: int,
    ) -> None:
        learned = self._stop_if_spent(trainer)
        # For the progress bar (its total and ETA), not for the loggers: a constant's ratio.
        pl_module.log(keys.BUDGET_SPENT, learned / self.max_env_steps, logger=False, batch_size=1)

    def _stop_if_spent(self, trainer: Trainer) -> int:
        """The job's learned env steps; ``trainer.should_stop`` once they reach the budget."""
        # Under DDP every rank takes the job's sum, so all stop after the same iteration.
        own = torch.tensor([collector_link(trainer).feed.learned_env_steps], dtype=torch.int64)
        learned = int(distributed.reduce_over_ranks(own, "sum").item())
        if learned < self.max_env_steps or trainer.should_stop:
            return learned
        trainer.should_stop = True
        if trainer.is_global_zero:
            log.info(
                "env-step budget reached: %d learned env steps >= max_env_steps=%d at step %d; "
                "training stops",
                learned,
                self.max_env_steps,
                trainer.global_step,
            )
        return learned
