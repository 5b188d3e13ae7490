"""APPO's PPO-family options: value normalisation, observation clipping, the linear LR schedule."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import onnxruntime
import pytest
import torch
from appo_batches import N_ENVS, RandomBatches, small_appo
from lightning.pytorch import Callback
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from offpolicy_batches import loader, make_trainer

from unilab_lit.algos import vtrace as vtrace_module
from unilab_lit.algos.appo import APPO
from unilab_lit.app.export import export_policy
from unilab_lit.app.trained_run import TrainedRun
from unilab_lit.callbacks import StopCheckpoint
from unilab_lit.collector.options import CollectorOptions
from unilab_lit.data.rollout import RolloutDataModule
from unilab_lit.envs.task_spec import TaskSpec
from unilab_lit.telemetry import metrics

LR, MIN_LR = 1e-3, 1e-4


# ------------------------------------------------------------------ value normalisation
def _scaled_rewards(i: int, batch) -> None:
    # Rewards of a locomotion task's scale: unnormalised value losses in the hundreds of thousands.
    batch["reward"].mul_(300.0)


@pytest.mark.parametrize("mode", ["none", "running", "popart"])
def test_value_statistics_are_those_of_the_fresh_vtrace_targets_and_the_loss_is_normalised(
    tmp_path, monkeypatch, mode
):
    targets = []

    def recording_vtrace(*args, **kwargs):
        out = appo_vtrace(*args, **kwargs)
        targets.append(out.vs[:, :N_ENVS].numpy().astype(np.float64))  # the fresh columns
        return out

    appo_vtrace = vtrace_module.vtrace
    # APPO's V-trace of an item (item_vtrace) calls vtrace by its module's name.
    monkeypatch.setattr(vtrace_module, "vtrace", recording_vtrace)
    torch.manual_seed(0)
    model = small_appo(value_normalization=mode, schedule="fixed")
    trainer = make_trainer(tmp_path, 4, logger=CSVLogger(tmp_path, name="csv"))
    trainer.fit(model, train_dataloaders=loader(RandomBatches(poison=_scaled_rewards)))
    with open(Path(trainer.logger.log_dir) / "metrics.csv") as f:
        value_losses = [float(row[metrics.LOSS_VALUE]) for row in csv.DictReader(f)]

    assert len(targets) == 4 and len(value_losses) == 4
    if mode == "none":
        assert model.value_normalizer.state_dict() == {}
        assert min(value_losses) > 1e4
        return
    everything = np.concatenate([t.ravel() for t in targets])
    stats = model.value_normalizer.stats
    assert stats.count.item() == everything.size
    np.testing.assert_allclose(stats.mean.item(), everything.mean(), rtol=1e-5)
    np.testing.assert_allclose(stats.var.item(), everything.var(), rtol=1e-5)
    # Fitted in normalised units: the value loss is of order one, whatever the reward scale.
    assert max(value_losses) < 10.0


def test_value_statistics_survive_a_checkpoint_and_a_resume(tmp_path):
    torch.manual_seed(0)
    model = small_appo(value_normalization="popart")
    ckpt = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
    make_trainer(tmp_path, 3, enable_checkpointing=True, callbacks=[ckpt]).fit(
        model, train_dataloaders=loader(RandomBatches(poison=_scaled_rewards))
    )
    saved = {k: v.clone() for k, v in model.value_normalizer.state_dict().items()}
    assert saved["stats.count"].item() > 0 and abs(saved["stats.mean"].item()) > 0.0
    last = tmp_path / "ckpt" / "last.ckpt"

    loaded = APPO.load_from_checkpoint(last, map_location="cpu")
    seen = {}

    class Capture(Callback):
        def on_train_start(self, trainer, pl_module):
            seen.update({k: v.clone() for k, v in pl_module.value_normalizer.state_dict().items()})

    resumed = small_appo(value_normalization="popart")
    make_trainer(tmp_path, 4, callbacks=[Capture()]).fit(
        resumed, train_dataloaders=loader(RandomBatches()), ckpt_path=last
    )
    for key, value in saved.items():
        assert torch.equal(loaded.value_normalizer.state_dict()[key], value), key
        assert torch.equal(seen[key], value), key


# ---------------------------------------------------------------- linear learning rate
class _RecordRates(Callback):
    """The rate each iteration trains with; optionally stops the run after ``stop_at`` steps."""

    def __init__(self, stop_at: int | None = None) -> None:
        self.stop_at = stop_at
        self.rates: dict[int, float] = {}

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        lr = pl_module.optimizers().optimizer.param_groups[0]["lr"]
        self.rates[trainer.global_step] = lr

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == self.stop_at:
            trainer.should_stop = True


def _linear_appo() -> APPO:
    # Adam's default lr is LR: a partial in the hyper-parameters would not load weights-only.
    return small_appo(schedule="linear", min_learning_rate=MIN_LR)


# Every step, and the shipped configs' StopCheckpoint: periodic saves far apart, last.ckpt at the stop.
_CHECKPOINTS = {
    "every_step": lambda d: ModelCheckpoint(dirpath=d, every_n_train_steps=1, save_last=True),
    "shipped_stop_checkpoint": lambda d: StopCheckpoint(
        dirpath=d, every_n_train_steps=100, save_last=True
    ),
}


@pytest.mark.parametrize("checkpointing", list(_CHECKPOINTS))
def test_linear_schedule_decays_to_min_lr_and_a_resume_continues_the_uninterrupted_rates(
    tmp_path, checkpointing
):
    steps = 6
    torch.manual_seed(0)
    whole = _RecordRates()
    model = _linear_appo()
    make_trainer(tmp_path / "whole", steps, callbacks=[whole]).fit(
        model, train_dataloaders=loader(RandomBatches())
    )
    expected = [LR + (MIN_LR - LR) * k / steps for k in range(steps)]
    assert list(whole.rates) == list(range(steps))
    np.testing.assert_allclose(list(whole.rates.values()), expected, rtol=1e-9)
    final = model.optimizers().optimizer.param_groups[0]["lr"]
    assert final == pytest.approx(MIN_LR, rel=1e-9)

    # The same run stopped after 3 iterations, then resumed from its checkpoint.
    ckpt = _CHECKPOINTS[checkpointing](tmp_path / "ckpt")
    first = _RecordRates(stop_at=3)
    make_trainer(tmp_path / "first", steps, enable_checkpointing=True, callbacks=[ckpt, first]).fit(
        _linear_appo(), train_dataloaders=loader(RandomBatches())
    )
    assert list(first.rates) == [0, 1, 2]
    second = _RecordRates()
    make_trainer(tmp_path / "second", steps, callbacks=[second]).fit(
        _linear_appo(),
        train_dataloaders=loader(RandomBatches()),
        ckpt_path=tmp_path / "ckpt" / "last.ckpt",
    )
    assert list(second.rates) == [3, 4, 5]
    assert {**first.rates, **second.rates} == whole.rates


def test_linear_schedule_without_max_steps_fails_naming_the_key(tmp_path):
    trainer = make_trainer(tmp_path, -1, max_epochs=1)
    with pytest.raises(ValueError, match=r"^trainer.max_steps must be set .*got -1$"):
        trainer.fit(_linear_appo(), train_dataloaders=loader(RandomBatches()))


def test_linear_schedule_below_min_learning_rate_fails_naming_the_lr(tmp_path):
    model = small_appo(schedule="linear", min_learning_rate=1e-2)
    with pytest.raises(ValueError, match=r"^the optimizer's lr must be >= min_learning_rate"):
        make_trainer(tmp_path, 2).fit(model, train_dataloaders=loader(RandomBatches()))


# ------------------------------------------- observation clipping, real collector, export
NUM_ENVS, NUM_STEPS = 8, 8


class _FirstItem(APPO):
    """APPO that keeps its first item and its state before that item's update."""

    def training_step(self, dataloader_iter):
        item = next(dataloader_iter)
        if self.global_step == 0:
            self.first_batch = item[0].clone()
            self.first_state = {k: v.clone() for k, v in self.state_dict().items()}
        return super().training_step(iter([item]))


