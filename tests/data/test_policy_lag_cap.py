"""``max_policy_lag``: under a slow learner the collector stays within the cap, across a resume."""

from __future__ import annotations

import time

import pytest
from lightning.pytorch import Callback
from lightning.pytorch.callbacks import ModelCheckpoint

from tests.collector_fits import collector_trainer
from unilab_lit.algos.appo import APPO
from unilab_lit.callbacks import EpisodeStatsMonitor, RLCheckpoint
from unilab_lit.collector.options import CollectorOptions
from unilab_lit.data.rollout import RolloutDataModule

LAG = 1
STEPS = 6
_TINY = {"actor_hidden_dims": (16,), "critic_hidden_dims": (16,), "num_mini_batches": 1}
DELAY_S = 0.2  # per iteration: the collector steps a rollout of 8 x 8 in a few milliseconds


class _SlowLearnerProbe(Callback):
    """Sleeps after every iteration and records what the cap must bound at that moment."""

    def __init__(self) -> None:
        self.newest_lags: list[int] = []
        self.ahead: list[int] = []
        self.staged: list[int] = []
        self.dropped = 0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        data = trainer.datamodule
        iteration = trainer.global_step - 1
        self.newest_lags.append(iteration - int(batch["policy_version"].max()))
        self.staged.append(data.pool.staged_total)
        time.sleep(DELAY_S)
        ring = data.transport.ring
        # Written but not read yet, after the learner has idled for a long while.
        self.ahead.append(ring.write_count - ring.read_count)
        self.dropped = ring.dropped


def _fit(root, ckpt_path=None, max_steps=STEPS):
    data = RolloutDataModule(
        CollectorOptions("CartpoleSwingup", 8, seed=1, learner_torch_threads=1),
        num_steps=8,
        ring_slots=4,
        staging_capacity=1,
        max_policy_lag=LAG,
    )
    sizes = data.env_spec.obs_sizes
    model = APPO(sizes["policy"], sizes["critic"], data.env_spec.action_size, **_TINY)
    probe = _SlowLearnerProbe()
    trainer = collector_trainer(
        max_steps,
        probe,
        EpisodeStatsMonitor(),
        RLCheckpoint(),
        ModelCheckpoint(dirpath=root, every_n_train_steps=STEPS // 2, save_top_k=-1),
        enable_checkpointing=True,
    )
    trainer.fit(model, datamodule=data, ckpt_path=ckpt_path)
    return probe, trainer


def _assert_capped(probe: _SlowLearnerProbe) -> None:
    assert max(probe.newest_lags) <= LAG, probe.newest_lags
    # At most LAG rollouts run ahead of the learner, however long it idles; none is dropped.
    assert max(probe.ahead) <= LAG, probe.ahead
    assert probe.dropped == 0
    # One new rollout per iteration.
    steps = [b - a for a, b in zip(probe.staged, probe.staged[1:], strict=False)]
    assert steps == [1] * len(steps)


def test_max_policy_lag_caps_a_collector_ahead_of_a_slow_learner_and_after_resume(tmp_path):
    probe, trainer = _fit(tmp_path)
    _assert_capped(probe)
    resumed, trainer = _fit(
        tmp_path / "resumed", ckpt_path=tmp_path / f"epoch=0-step={STEPS // 2}.ckpt"
    )
    assert trainer.global_step == STEPS
    assert len(resumed.newest_lags) == STEPS // 2
    _assert_capped(resumed)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_policy_lag": -1}, "max_policy_lag"),
        ({"max_policy_lag": 4, "ring_slots": 4}, "ring_slots"),
        ({"max_policy_lag": 1, "synchronous": True}, "synchronous"),
    ],
)
def test_max_policy_lag_refuses_values_it_cannot_keep(kwargs, match):
    with pytest.raises(ValueError, match=match):
        RolloutDataModule(CollectorOptions("CartpoleSwingup", 8), **kwargs)
