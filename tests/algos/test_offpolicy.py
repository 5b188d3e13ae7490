"""The iteration FastTD3 and FastSAC share: batch contract, step convention, non-finite guard."""

from __future__ import annotations

import csv
import math
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from lightning.pytorch import Callback
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from offpolicy_batches import DP, SMALL, RandomBatches, build, loader, make_trainer, random_batch
from tensordict import TensorDict
from torch import nn

from unilab_lit.algos.fast_sac import FastSAC
from unilab_lit.algos.fast_td3 import FastTD3
from unilab_lit.algos.functional import bootstrap_mask, polyak_update
from unilab_lit.telemetry import metrics

ALGOS = [FastTD3, FastSAC]
B, U = 8, 2


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _model(cls=FastTD3, **kwargs):
    return build(cls, **{**SMALL, "updates_per_step": U, "policy_frequency": 1, **kwargs})


def test_bootstrap_mask_drops_only_terminated_rows_under_both_done_conventions():
    # continuing, truncated (done = terminated), truncated (done = terminated | truncated), terminated
    done = torch.tensor([False, False, True, True])
    truncated = torch.tensor([False, True, True, False])
    assert bootstrap_mask(done, truncated).tolist() == [True, True, True, False]


def test_polyak_update_moves_each_target_parameter_by_tau():
    source, target = nn.Linear(3, 2), nn.Linear(3, 2)
    before = [p.clone() for p in target.parameters()]
    polyak_update(target, source, 0.25)
    for b, t, s in zip(before, target.parameters(), source.parameters(), strict=True):
        torch.testing.assert_close(t, 0.75 * b + 0.25 * s.detach())


def test_prepare_normalises_observations_and_discounts_by_the_bootstrap_mask():
    model = _model(gamma=0.9)
    batch = random_batch(torch.Generator().manual_seed(0), 4)
    batch["done"] = torch.tensor([False, False, True, True])
    batch["truncated"] = torch.tensor([False, True, True, False])
    model._update_normalizers(batch["obs"], batch["critic_obs"])
    data = model._prepare(batch)
    torch.testing.assert_close(data["discount"], torch.tensor([0.9, 0.9, 0.9, 0.0]))
    torch.testing.assert_close(data["next_obs"], model.obs_normalizer(batch["next_obs"]))
    torch.testing.assert_close(
        data["next_critic_obs"], model.critic_obs_normalizer(batch["next_critic_obs"])
    )
    torch.testing.assert_close(data["obs"].mean(0), torch.zeros(DP), atol=1e-5, rtol=0)


def test_batch_missing_a_key_raises_and_lists_the_keys_it_has(tmp_path):
    def drop_truncated(i, batch):
        del batch["truncated"]

    with pytest.raises(KeyError, match=r"lacks \['truncated'\]; it has \[.*'reward'"):
        make_trainer(tmp_path, 1).fit(
            _model(), train_dataloaders=loader(RandomBatches(B * U, drop_truncated))
        )


def test_batch_without_one_batch_dimension_is_rejected_naming_the_contract():
    rows = random_batch(torch.Generator().manual_seed(0), B * U)
    unbatched = TensorDict(dict(rows.items()), batch_size=[])
    with pytest.raises(ValueError, match=r"TensorDict of batch size \[rows\], got \[\]"):
        _model()._check_batch(unbatched)


def test_batch_that_does_not_split_into_minibatches_raises(tmp_path):
    with pytest.raises(ValueError, match="15 rows does not split into updates_per_step=2"):
        make_trainer(tmp_path, 1).fit(_model(), train_dataloaders=loader(RandomBatches(15)))


