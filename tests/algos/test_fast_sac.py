from __future__ import annotations

import math
import re
from functools import partial

import pytest
import torch
from lightning.pytorch import Callback
from lightning.pytorch.callbacks import ModelCheckpoint
from offpolicy_batches import (
    DC,
    DP,
    SMALL,
    A,
    BanditBatches,
    RandomBatches,
    build,
    loader,
    make_trainer,
)
from tensordict import TensorDict

from unilab_lit.algos.c51 import expected_value
from unilab_lit.algos.fast_sac import FastSAC
from unilab_lit.algos.optimizers import FastSACAdamW
from unilab_lit.nn.offpolicy_nets import SquashedGaussianActor
from unilab_lit.telemetry import metrics

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _model(**kwargs) -> FastSAC:
    return build(FastSAC, **{**SMALL, "updates_per_step": 1, "policy_frequency": 1, **kwargs})


def _hand_built_batch() -> TensorDict:
    # Rows: continuing, truncated (time limit), truncated with done = terminated | truncated,
    # terminated.
    g = torch.Generator().manual_seed(3)
    return TensorDict(
        {
            "obs": torch.randn(4, DP, generator=g),
            "next_obs": torch.randn(4, DP, generator=g),
            "actions": torch.rand(4, A, generator=g) * 2 - 1,
            "reward": torch.tensor([1.0, -2.0, 0.5, 3.0]),
            "done": torch.tensor([False, False, True, True]),
            "truncated": torch.tensor([False, True, True, False]),
            "critic_obs": torch.randn(4, DC, generator=g),
            "next_critic_obs": torch.randn(4, DC, generator=g),
        },
        batch_size=[4],
    )


@pytest.mark.parametrize("use_cdq", [False, True])
def test_critic_target_is_entropy_adjusted_and_bootstraps_except_on_terminated_rows(use_cdq):
    torch.manual_seed(0)
    # |r| < (1 − γ)·v_max: no shifted atom leaves the support, so projection keeps the mean.
    model = _model(gamma=0.9, v_min=-50.0, v_max=50.0, init_temperature=0.5, use_cdq=use_cdq)
    with torch.no_grad():  # peaked, distinct target distributions per twin; a spread policy
        for head in model.critic_target.heads:
            head[-1].bias.normal_(0.0, 3.0)
        model.actor.net[-1].bias.normal_(0.0, 1.0)
    data = model._prepare(_hand_built_batch())
    discount = torch.tensor([0.9, 0.9, 0.9, 0.0])
    for i in range(4):
        mb = {k: v[i : i + 1] for k, v in data.items()}
        torch.manual_seed(10 + i)
        with torch.no_grad():
            next_actions, next_log_prob, _ = model.actor.sample(mb["next_obs"])
            probs = torch.softmax(model.critic_target(mb["next_critic_obs"], next_actions), -1)
            twins = expected_value(probs, model.support)[:, 0]
        soft_q = (twins.min() if use_cdq else twins.mean()) - 0.5 * next_log_prob[0]
        expected = mb["reward"][0] + discount[i] * soft_q
        torch.manual_seed(10 + i)
        _, terms = model._critic_loss(mb)
        assert terms[metrics.Q_TARGET_MEAN].item() == pytest.approx(expected.item(), abs=1e-4)
        if i == 3:  # terminated: the reward alone, no entropy bonus
            assert terms[metrics.Q_TARGET_MEAN].item() == pytest.approx(3.0, abs=1e-5)


