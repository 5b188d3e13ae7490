"""RolloutDataModule with a real Trainer, a real collector and APPO on a small task."""

from __future__ import annotations

import os
import signal
import time

import pytest
import torch
from lightning.pytorch import Callback, Trainer
from tensordict import TensorDict

from tests.collector_fits import collector_trainer, tiny_appo
from unilab_lit.algos.appo import APPO, ROLLOUT_KEYS
from unilab_lit.collector.options import CollectorOptions
from unilab_lit.collector.process import CollectorError
from unilab_lit.data.rollout import RolloutDataModule
from unilab_lit.ipc import list_segments

NUM_ENVS, NUM_STEPS = 8, 8


class _RecordingAPPO(APPO):
    """APPO that keeps the type, batch size and entry shapes of each item it trains on."""

    def training_step(self, dataloader_iter):
        item = next(dataloader_iter)
        batch = item[0]
        self.seen.append(
            {
                "type": type(batch),
                "batch_size": tuple(batch.batch_size),
                "fields": {k: (v.dtype, tuple(v.shape)) for k, v in batch.items()},
            }
        )
        return super().training_step(iter([item]))


def _build(cls: type[APPO] = APPO, **collector_kwargs) -> tuple[APPO, RolloutDataModule]:
    data = RolloutDataModule(
        CollectorOptions("CartpoleSwingup", NUM_ENVS, **collector_kwargs), num_steps=NUM_STEPS
    )
    model = tiny_appo(
        data,
        cls,
        num_learning_epochs=1,
        num_mini_batches=2,
    )
    return model, data


def _trainer(max_steps: int, *extra: Callback) -> Trainer:
    return collector_trainer(max_steps, *extra)


class _KillCollectorAt(Callback):
    def __init__(self, step: int) -> None:
        self.step = step
        self.killed_at: float | None = None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            os.kill(trainer.datamodule.session.process.pid, signal.SIGKILL)
            self.killed_at = time.monotonic()


def test_fit_trains_counts_env_steps_and_releases_shared_memory():
    model, data = _build()
    trainer = _trainer(4)
    trainer.fit(model, datamodule=data)
    assert trainer.global_step == 4
    assert data.feed.env_steps >= 4 * NUM_ENVS * NUM_STEPS
    assert data.feed.env_steps % (NUM_ENVS * NUM_STEPS) == 0
    # Each iteration's batch holds 1..staging_capacity (3) of the rollouts it drained.
    rollout = NUM_ENVS * NUM_STEPS
    assert 4 * rollout <= data.feed.learned_env_steps <= min(data.feed.env_steps, 4 * 3 * rollout)
    assert data.feed.learned_env_steps % rollout == 0
    assert data.session is None and data.transport is None
    assert list_segments(os.getpid()) == []


def test_each_item_is_a_tensordict_of_batch_size_steps_by_columns_with_the_rollout_keys():
    model, data = _build(_RecordingAPPO)
    model.seen = []
    _trainer(3).fit(model, datamodule=data)

    spec = data.env_spec
    dp, dc, a = spec.obs_sizes["policy"], spec.obs_sizes["critic"], spec.action_size
    assert len(model.seen) == 3
    for seen in model.seen:
        assert seen["type"] is TensorDict
        t, m = seen["batch_size"]
        # The staging pool combines 1..staging_capacity (3) rollouts of NUM_ENVS columns.
        assert t == NUM_STEPS and m in (NUM_ENVS, 2 * NUM_ENVS, 3 * NUM_ENVS)
        assert seen["fields"] == {
            "obs": (torch.float32, (t, m, dp)),
            "critic_obs": (torch.float32, (t, m, dc)),
            "actions": (torch.float32, (t, m, a)),
            "log_prob": (torch.float32, (t, m)),
            "reward": (torch.float32, (t, m)),
            "done": (torch.bool, (t, m)),
            "truncated": (torch.bool, (t, m)),
            "final_critic_obs": (torch.float32, (t, m, dc)),
            "last_critic_obs": (torch.float32, (t, m, dc)),
            "policy_version": (torch.int64, (t, m)),
            "fresh": (torch.bool, (t, m)),
        }
        assert set(seen["fields"]) == set(ROLLOUT_KEYS)


def test_killed_collector_fails_fit_fast_with_its_exit_code():
    model, data = _build(stall_timeout_s=30.0)
    killer = _KillCollectorAt(step=2)
    with pytest.raises(CollectorError, match=r"SIGKILL") as err:
        _trainer(50, killer).fit(model, datamodule=data)
    assert time.monotonic() - killer.killed_at < 5.0, err.value
    assert data.session is None
    assert list_segments(os.getpid()) == []


def test_ring_with_one_slot_is_rejected_before_anything_starts():
    with pytest.raises(ValueError, match="ring_slots must be >= 2, got 1"):
        RolloutDataModule(ring_slots=1)


class _PrefetchingAPPO(APPO):
    def training_step(self, batch, batch_idx):  # the default loop: one batch fetched ahead
        return None


def test_model_without_dataloader_iter_is_refused_before_the_collector_starts():
    _, data = _build()
    spec = data.env_spec
    model = _PrefetchingAPPO(
        policy_obs_size=spec.obs_sizes["policy"],
        critic_obs_size=spec.obs_sizes["critic"],
        action_size=spec.action_size,
    )
    with pytest.raises(ValueError, match="training_step must take `dataloader_iter`"):
        _trainer(1).fit(model, datamodule=data)
    assert data.session is None
    assert list_segments(os.getpid()) == []