@pytest.mark.parametrize("cls", ALGOS)
def test_trainer_steps_checkpoints_and_log_axis_count_iterations(tmp_path, cls):
    torch.manual_seed(0)
    model = _model(cls, updates_per_step=3)
    dataset = RandomBatches(B * 3)
    steps = 6
    ckpt = ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=2, save_top_k=-1)
    trainer = make_trainer(
        tmp_path,
        steps,
        logger=CSVLogger(tmp_path, name="csv"),
        enable_checkpointing=True,
        callbacks=[ckpt],
    )
    trainer.fit(model, train_dataloaders=loader(dataset))

    # One global_step per item (not per optimizer step), and no item fetched ahead.
    assert trainer.global_step == steps
    assert dataset.served == steps
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == [
        "epoch=0-step=2.ckpt",
        "epoch=0-step=4.ckpt",
        "epoch=0-step=6.ckpt",
    ]
    with open(Path(trainer.logger.log_dir) / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["step"]) for r in rows] == list(range(steps))
    for key in (
        metrics.LOSS_CRITIC,
        metrics.LOSS_ACTOR,
        metrics.CRITIC_GRAD_NORM,
        metrics.ACTOR_GRAD_NORM,
        metrics.Q_TARGET_MEAN,
        metrics.NONFINITE_SKIPS,
    ):
        assert math.isfinite(float(rows[-1][key])), key
    # Every critic update stepped its optimizer: 3 per iteration.
    critic_opt = model.optimizers()[0].optimizer
    assert int(critic_opt.state[next(model.critic.parameters())]["step"]) == 3 * steps


def _nan_reward_at_1(i, batch):
    if i == 1:
        batch["reward"][0] = math.nan


@pytest.mark.parametrize("cls", ALGOS)
def test_nonfinite_input_batch_is_skipped_counted_and_still_advances_the_step(tmp_path, cls):
    torch.manual_seed(0)
    model = _model(cls)
    trainer = make_trainer(tmp_path, 3)
    trainer.fit(model, train_dataloaders=loader(RandomBatches(B * U, _nan_reward_at_1)))
    assert trainer.global_step == 3
    assert int(model.nonfinite_skips) == 1
    assert trainer.callback_metrics[metrics.NONFINITE_SKIPS].item() == 1.0
    # The poisoned item reached neither the normalisers nor any parameter.
    assert int(model.obs_normalizer.count) == 2 * B * U
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_nonfinite_loss_skips_that_step_and_training_goes_on(tmp_path):
    torch.manual_seed(0)
    model = _model()
    compute = model._critic_loss_fn
    calls = []

    def nan_on_second_call(mb):
        loss, terms = compute(mb)
        calls.append(len(calls))
        return (loss * math.nan if len(calls) == 2 else loss), terms

    model._critic_loss_fn = nan_on_second_call
    trainer = make_trainer(tmp_path, 3)
    trainer.fit(model, train_dataloaders=loader(RandomBatches(B * U)))
    # Call 2 was the counted (last) critic step of iteration 0: skipped, yet the step advanced.
    assert trainer.global_step == 3
    assert int(model.nonfinite_skips) == 1
    critic_opt = model.optimizers()[0].optimizer
    assert int(critic_opt.state[next(model.critic.parameters())]["step"]) == 3 * U - 1
    assert all(torch.isfinite(p).all() for p in model.parameters())


@pytest.mark.parametrize("cls", ALGOS)
def test_persistent_nonfinite_critic_loss_stops_training_naming_it(tmp_path, cls):
    model = _model(cls, max_nonfinite_steps=3)
    with torch.no_grad():
        model.critic.heads[0][0].weight.fill_(math.inf)
    dataset = RandomBatches(B * U)
    with pytest.raises(
        RuntimeError, match=r"3 non-finite critic steps in a row .*iteration 1, update 1/2"
    ):
        make_trainer(tmp_path, 10).fit(model, train_dataloaders=loader(dataset))
    assert dataset.served == 2


