"""A trained run rebuilt from a checkpoint: from its hyper-parameters, else from config.yaml."""

from __future__ import annotations

import os
import shutil

import pytest
import torch

from unilab_lit.algos.appo import APPO
from unilab_lit.app.trained_run import RunLoadError, load_trained_run, resolve_checkpoint


def test_load_trained_run_restores_model_task_and_normaliser_from_the_checkpoint(
    appo_cartpole_run, tmp_path
):
    (source,) = appo_cartpole_run.rglob("last.ckpt")
    alone = tmp_path / "alone.ckpt"  # no config.yaml anywhere near it
    shutil.copy(source, alone)
    run = load_trained_run(alone)
    saved = torch.load(source, map_location="cpu", weights_only=True)
    assert isinstance(run.model, APPO) and not run.model.training
    assert run.task == "CartpoleSwingup" and run.global_step == saved["global_step"]
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
    assert isinstance(run.model, APPO) and run.task == "CartpoleSwingup"


def test_resolve_checkpoint_last_takes_the_newest_last_checkpoint(tmp_path):
    older = tmp_path / "a" / "version_0" / "checkpoints" / "last.ckpt"
    newer = tmp_path / "b" / "version_3" / "checkpoints" / "last.ckpt"
    for path, mtime in ((older, 1_000), (newer, 2_000)):
        path.parent.mkdir(parents=True)
        path.write_bytes(b"")
        os.utime(path, (mtime, mtime))
    assert resolve_checkpoint("last", tmp_path) == newer
    with pytest.raises(RunLoadError, match="no last"):
        resolve_checkpoint("last", tmp_path / "empty")
