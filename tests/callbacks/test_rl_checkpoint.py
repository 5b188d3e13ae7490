"""``RLCheckpoint``'s replay sidecars follow their checkpoints, with ``configs/fast_sac.yaml``'s settings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from lightning.pytorch import seed_everything

from tests.collector_fits import collector_trainer
from tests.conftest import REPO
from unilab_lit.algos.fast_sac import FastSAC
from unilab_lit.algos.offpolicy_options import OffPolicyOptions
from unilab_lit.callbacks import RLCheckpoint, StopCheckpoint
from unilab_lit.checkpoint_io import AtomicCheckpointIO
from unilab_lit.collector.options import CollectorOptions
from unilab_lit.data.replay import ReplayDataModule
from unilab_lit.envs.task_spec import TaskSpec


def _shipped_init_args(name: str) -> dict[str, Any]:
    config = yaml.safe_load((REPO / "configs" / "fast_sac.yaml").read_text())
    (callback,) = [c for c in config["trainer"]["callbacks"] if c["class_path"].endswith(name)]
    return callback.get("init_args", {})


class _StopBeforeCheckpointAt(AtomicCheckpointIO):
    """A stop that lands between the sidecar's write and the step-``step`` checkpoint's."""

    def __init__(self, step: int) -> None:
        super().__init__()
        self.step = step

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options=None) -> None:
        if checkpoint["global_step"] == self.step:
            raise RuntimeError("stopped between the two writes")
        super().save_checkpoint(checkpoint, path, storage_options)


def _fit_fast_sac(root: Path, max_steps: int, every: int, **trainer_kwargs: Any) -> Path:
    seed_everything(0)
    data = ReplayDataModule(
        CollectorOptions(
            TaskSpec("CartpoleSwingup", {"max_episode_steps": 20}), 4, learner_torch_threads=1
        ),
        batch_size=8,
        buffer_size=64,
        learning_starts=2,
    )
    spec = data.env_spec
    model = FastSAC(
        spec.obs_sizes["policy"],
        spec.obs_sizes["critic"],
        spec.action_size,
        actor_hidden_dims=(16,),
        critic_hidden_dims=(16,),
        offpolicy=OffPolicyOptions(num_atoms=11, v_min=-10.0, v_max=10.0),
    )
    checkpoints = root / "checkpoints"
    trainer = collector_trainer(
        max_steps,
        RLCheckpoint(**_shipped_init_args("RLCheckpoint")),
        StopCheckpoint(
            **{**_shipped_init_args("StopCheckpoint"), "every_n_train_steps": every},
            dirpath=checkpoints,
        ),
        default_root_dir=root,
        enable_checkpointing=True,
        **trainer_kwargs,
    )
    trainer.fit(model, datamodule=data)
    return checkpoints


def _named_sidecars(checkpoints: Path) -> dict[str, str]:
    named = {}
    for path in checkpoints.glob("*.ckpt"):
        state = torch.load(path, map_location="cpu", weights_only=True)["callbacks"]
        named[path.name] = state["RLCheckpoint"]["replay_file"]["name"]
    return named


def test_sidecar_of_a_pruned_checkpoint_is_removed_past_keep_replays(tmp_path):
    # Checkpoints at 40 and 80; the periodic one keeps the newest only (save_top_k=1).
    checkpoints = _fit_fast_sac(tmp_path, max_steps=80, every=40)
    assert _shipped_init_args("RLCheckpoint").get("keep_replays", 2) >= 2  # else nothing tested
    named = _named_sidecars(checkpoints)
    assert named == {"step=80.ckpt": "replay-step=80.bin", "last.ckpt": "replay-step=80.bin"}
    assert sorted(p.name for p in checkpoints.glob("replay*.bin")) == ["replay-step=80.bin"]


def test_sidecar_whose_checkpoint_was_never_written_is_removed(tmp_path):
    with pytest.raises(RuntimeError, match="between the two writes"):
        _fit_fast_sac(tmp_path, max_steps=8, every=4, plugins=[_StopBeforeCheckpointAt(8)])
    checkpoints = tmp_path / "checkpoints"
    assert set(_named_sidecars(checkpoints).values()) == {"replay-step=4.bin"}
    assert sorted(p.name for p in checkpoints.glob("replay*.bin")) == ["replay-step=4.bin"]