def _cartpole(cls: type[APPO], **kwargs) -> tuple[APPO, RolloutDataModule]:
    data = RolloutDataModule(CollectorOptions("CartpoleSwingup", NUM_ENVS), num_steps=NUM_STEPS)
    spec = data.env_spec
    sizes = {
        "policy_obs_size": spec.obs_sizes["policy"],
        "critic_obs_size": spec.obs_sizes["critic"],
        "action_size": spec.action_size,
    }
    torch.manual_seed(0)
    small = {"actor_hidden_dims": (16,), "critic_hidden_dims": (16,), "num_mini_batches": 2}
    return cls(**sizes, **small, num_learning_epochs=1, **kwargs), data


@pytest.mark.parametrize("obs_clip", [0.5, None])
def test_learner_collector_and_export_act_alike_on_observations_far_outside_the_stats(
    tmp_path, obs_clip
):
    model, data = _cartpole(_FirstItem, obs_clip=obs_clip)
    # Statistics every CartpoleSwingup observation lies far outside: ~100 standard deviations.
    size = model.hparams.policy_obs_size
    model.obs_normalizer.update(
        torch.randn(4096, size, generator=torch.Generator().manual_seed(0)) * 0.01
    )
    make_trainer(tmp_path, 1).fit(model, datamodule=data)

    batch = model.first_batch
    learner = _cartpole(APPO, obs_clip=obs_clip)[0]
    learner.load_state_dict(model.first_state)
    assert bool((batch["policy_version"] == 0).all())  # acted with the learner's first weights
    normalised = learner.obs_normalizer(batch["obs"])
    if obs_clip is None:
        assert normalised.abs().max() > 20.0
    else:
        assert normalised.abs().max() == obs_clip  # the clip was hit
    # The collector (its own process, policy rebuilt from the spec, published statistics)
    # sampled each action from the distribution the learner computes for that observation.
    with torch.no_grad():
        log_prob = learner.actor.distribution(normalised).log_prob(batch["actions"]).sum(-1)
    torch.testing.assert_close(log_prob, batch["log_prob"], rtol=1e-5, atol=1e-4)

    # The exported policy (ONNX and ExportedProgram) acts as the learner's inference policy.
    raw = batch["obs"].reshape(-1, size)
    with torch.no_grad():
        expected = learner.actor(learner.obs_normalizer(raw))
        torch.testing.assert_close(learner.inference_policy()(raw), expected)
    onnx_path, program_path = tmp_path / "policy.onnx", tmp_path / "policy.pt2"
    export_policy(
        TrainedRun(learner.eval(), TaskSpec("CartpoleSwingup"), Path("none.ckpt"), 0),
        onnx_path,
        program_path,
    )
    session = onnxruntime.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    (from_onnx,) = session.run(None, {"obs": raw.numpy()})
    np.testing.assert_allclose(from_onnx, expected.numpy(), atol=1e-5, rtol=1e-6)
    program = torch.export.load(program_path).module()
    with torch.no_grad():
        from_program = program(raw).numpy()
    np.testing.assert_allclose(from_program, expected.numpy(), atol=1e-5, rtol=1e-6)


def test_fit_with_popart_linear_schedule_and_obs_clip_trains_on_the_real_collector(tmp_path):
    model, data = _cartpole(
        APPO,
        value_normalization="popart",
        obs_clip=5.0,
        schedule="linear",
        min_learning_rate=MIN_LR,
    )
    trainer = make_trainer(tmp_path, 4)
    trainer.fit(model, datamodule=data)
    assert trainer.global_step == 4
    assert int(model.nonfinite_skips) == 0
    assert all(torch.isfinite(p).all() for p in model.parameters())
    # Every delivered rollout's targets were folded in once, as its observations were.
    assert model.value_normalizer.stats.count.item() == data.feed.learned_env_steps
    assert model.obs_normalizer.count.item() == data.feed.learned_env_steps
    assert model.optimizers().optimizer.param_groups[0]["lr"] == pytest.approx(MIN_LR)
