"""A trained run rebuilt from a checkpoint: from its hyper-parameters, else from config.yaml."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch

from unilab_lit.algos.appo import APPO
from unilab_lit.app.trained_run import (
    RunLoadError,
    experiment_dir,
    load_trained_run,
    resolve_checkpoint,
)


def test_load_trained_run_restores_model_task_and_normaliser_from_the_checkpoint(
    appo_cartpole_run, tmp_path
):
    (source,) = appo_cartpole_run.rglob("last.ckpt")
    alone = tmp_path / "alone.ckpt"  # no config.yaml anywhere near it
    shutil.copy(source, alone)
    run = load_trained_run(alone)
    saved = torch.load(source, map_location="cpu", weights_only=True)
    assert isinstance(run.model, APPO) and not run.model.training
    assert run.task.class_path == "CartpoleSwingup" and run.global_step == saved["global_step"]
    assert torch.equal(run.model.obs_normalizer.mean, saved["state_dict"]["obs_normalizer.mean"])


def test_load_trained_run_falls_back_to_the_run_config_yaml(
    appo_cartpole_run, checkpoint_without_config, tmp_path
):
    (config,) = appo_cartpole_run.rglob("config.yaml")
    run_dir = tmp_path / "version_0"
    (run_dir / "checkpoints").mkdir(parents=True)
    shutil.copy(config, run_dir / "config.yaml")
    shutil.copy(checkpoint_without_config, run_dir / "checkpoints" / "last.ckpt")
    run = load_trained_run(run_dir / "checkpoints" / "last.ckpt")
    assert isinstance(run.model, APPO) and run.task.class_path == "CartpoleSwingup"


def _last_checkpoints(*written: tuple[Path, int]) -> None:
    for path, mtime in written:
        path.parent.mkdir(parents=True)
        path.write_bytes(b"")
        os.utime(path, (mtime, mtime))


def test_resolve_checkpoint_last_takes_the_newest_version_of_one_experiment(tmp_path):
    older = tmp_path / "appo" / "version_0" / "checkpoints" / "last.ckpt"
    newer = tmp_path / "appo" / "version_3" / "checkpoints" / "last.ckpt"
    _last_checkpoints((older, 1_000), (newer, 2_000))
    assert resolve_checkpoint("last", tmp_path) == newer
    assert resolve_checkpoint("last", tmp_path / "appo" / "version_0") == older
    with pytest.raises(RunLoadError, match="no last"):
        resolve_checkpoint("last", tmp_path / "empty")


def test_resolve_checkpoint_last_refuses_two_experiments_and_lists_their_runs(tmp_path):
    mine = tmp_path / "appo" / "version_0" / "checkpoints" / "last.ckpt"
    other = tmp_path / "fast_td3" / "version_0" / "checkpoints" / "last.ckpt"
    _last_checkpoints((mine, 1_000), (other, 2_000))
    with pytest.raises(RunLoadError, match="ambiguous") as refused:
        resolve_checkpoint("last", tmp_path)
    assert str(mine.parents[1]) in str(refused.value) and str(other.parents[1]) in str(
        refused.value
    )
    assert resolve_checkpoint("last", tmp_path / "appo") == mine


def test_experiment_dir_is_the_configs_logger_save_dir_and_name(tmp_path):
    config = tmp_path / "mine.yaml"
    config.write_text(
        "trainer:\n  logger:\n    class_path: lightning.pytorch.loggers.TensorBoardLogger\n"
        f"    init_args:\n      save_dir: {tmp_path}\n      name: appo\n"
    )
    assert experiment_dir(config) == tmp_path / "appo"
    config.write_text("trainer:\n  logger: false\n")
    with pytest.raises(RunLoadError, match="names no logger"):
        experiment_dir(config)
