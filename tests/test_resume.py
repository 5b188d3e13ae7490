"""Exact resume: N iterations, then a resumed fit for N more, equals 2N uninterrupted iterations.

Deterministic setting: synchronous collection (APPO: rollout k is acted by iteration k's weights;
off-policy: tick t + 1 is stepped only after iteration t published), fixed seeds, one learner
thread. The uninterrupted run writes a checkpoint at step N (its
collector mid-run, holding live episodes); the resumed run starts from that checkpoint in a fresh
model, data module and collector. Equality is exact (``torch.equal``): every number on both paths
comes from the same operations on the same inputs, so any difference is a piece of state the
checkpoint lost.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from jsonargparse import Namespace
from lightning.pytorch import Callback, Trainer, seed_everything
from lightning.pytorch.callbacks import ModelCheckpoint

from tests.collector_fits import tiny_appo
from unilab_lit.algos.appo import APPO
from unilab_lit.algos.fast_td3 import FastTD3
from unilab_lit.algos.offpolicy_options import OffPolicyOptions
from unilab_lit.app.resume import continue_run_directory
from unilab_lit.callbacks import EpisodeStatsMonitor, ObsNormSync, RLCheckpoint, WeightSync
from unilab_lit.collector.options import CollectorOptions
from unilab_lit.data.replay import ReplayDataModule
from unilab_lit.data.rollout import RolloutDataModule
from unilab_lit.envs.task_spec import TaskSpec
from unilab_lit.ipc import list_segments
from unilab_lit.ipc.versioned import NOT_PUBLISHED
from unilab_lit.telemetry import metrics

N = 4
NUM_ENVS, NUM_STEPS = 8, 8


def _build() -> tuple[APPO, RolloutDataModule]:
    seed_everything(0)  # as LightningCLI does on every start, resumed or not
    data = RolloutDataModule(
        CollectorOptions("CartpoleSwingup", NUM_ENVS, seed=1, learner_torch_threads=1),
        num_steps=NUM_STEPS,
        staging_capacity=2,  # each batch reuses the previous rollout: the pool is checkpointed
        synchronous=True,
    )
    model = tiny_appo(
        data,
        num_learning_epochs=2,
        num_mini_batches=2,
        desired_kl=0.001,  # small, so the adaptive learning rate moves every iteration
    )
    return model, data


class _FirstPublish(Callback):
    """Records what the collector can read right after the publishers' ``on_train_start``."""

    def on_train_start(self, trainer, pl_module) -> None:
        link = trainer.datamodule.collector_link
        actor = pl_module.collector_policy_spec().build()
        self.weights_version = link.weights.load_module_if_newer(actor, NOT_PUBLISHED)
        self.actor_state = {k: v.clone() for k, v in actor.state_dict().items()}
        self.obs_stats = link.obs_stats.read_if_newer(NOT_PUBLISHED)


class _LagRecorder(Callback):
    def __init__(self) -> None:
        self.lags: list[float] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.lags.append(float(trainer.callback_metrics[metrics.POLICY_LAG]))


def _fit(
    ckpt_dir: Path,
    *extra: Callback,
    ckpt_path: Path | None = None,
    limit_train_batches: int | None = None,
):
    model, data = _build()
    trainer = Trainer(
        max_steps=2 * N,
        limit_train_batches=limit_train_batches,
        accelerator="cpu",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[
            WeightSync(),
            ObsNormSync(),
            *extra,
            EpisodeStatsMonitor(),
            RLCheckpoint(),
            ModelCheckpoint(dirpath=ckpt_dir, every_n_train_steps=N, save_top_k=-1),
        ],
    )
    trainer.fit(model, datamodule=data, ckpt_path=ckpt_path)
    return model, data, trainer


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("resume")
    lags = _LagRecorder()
    straight = _fit(root / "straight", lags)
    checkpoint = root / "straight" / f"epoch=0-step={N}.ckpt"
    probe = _FirstPublish()
    resumed = _fit(root / "resumed", probe, ckpt_path=checkpoint)
    return {
        "straight": straight,
        "resumed": resumed,
        "checkpoint": torch.load(checkpoint, weights_only=True),
        "probe": probe,
        "lags": lags.lags,
    }


