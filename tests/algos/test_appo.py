from __future__ import annotations

import csv
import math
import re
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from appo_batches import (
    DC,
    DP,
    LAG,
    N_ENVS,
    A,
    M,
    RandomBatches,
    T,
    small_appo,
)
from lightning.pytorch import Callback
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from offpolicy_batches import loader, make_trainer
from tensordict import TensorDict
from torch.utils.data import IterableDataset

from unilab_lit.algos.appo import APPO
from unilab_lit.algos.functional import (
    clipped_surrogate_loss,
    clipped_value_loss,
    gaussian_kl,
    surrogate_reference,
)
from unilab_lit.algos.lr_schedule import adaptive_learning_rate
from unilab_lit.data.staging import rollout_batch
from unilab_lit.telemetry import metrics


# ---------------------------------------------------------------- hand-computed loss terms
def test_surrogate_uses_ratio_over_max_of_behaviour_and_target_and_clips():
    # s1, s2: π=1.5, π_b=1.0, π_t=1.2 -> ratio 1.25 (clipped to 1.2); s3: π=0.9, π_b=1, π_t=0.5 -> 0.9.
    log_prob = torch.log(torch.tensor([1.5, 1.5, 0.9])).requires_grad_()
    behaviour = torch.log(torch.tensor([1.0, 1.0, 1.0]))
    target = torch.log(torch.tensor([1.2, 1.2, 0.5]))
    adv = torch.tensor([2.0, -1.0, 1.0])
    reference = surrogate_reference("impact", behaviour, target)
    loss, clip_fraction = clipped_surrogate_loss(log_prob, reference, adv, clip_param=0.2)
    # objectives: min(2.5, 2.4)=2.4, min(-1.25, -1.2)=-1.25, 0.9
    assert loss.item() == pytest.approx(-(2.4 - 1.25 + 0.9) / 3, abs=1e-6)
    assert clip_fraction.item() == pytest.approx(2 / 3)
    loss.backward()
    # The clipped branch carries no gradient; the others give -A·ratio/3.
    torch.testing.assert_close(log_prob.grad, torch.tensor([0.0, 1.25 / 3, -0.9 / 3]))


@pytest.mark.parametrize(
    ("kind", "expected"),
    [("impact", [1.2, 1.2, 1.0]), ("target", [1.2, 1.2, 0.5]), ("behaviour", [1.0, 1.0, 1.0])],
)
def test_surrogate_ratio_divides_by_the_chosen_reference_density(kind, expected):
    behaviour = torch.log(torch.tensor([1.0, 1.0, 1.0]))
    target = torch.log(torch.tensor([1.2, 1.2, 0.5]))
    reference = surrogate_reference(kind, behaviour, target)
    torch.testing.assert_close(reference.exp(), torch.tensor(expected))


def test_target_ratio_starts_each_iteration_at_one_where_impact_clips_a_stale_sample():
    # A sample the behaviour policy made 2x likelier than the iteration's start (target = the
    # current policy): "target" starts at r = 1 and passes the gradient of a negative advantage,
    # "impact" starts at r = 0.5 < 1 - eps and clips it away before any update.
    log_prob = torch.log(torch.tensor([0.5])).requires_grad_()
    behaviour, target, adv = torch.log(torch.tensor([1.0])), torch.log(torch.tensor([0.5])), -1.0
    grads = {}
    for kind in ("target", "impact"):
        reference = surrogate_reference(kind, behaviour, target)
        loss, _ = clipped_surrogate_loss(log_prob, reference, torch.tensor([adv]), clip_param=0.2)
        (grads[kind],) = torch.autograd.grad(loss, log_prob)
    torch.testing.assert_close(grads["target"], torch.tensor([1.0]))  # -A * r
    torch.testing.assert_close(grads["impact"], torch.tensor([0.0]))


