"""ReplayDataModule: a real Trainer with a real collector, setup checks, argument validation."""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import time
from typing import Any

import pytest
import torch
from lightning.pytorch import Callback, Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from tensordict import TensorDict

from tests.collector_fits import collector_trainer
from unilab_lit.algos.fast_td3 import FastTD3
from unilab_lit.algos.offpolicy import BATCH_KEYS
from unilab_lit.algos.offpolicy_options import OffPolicyOptions
from unilab_lit.callbacks import EpisodeStatsMonitor
from unilab_lit.collector.options import CollectorOptions
from unilab_lit.collector.process import CollectorError
from unilab_lit.data.replay import ReplayDataModule
from unilab_lit.envs.spec import CRITIC, POLICY
from unilab_lit.envs.task_spec import TaskSpec
from unilab_lit.ipc import list_segments

N_ENVS = 4
BATCH = 8
UPDATES = 2
LEARNING_STARTS = 10
DATA = {
    "collector": CollectorOptions(TaskSpec("CartpoleSwingup", {"max_episode_steps": 50}), N_ENVS),
    "batch_size": BATCH,
    "buffer_size": 64,
    "learning_starts": LEARNING_STARTS,
}
SMALL_TD3 = {
    "actor_hidden_dims": (16,),
    "critic_hidden_dims": (16,),
    "offpolicy": OffPolicyOptions(num_atoms=11, v_min=-10.0, v_max=10.0, updates_per_step=UPDATES),
}


class RecordingTD3(FastTD3):
    """FastTD3 that records, inside each ``training_step``, the item and the pipeline state."""

    seen: list[dict[str, Any]]

    def training_step(self, dataloader_iter) -> None:
        def peek():
            batch, batch_idx, dataloader_idx = next(dataloader_iter)
            data = self.trainer.datamodule
            self.seen.append(
                {
                    "tick": data.pipeline.tick,
                    "tick_offset": data.pipeline.tick_offset,
                    "released": data.transport.link.released,
                    "write_ptr": data.transport.replay.write_ptr,
                    "type": type(batch),
                    "batch_size": tuple(batch.batch_size),
                    "fields": {k: (v.dtype, tuple(v.shape)) for k, v in batch.items()},
                }
            )
            yield batch, batch_idx, dataloader_idx

        super().training_step(peek())


class PlainStepTD3(FastTD3):
    def training_step(self, batch, batch_idx) -> None:
        raise AssertionError("never reached")


def _model(data: ReplayDataModule, cls: type[FastTD3] = RecordingTD3, **kwargs) -> FastTD3:
    spec = data.env_spec
    model = cls(
        spec.obs_sizes[POLICY], spec.obs_sizes[CRITIC], spec.action_size, **{**SMALL_TD3, **kwargs}
    )
    model.seen = []
    return model


def _trainer(tmp_path, max_steps: int, *callbacks: Callback) -> Trainer:
    return collector_trainer(
        max_steps,
        EpisodeStatsMonitor(),
        *callbacks,
        enable_checkpointing=True,
        default_root_dir=tmp_path,
    )


class _CollectorPid(Callback):
    """Remembers the collector's pid (the data module forgets it at teardown)."""

    pid: int | None = None

    def on_train_start(self, trainer: Trainer, pl_module) -> None:
        self.pid = trainer.datamodule.session.process.pid


def _assert_released(pid: int, segments_before: set[str]) -> None:
    assert all(child.pid != pid for child in multiprocessing.active_children())
    assert not os.path.exists(f"/proc/{pid}"), f"collector pid {pid} outlived fit"
    assert set(list_segments(os.getpid())) == segments_before, "shared memory left behind"