def test_resumed_appo_matches_uninterrupted_run_in_parameters_targets_and_normalizers(runs):
    straight, resumed = runs["straight"][0].state_dict(), runs["resumed"][0].state_dict()
    assert straight.keys() == resumed.keys()
    differing = [k for k in straight if not torch.equal(straight[k], resumed[k])]
    assert differing == []
    # The run trained: parameters moved away from the checkpoint.
    assert not torch.equal(
        straight["actor.model.mlp.0.weight"],
        runs["checkpoint"]["state_dict"]["actor.model.mlp.0.weight"],
    )


def test_resume_across_epoch_boundaries_matches_uninterrupted_run(tmp_path):
    # Epochs of 3 iterations: the straight run crosses epoch ends at steps 3 and 6, its step-4
    # checkpoint lies inside epoch 1, and the resumed run finishes that epoch and crosses at 6.
    straight = _fit(tmp_path / "straight", limit_train_batches=3)
    checkpoint = tmp_path / "straight" / f"epoch=1-step={N}.ckpt"
    resumed = _fit(tmp_path / "resumed", ckpt_path=checkpoint, limit_train_batches=3)
    # Epochs 0 and 1 complete, and the one max_steps ended in, which Lightning counts as well.
    assert (straight[2].current_epoch, resumed[2].current_epoch) == (3, 3)
    assert resumed[2].global_step == 2 * N
    expected, actual = straight[0].state_dict(), resumed[0].state_dict()
    assert [k for k in expected if not torch.equal(expected[k], actual[k])] == []
    assert straight[1].feed.env_steps == resumed[1].feed.env_steps


def test_resumed_appo_matches_uninterrupted_run_in_optimizer_and_adaptive_lr(runs):
    straight = runs["straight"][2].optimizers[0].state_dict()
    resumed = runs["resumed"][2].optimizers[0].state_dict()
    assert straight["param_groups"] == resumed["param_groups"]
    assert straight["param_groups"][0]["lr"] != 1e-3  # the KL-adaptive rate moved
    for index, state in straight["state"].items():
        for key, value in state.items():
            assert torch.equal(value, resumed["state"][index][key]), (index, key)


def test_resumed_run_continues_global_step_and_env_step_counter(runs):
    (_, straight_data, straight), (_, resumed_data, resumed) = runs["straight"], runs["resumed"]
    assert straight.global_step == resumed.global_step == 2 * N
    assert (
        straight_data.feed.env_steps == resumed_data.feed.env_steps == 2 * N * NUM_ENVS * NUM_STEPS
    )
    assert runs["checkpoint"]["RolloutDataModule"]["env_steps"] == N * NUM_ENVS * NUM_STEPS


def test_first_publish_after_resume_is_the_checkpoints_weights_and_statistics(runs):
    probe, saved = runs["probe"], runs["checkpoint"]["state_dict"]
    assert probe.weights_version == N
    for key, value in probe.actor_state.items():
        assert torch.equal(value, saved[f"actor.{key}"]), key
    assert probe.obs_stats.version == N
    assert torch.equal(probe.obs_stats.mean, saved["obs_normalizer.mean"].double())
    assert torch.equal(probe.obs_stats.var, saved["obs_normalizer.var"].double())
    assert float(probe.obs_stats.count) == float(saved["obs_normalizer.count"])


def test_synchronous_collection_acts_each_rollout_with_the_current_policy(runs):
    # Each batch: the new rollout (lag 0) and the previous one kept in the pool (lag 1).
    assert runs["lags"] == [0.0] + [0.5] * (2 * N - 1)