def test_an_unknown_surrogate_ratio_is_refused_naming_the_choices():
    with pytest.raises(ValueError, match="surrogate_ratio.*'impact', 'target', 'behaviour'"):
        APPO(4, 4, 1, surrogate_ratio="targte")


def test_clipped_value_loss_takes_the_larger_of_clipped_and_unclipped_errors():
    values = torch.tensor([1.0, 0.0])
    old = torch.tensor([0.5, 0.5])
    returns = torch.tensor([2.0, 0.0])
    # s1: max((1-2)^2, (0.7-2)^2)=1.69; s2: max(0, (0.3-0)^2)=0.09.
    clipped = clipped_value_loss(values, old, returns, clip_param=0.2, use_clipping=True)
    assert clipped.item() == pytest.approx((1.69 + 0.09) / 2)
    plain = clipped_value_loss(values, old, returns, clip_param=0.2, use_clipping=False)
    assert plain.item() == pytest.approx(0.5)


def test_gaussian_kl_matches_closed_form_and_torch():
    mean_p, std_p = torch.tensor([[0.0, 0.5]]), torch.tensor([[1.0, 0.3]])
    mean_q, std_q = torch.tensor([[1.0, 0.5]]), torch.tensor([[2.0, 0.3]])
    kl = gaussian_kl(mean_p, std_p, mean_q, std_q)
    # dim 0: log 2 + (1 + 1)/8 - 1/2; dim 1: identical distributions.
    assert kl.item() == pytest.approx(math.log(2.0) + 0.25 - 0.5, abs=1e-6)
    expected = torch.distributions.kl_divergence(
        torch.distributions.Normal(mean_p, std_p), torch.distributions.Normal(mean_q, std_q)
    ).sum(-1)
    torch.testing.assert_close(kl, expected)


@pytest.mark.parametrize(
    ("kl", "expected"),
    [(0.05, 1e-3 / 1.5), (0.001, 1e-3 * 1.5), (0.01, 1e-3), (0.0, 1e-3), (math.nan, 1e-3)],
)
def test_adaptive_learning_rate_moves_against_kl_error(kl, expected):
    lr = adaptive_learning_rate(1e-3, kl, 0.01, 2.0, 1.5, 1e-5, 1e-2)
    assert lr == pytest.approx(expected)


def test_adaptive_learning_rate_stays_within_bounds():
    assert adaptive_learning_rate(1e-5, 1.0, 0.01, 2.0, 1.5, 1e-5, 1e-2) == 1e-5
    assert adaptive_learning_rate(1e-2, 1e-4, 0.01, 2.0, 1.5, 1e-5, 1e-2) == 1e-2


# ------------------------------------------------------------------------ construction
@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("policy_obs_size", 0),
        ("action_size", -1),
        ("actor_hidden_dims", []),
        ("gamma", 1.5),
        ("clip_rho_threshold", 0.0),
        ("clip_c_threshold", -1.0),
        ("vtrace_lambda", 1.5),
        ("clip_param", 1.0),
        ("entropy_coef", -0.1),
        ("num_learning_epochs", 0),
        ("num_mini_batches", 0),
        ("schedule", "cosine"),
        ("value_normalization", "pop-art"),
        ("obs_clip", 0.0),
        ("desired_kl", 0.0),
        ("kl_tolerance_factor", 1.0),
        ("lr_factor", 0.9),
        ("max_learning_rate", 1e-6),
        ("max_grad_norm", 0.0),
        ("target_update_freq", 0),
        ("tau", 0.0),
        ("max_nonfinite_steps", 0),
    ],
)
def test_constructor_rejects_out_of_range_argument_naming_it(name, value):
    with pytest.raises(ValueError, match=rf"^{name} must be .*got {re.escape(repr(value))}$"):
        small_appo(**{name: value})