def test_fit_trains_after_warmup_one_tick_per_step_and_resume_counts_on(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="unilab_lit.data.double_buffer")
    before = set(list_segments(os.getpid()))
    rows_per_tick = N_ENVS
    first_tick = LEARNING_STARTS  # learning_starts x num_envs rows, one env step per tick

    data = ReplayDataModule(**DATA)
    model = _model(data)
    pid = _CollectorPid()
    checkpoint = ModelCheckpoint(dirpath=tmp_path, save_last=True, every_n_train_steps=3)
    _trainer(tmp_path, 3, pid, checkpoint).fit(model, datamodule=data)

    assert [s["tick"] for s in model.seen] == [first_tick, first_tick + 1, first_tick + 2]
    # While training on tick t, the collector has tick t + 1 and nothing beyond it: Lightning
    # does not fetch ahead, so packing the next batch overlaps this step.
    assert all(s["released"] == s["tick"] + 1 for s in model.seen)
    assert model.seen[0]["write_ptr"] >= LEARNING_STARTS * N_ENVS
    assert any("replay warm-up done" in r.getMessage() for r in caplog.records)
    assert data.feed.env_steps == (first_tick + 2) * rows_per_tick
    _assert_released(pid.pid, before)

    resumed_data = ReplayDataModule(**DATA)
    resumed = _model(resumed_data)
    _trainer(tmp_path, 5, pid).fit(
        resumed, datamodule=resumed_data, ckpt_path=str(tmp_path / "last.ckpt")
    )
    # The replay starts empty, so warm-up runs again; env steps and sampling ticks count on.
    assert [s["tick"] for s in resumed.seen] == [first_tick, first_tick + 1]
    assert resumed.seen[0]["tick_offset"] == first_tick + 2
    assert resumed_data.feed.env_steps == (2 * first_tick + 3) * rows_per_tick
    _assert_released(pid.pid, before)


def test_each_item_is_a_tensordict_of_batch_size_rows_with_the_batch_keys(tmp_path):
    data = ReplayDataModule(**DATA)
    model = _model(data)
    _trainer(tmp_path, 2).fit(model, datamodule=data)

    rows = BATCH * UPDATES
    spec = data.env_spec
    for seen in model.seen:
        assert seen["type"] is TensorDict and seen["batch_size"] == (rows,)
        assert seen["fields"] == {
            "obs": (torch.float32, (rows, spec.obs_sizes[POLICY])),
            "next_obs": (torch.float32, (rows, spec.obs_sizes[POLICY])),
            "critic_obs": (torch.float32, (rows, spec.obs_sizes[CRITIC])),
            "next_critic_obs": (torch.float32, (rows, spec.obs_sizes[CRITIC])),
            "actions": (torch.float32, (rows, spec.action_size)),
            "reward": (torch.float32, (rows,)),
            "done": (torch.bool, (rows,)),
            "truncated": (torch.bool, (rows,)),
        }
        assert set(seen["fields"]) == set(BATCH_KEYS)
    assert len(model.seen) == 2


def test_collector_killed_while_fit_waits_raises_collector_error_and_releases_all(tmp_path):
    before = set(list_segments(os.getpid()))
    killed_at: list[float] = []

    class KillDuringWarmup(_CollectorPid):
        def on_train_start(self, trainer: Trainer, pl_module) -> None:
            super().on_train_start(trainer, pl_module)

            # Before the learner's first wait for the replay warm-up.
            killed_at.append(time.monotonic())
            os.kill(self.pid, signal.SIGKILL)

    data = ReplayDataModule(**DATA)
    killer = KillDuringWarmup()
    with pytest.raises(CollectorError, match="SIGKILL"):
        _trainer(tmp_path, 3, killer).fit(_model(data), datamodule=data)
    assert time.monotonic() - killed_at[0] < 5
    _assert_released(killer.pid, before)


def test_setup_rejects_a_training_step_without_dataloader_iter(tmp_path):
    data = ReplayDataModule(**DATA)
    with pytest.raises(ValueError, match="training_step must take `dataloader_iter`"):
        _trainer(tmp_path, 1).fit(_model(data, PlainStepTD3), datamodule=data)
    assert data.session is None


def test_setup_rejects_updates_per_step_differing_from_the_model(tmp_path):
    data = ReplayDataModule(**DATA, updates_per_step=UPDATES + 1)
    with pytest.raises(ValueError, match=r"updates_per_step=3 differs from the model's"):
        _trainer(tmp_path, 1).fit(_model(data), datamodule=data)
    assert data.session is None


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("batch_size", 0),
        ("buffer_size", 0),
        ("env_steps_per_sync", 0),
        ("updates_per_step", 0),
        ("learning_starts", -1),
        ("learning_starts", 65),
    ],
)
def test_constructor_rejects_out_of_range_argument_naming_it(name, value):
    with pytest.raises(ValueError, match=name):
        ReplayDataModule(**{**DATA, name: value})