def test_checkpoint_holds_collector_state_and_rng_and_fits_release_everything(runs):
    saved = runs["checkpoint"]
    collector = saved["RolloutDataModule"]["collector"]
    assert collector["env"] is not None and collector["env_steps"] == N * NUM_ENVS * NUM_STEPS
    assert set(saved["callbacks"]["RLCheckpoint"]["rng"]) >= {"python", "numpy", "torch"}
    for _, data, _ in (runs["straight"], runs["resumed"]):
        assert data.session is None and data.transport is None
    assert list_segments(os.getpid()) == []


def test_rl_checkpoint_puts_rng_streams_back_at_train_start():
    callback = RLCheckpoint()
    seed_everything(3)
    state = callback.state_dict()
    expected = (random.random(), np.random.rand(), torch.rand(2))
    seed_everything(4)
    callback.load_state_dict(state)
    callback.on_train_start(None, None)
    assert (random.random(), np.random.rand()) == expected[:2]
    assert torch.equal(torch.rand(2), expected[2])


def test_rl_checkpoint_rejects_non_positive_keep_replays():
    with pytest.raises(ValueError, match="keep_replays must be >= 1, got 0"):
        RLCheckpoint(keep_replays=0)


# ---------------------------------------------------------------------------------- FastTD3
OFF_ENVS, LEARNING_STARTS = 4, 6


def _build_offpolicy() -> tuple[FastTD3, ReplayDataModule]:
    seed_everything(0)
    data = ReplayDataModule(
        CollectorOptions(
            # Episodes end: exploration scales are redrawn.
            TaskSpec("CartpoleSwingup", {"max_episode_steps": 7}),
            OFF_ENVS,
            seed=1,
            learner_torch_threads=1,
        ),
        batch_size=8,
        buffer_size=12,  # wraps around before the checkpoint: the sidecar keeps physical order
        learning_starts=LEARNING_STARTS,
        synchronous=True,
    )
    spec = data.env_spec
    model = FastTD3(
        spec.obs_sizes["policy"],
        spec.obs_sizes["critic"],
        spec.action_size,
        actor_hidden_dims=(16,),
        critic_hidden_dims=(16,),
        offpolicy=OffPolicyOptions(num_atoms=11, v_min=-10.0, v_max=10.0, updates_per_step=2),
    )
    return model, data


class _ReplayAtEnd(Callback):
    def __init__(self) -> None:
        self.released_while_training: list[tuple[int, int]] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        data = trainer.datamodule
        self.released_while_training.append((data.transport.link.released, data.pipeline.tick))

    def on_train_end(self, trainer, pl_module) -> None:
        replay = trainer.datamodule.transport.replay
        self.rows, self.write_ptr = replay.rows.clone(), replay.write_ptr


def _fit_offpolicy(root: Path, precision: str, ckpt_path: Path | None = None):
    model, data = _build_offpolicy()
    replay = _ReplayAtEnd()
    trainer = Trainer(
        max_steps=2 * N,
        accelerator="cpu",
        precision=precision,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root,
        callbacks=[
            WeightSync(),
            ObsNormSync(),
            EpisodeStatsMonitor(),
            replay,
            RLCheckpoint(save_replay=True),
            ModelCheckpoint(dirpath=root / "checkpoints", every_n_train_steps=N, save_top_k=-1),
        ],
    )
    trainer.fit(model, datamodule=data, ckpt_path=ckpt_path)
    return model, data, trainer, replay


# bf16-mixed: the shipped off-policy configs train under CPU autocast.
@pytest.fixture(scope="module", params=["32-true", "bf16-mixed"])
def offpolicy_runs(tmp_path_factory, request):
    root = tmp_path_factory.mktemp("resume_offpolicy")
    straight = _fit_offpolicy(root / "straight", request.param)
    checkpoint = root / "straight" / "checkpoints" / f"epoch=0-step={N}.ckpt"
    resumed = _fit_offpolicy(root / "resumed", request.param, ckpt_path=checkpoint)
    return {"straight": straight, "resumed": resumed, "root": root}