def test_collector_policy_spec_rebuilds_the_published_actor():
    model = small_appo()
    built = model.collector_policy_spec().build()
    built.load_state_dict(model.collector_policy().state_dict())
    obs = torch.randn(4, DP)
    torch.testing.assert_close(built(obs), model.actor(obs))
    assert model.collector_policy() is model.actor


# ------------------------------------------------------------------------ real Trainer
def _nan_reward_at_2(i: int, batch: TensorDict) -> None:
    if i == 2:
        batch["reward"][0, 0] = math.nan


def test_trainer_counts_iterations_adapts_lr_updates_normalizers_and_skips_nonfinite(tmp_path):
    torch.manual_seed(0)
    model = small_appo()
    dataset = RandomBatches(poison=_nan_reward_at_2)
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

    # One global_step per dataset item, and no item fetched ahead of its update.
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
    assert {float(r[metrics.POLICY_LAG]) for r in rows} == {float(LAG)}

    # The adaptive schedule moved the learning rate.
    lr = model.optimizers().optimizer.param_groups[0]["lr"]
    assert lr != pytest.approx(1e-3)
    # Normalisers saw the fresh columns of the 5 finite items only, once each.
    assert int(model.obs_normalizer.count) == (steps - 1) * T * N_ENVS
    assert int(model.critic_obs_normalizer.count) == (steps - 1) * T * N_ENVS
    assert model.obs_normalizer.mean.mean().item() == pytest.approx(5.0, abs=0.5)
    # The NaN item was skipped, counted and logged; parameters stayed finite.
    assert int(model.nonfinite_skips) == 1
    assert float(rows[-1][metrics.NONFINITE_SKIPS]) == 1.0
    assert all(torch.isfinite(p).all() for p in model.parameters())
    for key in (
        metrics.LOSS_SURROGATE,
        metrics.LOSS_VALUE,
        metrics.LOSS_ENTROPY,
        metrics.APPROX_KL,
        metrics.CLIP_FRACTION,
        metrics.RHO_CLIP_FRACTION,
        metrics.TRACE_CUT_FRACTION,
        metrics.MEAN_TRACE_COEF,
        metrics.GRAD_NORM,
        metrics.LEARNING_RATE,
    ):
        assert math.isfinite(float(rows[-1][key])), key


def _nan_final_obs(i: int, batch: TensorDict) -> None:
    batch["truncated"][0, :] = True
    batch["done"][0, :] = True
    batch["final_critic_obs"][0, :] = math.nan


def test_trainer_raises_after_max_nonfinite_steps_in_a_row(tmp_path):
    model = small_appo(max_nonfinite_steps=3)
    dataset = RandomBatches(poison=_nan_final_obs)
    with pytest.raises(RuntimeError, match="3 non-finite updates in a row"):
        make_trainer(tmp_path, 10).fit(model, train_dataloaders=loader(dataset))
    assert dataset.served == 3


