"""Lightning's epoch tools on the endless stream: ``limit_train_batches`` is the epoch length."""

from __future__ import annotations

import logging

from lightning.pytorch.callbacks import EarlyStopping

from tests.collector_fits import collector_trainer, tiny_appo
from unilab_lit.algos.appo import APPO
from unilab_lit.callbacks import EpisodeStatsMonitor
from unilab_lit.collector.options import CollectorOptions
from unilab_lit.data.rollout import RolloutDataModule
from unilab_lit.telemetry import metrics

EPOCH = 20
NUM_STEPS = 32  # CartpoleSwingup's 500-step episodes end in the 16th rollout


def _appo(num_envs: int = 8) -> tuple[APPO, RolloutDataModule]:
    data = RolloutDataModule(
        CollectorOptions("CartpoleSwingup", num_envs, seed=0, learner_torch_threads=1),
        num_steps=NUM_STEPS,
        synchronous=True,  # the learner cannot fall behind: 20 iterations are 20 rollouts
    )
    model = tiny_appo(
        data,
        num_learning_epochs=1,
        num_mini_batches=1,
    )
    return model, data


def test_early_stopping_on_mean_reward_stops_a_fit_at_an_epoch_end():
    # A min_delta no return can beat: the first epoch end sets the best, the second stops.
    stop = EarlyStopping(monitor=metrics.MEAN_REWARD, mode="max", patience=1, min_delta=1e9)
    trainer = collector_trainer(
        10 * EPOCH,
        EpisodeStatsMonitor(prog_bar=False),
        stop,
        limit_train_batches=EPOCH,
        log_every_n_steps=50,  # longer than an epoch: the epoch end logs on its own
    )
    model, data = _appo()
    trainer.fit(model, datamodule=data)
    assert stop.stopped_epoch == 1
    assert trainer.global_step == 2 * EPOCH
    assert metrics.MEAN_REWARD in trainer.callback_metrics


def test_an_epoch_that_ends_before_the_first_episode_says_why_the_metric_is_missing(caplog):
    trainer = collector_trainer(4, EpisodeStatsMonitor(), limit_train_batches=2)
    model, data = _appo(num_envs=1)  # seed 0: its first episode times out after 413 steps
    with caplog.at_level(logging.WARNING, logger="unilab_lit.callbacks.episode_stats"):
        trainer.fit(model, datamodule=data)
    said = [r.getMessage() for r in caplog.records if "before the first episode" in r.getMessage()]
    assert len(said) == 2 and all("limit_train_batches" in line for line in said)
    assert metrics.MEAN_REWARD not in trainer.callback_metrics