def test_resumed_fast_td3_with_saved_replay_matches_uninterrupted_run(offpolicy_runs):
    (model_a, data_a, trainer_a, replay_a) = offpolicy_runs["straight"]
    (model_b, data_b, trainer_b, replay_b) = offpolicy_runs["resumed"]
    state_a, state_b = model_a.state_dict(), model_b.state_dict()
    assert [k for k in state_a if not torch.equal(state_a[k], state_b[k])] == []
    for opt_a, opt_b in zip(trainer_a.optimizers, trainer_b.optimizers, strict=True):
        a, b = opt_a.state_dict(), opt_b.state_dict()
        assert a["param_groups"] == b["param_groups"]
        for index, state in a["state"].items():
            for key, value in state.items():
                assert torch.equal(value, b["state"][index][key]), (index, key)
    assert trainer_a.global_step == trainer_b.global_step == 2 * N
    assert data_a.feed.env_steps == data_b.feed.env_steps
    assert replay_a.write_ptr == replay_b.write_ptr
    assert torch.equal(replay_a.rows, replay_b.rows)


def test_synchronous_pipeline_releases_no_tick_beyond_the_one_being_trained(offpolicy_runs):
    for *_, replay in (offpolicy_runs["straight"], offpolicy_runs["resumed"]):
        assert all(released == tick for released, tick in replay.released_while_training)


def test_replay_sidecars_sit_next_to_the_checkpoints_and_fits_release_everything(offpolicy_runs):
    sidecars = offpolicy_runs["root"] / "straight" / "checkpoints"
    assert {p.name for p in sidecars.glob("replay-*.bin")} == {
        f"replay-step={N}.bin",
        f"replay-step={2 * N}.bin",
    }
    for _, data, _, _ in (offpolicy_runs["straight"], offpolicy_runs["resumed"]):
        assert data.session is None and data.transport is None
    assert list_segments(os.getpid()) == []


# ------------------------------------------------------------------ CLI run-directory resolution
def _fit_config(runs: Path, ckpt_path: str | None, versions: tuple = (None, None)) -> Namespace:
    loggers = [
        Namespace(
            class_path=class_path,
            init_args=Namespace(save_dir=str(runs), name="appo", version=version),
        )
        for class_path, version in zip(
            ("lightning.pytorch.loggers.TensorBoardLogger", "lightning.pytorch.loggers.CSVLogger"),
            versions,
            strict=True,
        )
    ]
    return Namespace(ckpt_path=ckpt_path, trainer=Namespace(logger=loggers, callbacks=[]))


def _checkpoint(path: Path, logger_versions: list | None) -> Path:
    path.parent.mkdir(parents=True)
    callbacks = (
        {} if logger_versions is None else {"RLCheckpoint": {"logger_versions": logger_versions}}
    )
    torch.save({"callbacks": callbacks}, path)
    return path


def test_last_resolves_to_the_newest_run_and_loggers_take_its_saved_versions(tmp_path):
    older = _checkpoint(tmp_path / "appo" / "version_0" / "checkpoints" / "last.ckpt", [0, 1])
    newer = _checkpoint(tmp_path / "appo" / "version_2" / "checkpoints" / "last.ckpt", [2, 3])
    os.utime(older, (1, 1))
    config = _fit_config(tmp_path, "last", versions=(None, "mine"))
    continue_run_directory(config)
    assert config.ckpt_path == str(newer)
    assert [entry.init_args.version for entry in config.trainer.logger] == [2, "mine"]


def test_explicit_path_without_saved_versions_continues_the_directory_it_lies_in(tmp_path):
    path = _checkpoint(
        tmp_path / "appo" / "version_5" / "checkpoints" / "epoch=0-step=9.ckpt", None
    )
    config = _fit_config(tmp_path, str(path))
    continue_run_directory(config)
    assert [entry.init_args.version for entry in config.trainer.logger] == [5, 5]


def test_last_without_any_checkpoint_leaves_the_config_alone(tmp_path):
    config = _fit_config(tmp_path, "last")
    continue_run_directory(config)
    assert config.ckpt_path == "last"
    assert [entry.init_args.version for entry in config.trainer.logger] == [None, None]