def test_target_actor_follows_actor_with_tau_every_target_update_freq(tmp_path):
    model = small_appo(target_update_freq=2, tau=0.5, schedule="fixed")
    before = [p.clone() for p in model.target_actor.parameters()]
    snapshots = []

    class Snapshot(Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            snapshots.append([p.clone() for p in pl_module.target_actor.parameters()])

    make_trainer(tmp_path, 2, callbacks=[Snapshot()]).fit(
        model, train_dataloaders=loader(RandomBatches())
    )
    # Unchanged after iteration 1, moved halfway to the actor after iteration 2.
    for b, s in zip(before, snapshots[0], strict=True):
        torch.testing.assert_close(s, b)
    for b, s, a in zip(before, snapshots[1], model.actor.parameters(), strict=True):
        torch.testing.assert_close(s, 0.5 * b + 0.5 * a.detach())


def test_resume_restores_lr_normalizers_target_actor_and_skip_count(tmp_path):
    torch.manual_seed(0)
    model = small_appo()
    ckpt = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
    make_trainer(tmp_path, 3, enable_checkpointing=True, callbacks=[ckpt]).fit(
        model, train_dataloaders=loader(RandomBatches(poison=_nan_reward_at_2))
    )
    saved_lr = model.optimizers().optimizer.param_groups[0]["lr"]
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    seen = {}

    class Capture(Callback):
        def on_train_start(self, trainer, pl_module):
            seen["lr"] = pl_module.optimizers().optimizer.param_groups[0]["lr"]
            seen["state"] = {k: v.clone() for k, v in pl_module.state_dict().items()}
            seen["step"] = trainer.global_step

    torch.manual_seed(1)
    resumed = small_appo()
    make_trainer(tmp_path, 4, callbacks=[Capture()]).fit(
        resumed,
        train_dataloaders=loader(RandomBatches()),
        ckpt_path=tmp_path / "ckpt" / "last.ckpt",
    )
    assert seen["step"] == 3
    assert seen["lr"] == saved_lr
    assert seen["state"].keys() == saved.keys()
    for key in ("obs_normalizer.count", "critic_obs_normalizer.mean", "nonfinite_skips"):
        torch.testing.assert_close(seen["state"][key], saved[key])
    for key in saved:
        if key.startswith("target_actor."):
            torch.testing.assert_close(seen["state"][key], saved[key])


class BanditRollouts(IterableDataset):
    """On-policy one-step episodes, reward ``−Σ(a − 1)²``: learning must move the mean to 1."""

    def __init__(self, model: APPO) -> None:
        self.model = model
        self.mean_rewards: list[float] = []

    def __iter__(self):
        g = torch.Generator().manual_seed(0)
        for iteration in range(10_000):
            obs = torch.randn(T, M, DP, generator=g)
            critic_obs = torch.randn(T, M, DC, generator=g)
            with torch.inference_mode():
                out = self.model.actor.act(self.model.obs_normalizer(obs).reshape(-1, DP))
            actions = out["actions"].reshape(T, M, A).clone()
            reward = -(actions - 1.0).pow(2).sum(-1)
            self.mean_rewards.append(reward.mean().item())
            yield rollout_batch(
                {
                    "obs": obs,
                    "critic_obs": critic_obs,
                    "actions": actions,
                    "log_prob": out["log_prob"].reshape(T, M).clone(),
                    "reward": reward,
                    "done": torch.ones(T, M, dtype=torch.bool),
                    "truncated": torch.zeros(T, M, dtype=torch.bool),
                    "final_critic_obs": torch.zeros(T, M, DC),
                },
                {
                    "last_critic_obs": torch.zeros(M, DC),
                    "fresh": torch.ones(M, dtype=torch.bool),
                    "policy_version": torch.full((M,), iteration, dtype=torch.int64),
                },
            )


def test_trainer_improves_return_on_a_one_step_bandit(tmp_path):
    torch.manual_seed(0)
    model = small_appo(
        optimizer=partial(torch.optim.Adam, lr=3e-3), entropy_coef=0.0, num_learning_epochs=4
    )
    dataset = BanditRollouts(model)
    make_trainer(tmp_path, 40).fit(model, train_dataloaders=loader(dataset))
    # A random N(0, 1) policy scores -2 per action dimension; the optimum is 0.
    assert dataset.mean_rewards[0] < -3.0
    assert sum(dataset.mean_rewards[-5:]) / 5 > -1.0


def test_fit_start_rejects_fp16_mixed_precision():
    model = small_appo()
    model.trainer = SimpleNamespace(precision="16-mixed")
    with pytest.raises(ValueError, match="16-mixed"):
        model.on_fit_start()


def test_trainer_trains_under_bf16_mixed_precision(tmp_path):
    model = small_appo()
    trainer = make_trainer(tmp_path, 2, precision="bf16-mixed")
    trainer.fit(model, train_dataloaders=loader(RandomBatches()))
    assert trainer.global_step == 2
    assert int(model.nonfinite_skips) == 0