@pytest.mark.parametrize(("target_entropy_per_dim", "direction"), [(5.0, 1.0), (-20.0, -1.0)])
def test_temperature_moves_toward_the_target_entropy(tmp_path, target_entropy_per_dim, direction):
    torch.manual_seed(0)
    model = _model(
        target_entropy_per_dim=target_entropy_per_dim,
        temperature_optimizer=partial(FastSACAdamW, lr=1e-2),
    )
    temperatures = [model.temperature.item()]

    class Record(Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            temperatures.append(pl_module.temperature.item())

    make_trainer(tmp_path, 4, callbacks=[Record()]).fit(
        model, train_dataloaders=loader(RandomBatches(16))
    )
    # The initial policy's entropy is about -0.3: far below +10, far above -40.
    steps = torch.tensor(temperatures).diff()
    assert (steps * direction > 0).all(), temperatures
    assert model.target_entropy == A * target_entropy_per_dim


def test_temperature_loss_gradient_is_alpha_times_entropy_error():
    model = _model(init_temperature=0.2, target_entropy_per_dim=-1.0)
    loss = model._temperature_loss(torch.tensor(1.5))
    loss.backward()
    # d/dlogα of α·(H − H̄) = α·(H − H̄) = 0.2·(1.5 + 2).
    assert model.log_temperature.grad.item() == pytest.approx(0.2 * 3.5)


def test_collector_policy_is_the_stochastic_actor_with_log_probs():
    model = _model()
    built = model.collector_policy_spec().build()
    assert isinstance(built, SquashedGaussianActor)
    built.load_state_dict(model.collector_policy().state_dict())
    obs = torch.randn(5, DP)
    torch.testing.assert_close(built(obs), model.actor(obs))
    with torch.inference_mode():
        out = built.act(obs)
    assert out["actions"].shape == (5, A) and out["log_prob"].shape == (5,)
    assert model.collector_policy() is model.actor


def test_trainer_learns_the_best_action_of_a_one_step_bandit(tmp_path):
    torch.manual_seed(0)
    model = _model(
        v_min=-6.0,
        v_max=1.0,
        updates_per_step=4,
        policy_frequency=2,
        critic_optimizer=partial(FastSACAdamW, lr=1e-2, weight_decay=0.0),
        actor_optimizer=partial(FastSACAdamW, lr=1e-3, weight_decay=0.0),
    )
    dataset = BanditBatches(model, 128)
    make_trainer(tmp_path, 40).fit(model, train_dataloaders=loader(dataset))
    with torch.no_grad():
        actions = model.actor(model.obs_normalizer(torch.randn(256, DP)))
    # Reward −Σ(a − 0.5)²: uniform random actions score −1.17; the optimum is 0.
    assert dataset.mean_rewards[0] < -0.4
    assert -(actions - 0.5).pow(2).sum(-1).mean().item() > -0.1
    assert sum(dataset.mean_rewards[-5:]) / 5 > -0.15


def test_resume_restores_temperature_and_its_optimizer(tmp_path):
    torch.manual_seed(0)
    model = _model()
    ckpt = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
    make_trainer(tmp_path, 3, enable_checkpointing=True, callbacks=[ckpt]).fit(
        model, train_dataloaders=loader(RandomBatches(16))
    )
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    seen = {}

    class Capture(Callback):
        def on_train_start(self, trainer, pl_module):
            seen["state"] = {k: v.clone() for k, v in pl_module.state_dict().items()}
            temperature_opt = pl_module.optimizers()[2].optimizer
            seen["exp_avg"] = temperature_opt.state[pl_module.log_temperature]["exp_avg"].clone()
            seen["step"] = int(temperature_opt.state[pl_module.log_temperature]["step"])

    saved_exp_avg = model.optimizers()[2].optimizer.state[model.log_temperature]["exp_avg"].clone()
    torch.manual_seed(1)
    resumed = _model()
    make_trainer(tmp_path, 4, callbacks=[Capture()]).fit(
        resumed,
        train_dataloaders=loader(RandomBatches(16)),
        ckpt_path=tmp_path / "ckpt" / "last.ckpt",
    )
    assert seen["state"].keys() == saved.keys()
    for key, value in saved.items():
        torch.testing.assert_close(seen["state"][key], value, msg=key)
    assert saved["log_temperature"].item() != pytest.approx(math.log(0.01))
    assert seen["step"] == 3
    torch.testing.assert_close(seen["exp_avg"], saved_exp_avg)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("init_temperature", 0.0),
        ("target_entropy_per_dim", math.inf),
    ],
)
def test_constructor_rejects_out_of_range_argument_naming_it(name, value):
    with pytest.raises(ValueError, match=rf"^{name} must be .*got {re.escape(repr(value))}$"):
        _model(**{name: value})


def test_constructor_rejects_inverted_log_std_bounds():
    with pytest.raises(ValueError, match="log_std_min must be < log_std_max=-1.0, got 1.0"):
        _model(log_std_min=1.0, log_std_max=-1.0)