@pytest.mark.parametrize("cls", ALGOS)
def test_actor_updates_every_policy_frequency_critic_updates_across_iterations(tmp_path, cls):
    model = _model(cls, updates_per_step=1, policy_frequency=3)
    actor_steps = []

    class CountActorSteps(Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            state = pl_module.optimizers()[1].optimizer.state.get(
                next(pl_module.actor.parameters()), {}
            )
            actor_steps.append(int(state.get("step", 0)))

    make_trainer(tmp_path, 7, callbacks=[CountActorSteps()]).fit(
        model, train_dataloaders=loader(RandomBatches(B))
    )
    # Critic updates k = 0..6; the actor follows updates 2 and 5.
    assert actor_steps == [0, 0, 1, 1, 1, 2, 2]


def test_fit_start_rejects_fp16_mixed_precision():
    model = _model()
    model.trainer = SimpleNamespace(precision="16-mixed")
    with pytest.raises(ValueError, match="16-mixed"):
        model.on_fit_start()


@pytest.mark.parametrize("cls", ALGOS)
def test_trainer_trains_under_bf16_mixed_precision(tmp_path, cls):
    model = _model(cls)
    trainer = make_trainer(tmp_path, 2, precision="bf16-mixed")
    trainer.fit(model, train_dataloaders=loader(RandomBatches(B * U)))
    assert trainer.global_step == 2
    assert int(model.nonfinite_skips) == 0
    assert all(torch.isfinite(p).all() for p in model.parameters())


@pytest.mark.parametrize("cls", ALGOS)
def test_bf16_autocast_losses_and_gradients_stay_within_bf16_rounding_of_fp32(cls):
    # What precision="bf16-mixed" runs: the losses under CPU autocast. Tolerance: loss 1 %
    # (+1e-3), gradient 3 % of its fp32 norm over all of a network's parameters (measured <= 1 %
    # here, 4 % at the shipped 256x256 critics).
    torch.manual_seed(0)
    model = _model(cls)
    batch = random_batch(torch.Generator().manual_seed(0), 64)
    model._update_normalizers(batch["obs"], batch["critic_obs"])
    minibatch = model._prepare(batch)
    for loss_fn, network in ((model._critic_loss, model.critic), (model._actor_loss, model.actor)):
        params = list(network.parameters())
        results = []
        for bf16 in (False, True):
            torch.manual_seed(0)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                loss, _ = loss_fn(minibatch)
            grads = torch.autograd.grad(loss, params)
            results.append((loss.detach(), torch.cat([g.flatten() for g in grads])))
        (loss32, grad32), (loss16, grad16) = results
        assert loss16.dtype == torch.float32
        torch.testing.assert_close(loss16, loss32, rtol=1e-2, atol=1e-3)
        assert (grad16 - grad32).norm() <= 0.03 * grad32.norm()


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("policy_obs_size", 0),
        ("num_atoms", 1),
        ("v_max", -10.0),
        ("gamma", 0.0),
        ("tau", 1.5),
        ("updates_per_step", 0),
        ("policy_frequency", 0),
        ("max_grad_norm", -1.0),
        ("max_nonfinite_steps", 0),
    ],
)
@pytest.mark.parametrize("cls", ALGOS)
def test_constructor_rejects_out_of_range_shared_argument_naming_it(cls, name, value):
    with pytest.raises(ValueError, match=rf"^{name} must be .*got {re.escape(repr(value))}$"):
        _model(cls, **{name: value})


@pytest.mark.gpu
@pytest.mark.parametrize("cls", ALGOS)
def test_compiled_losses_train_on_cuda_under_bf16_with_fused_adamw(tmp_path, cls):
    torch.manual_seed(0)
    model = _model(cls, compile_losses=True)
    trainer = make_trainer(tmp_path, 3, accelerator="gpu", devices=1, precision="bf16-mixed")
    # Items arrive on the CPU here: the module moves them to its device.
    trainer.fit(model, train_dataloaders=loader(RandomBatches(B * U)))
    assert trainer.global_step == 3
    assert int(model.nonfinite_skips) == 0
    assert model._critic_loss_fn is not model._critic_loss
    assert all(opt.optimizer.defaults["fused"] for opt in model.optimizers())
    assert all(torch.isfinite(p).all() for p in model.parameters())
