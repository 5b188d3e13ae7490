from __future__ import annotations

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
from unilab_lit.algos.fast_td3 import FastTD3
from unilab_lit.algos.optimizers import FastTD3AdamW
from unilab_lit.ipc import NOT_PUBLISHED, SharedWeights, flat_size
from unilab_lit.nn.offpolicy_nets import DeterministicActor
from unilab_lit.telemetry import metrics

N_ENVS = 6


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _model(**kwargs) -> FastTD3:
    return build(FastTD3, **{**SMALL, "updates_per_step": 1, **kwargs})


def _hand_built_batch() -> TensorDict:
    # Rows: continuing, truncated (time limit), truncated with done = terminated | truncated,
    # terminated. next_obs of the truncated rows is the true final observation.
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


@pytest.mark.parametrize("use_cdq", [True, False])
def test_critic_target_bootstraps_from_next_obs_except_on_terminated_rows(use_cdq):
    torch.manual_seed(0)
    # |r| < (1 − γ)·v_max: no shifted atom leaves the support, so projection keeps the mean.
    model = _model(policy_noise=0.0, gamma=0.9, v_min=-50.0, v_max=50.0, use_cdq=use_cdq)
    with torch.no_grad():  # peaked, distinct target distributions per twin
        for head in model.critic_target.heads:
            head[-1].bias.normal_(0.0, 3.0)
    data = model._prepare(_hand_built_batch())
    with torch.no_grad():
        next_actions = model.actor(data["next_obs"])
        probs = torch.softmax(model.critic_target(data["next_critic_obs"], next_actions), -1)
        twins = expected_value(probs, model.support)
    next_q = twins.min(0).values if use_cdq else twins
    expected = data["reward"] + torch.tensor([0.9, 0.9, 0.9, 0.0]) * next_q
    for i in range(4):
        _, terms = model._critic_loss(data[i : i + 1])
        assert terms[metrics.Q_TARGET_MEAN].item() == pytest.approx(
            expected[..., i].mean().item(), abs=1e-4
        )
    # The terminated row's target is the reward alone.
    _, terms = model._critic_loss(data[3:])
    assert terms[metrics.Q_TARGET_MAX].item() == pytest.approx(3.0, abs=1e-5)


def test_target_policy_smoothing_noise_is_clipped():
    torch.manual_seed(0)
    model = _model(policy_noise=100.0, noise_clip=0.05)
    data = model._prepare(_hand_built_batch())
    seen = []
    forward = model.critic_target.forward

    def record(obs, actions):
        seen.append(actions)
        return forward(obs, actions)

    model.critic_target.forward = record
    model._critic_loss(data)
    clean = model.actor(data["next_obs"]).detach()
    deviation = (seen[0] - clean).abs()
    assert deviation.max() <= 0.05 + 1e-6
    assert deviation.min() > 0.04  # std 100 noise is clipped at ±0.05 almost always


def test_collector_policy_spec_rebuilds_the_published_actor():
    model = _model()
    built = model.collector_policy_spec().build()
    assert isinstance(built, DeterministicActor)
    built.load_state_dict(model.collector_policy().state_dict())
    obs = torch.randn(N_ENVS, DP)
    torch.testing.assert_close(built(obs), model.actor(obs))
    assert model.collector_policy() is model.actor


def test_publishing_weights_leaves_the_collector_noise_scales_alone():
    torch.manual_seed(0)
    model = _model()
    collector = model.collector_policy_spec().build().eval()
    obs = torch.randn(N_ENVS, DP)
    with torch.inference_mode():
        collector.act(obs)
        collector.reset_episodes(torch.tensor([True, False, True, False, False, False]))
    scales = collector.noise_scales.clone()
    assert flat_size(collector) == flat_size(model.collector_policy())
    with torch.no_grad():
        for p in model.actor.parameters():
            p.add_(0.1)
    weights = SharedWeights(flat_size(model.collector_policy()))
    try:
        version = weights.publish_module(model.collector_policy(), version=1)
        assert weights.load_module_if_newer(collector, NOT_PUBLISHED) == version
    finally:
        weights.unlink()
    assert torch.equal(collector.noise_scales, scales)
    torch.testing.assert_close(collector(obs), model.actor(obs))


def test_critic_target_follows_the_critic_by_polyak_after_each_update(tmp_path):
    torch.manual_seed(0)
    model = _model(tau=0.3)
    before = [p.clone() for p in model.critic_target.parameters()]
    make_trainer(tmp_path, 1).fit(model, train_dataloaders=loader(RandomBatches(16)))
    for b, t, c in zip(
        before, model.critic_target.parameters(), model.critic.parameters(), strict=True
    ):
        torch.testing.assert_close(t, 0.7 * b + 0.3 * c.detach())
    assert not any(p.requires_grad for p in model.critic_target.parameters())


def test_trainer_learns_the_best_action_of_a_one_step_bandit(tmp_path):
    torch.manual_seed(0)
    model = _model(
        v_min=-6.0,
        v_max=1.0,
        updates_per_step=4,
        policy_frequency=2,
        critic_optimizer=partial(FastTD3AdamW, lr=1e-2, weight_decay=0.0),
        actor_optimizer=partial(FastTD3AdamW, lr=1e-3, weight_decay=0.0),
        noise_std_min=0.2,
        noise_std_max=0.5,
    )
    probe = torch.randn(256, DP)

    def deterministic_reward() -> float:
        with torch.no_grad():
            actions = model.actor(model.obs_normalizer(probe))
        return -(actions - 0.5).pow(2).sum(-1).mean().item()

    # Reward −Σ(a − 0.5)²: uniform random actions score −1.17, the near-zero initial actor −0.5.
    assert deterministic_reward() < -0.4
    make_trainer(tmp_path, 40).fit(model, train_dataloaders=loader(BanditBatches(model, 128)))
    assert deterministic_reward() > -0.15


def _optimizer_steps(model: FastTD3) -> list[int]:
    """AdamW step counts of the critic and the actor."""
    critic_opt, actor_opt = (opt.optimizer for opt in model.optimizers())
    return [
        int(critic_opt.state[model.critic.heads[0][0].weight]["step"]),
        int(actor_opt.state[model.actor.net[0].weight]["step"]),
    ]


@pytest.mark.parametrize(
    "compile_losses", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["eager", "compiled"]
)
def test_resume_restores_targets_normalizers_optimizers_and_skip_count(tmp_path, compile_losses):
    torch.manual_seed(0)
    model = _model(updates_per_step=2, policy_frequency=2, compile_losses=compile_losses)

    def nan_at_1(i, batch):
        if i == 1:
            batch["obs"][0, 0] = float("nan")

    ckpt = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
    make_trainer(tmp_path, 3, enable_checkpointing=True, callbacks=[ckpt]).fit(
        model, train_dataloaders=loader(RandomBatches(16, nan_at_1))
    )
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    saved_steps = _optimizer_steps(model)
    seen = {}

    class Capture(Callback):
        def on_train_start(self, trainer, pl_module):
            seen["step"] = trainer.global_step
            seen["state"] = {k: v.clone() for k, v in pl_module.state_dict().items()}
            seen["opt_steps"] = _optimizer_steps(pl_module)

    torch.manual_seed(1)
    resumed = _model(updates_per_step=2, policy_frequency=2, compile_losses=compile_losses)
    make_trainer(tmp_path, 4, callbacks=[Capture()]).fit(
        resumed,
        train_dataloaders=loader(RandomBatches(16)),
        ckpt_path=tmp_path / "ckpt" / "last.ckpt",
    )
    assert seen["step"] == 3
    assert seen["state"].keys() == saved.keys()
    for key, value in saved.items():
        torch.testing.assert_close(seen["state"][key], value, msg=key)
    assert int(saved["nonfinite_skips"]) == 1
    # 2 finite items x 2 critic updates; the actor on every second one.
    assert seen["opt_steps"] == saved_steps == [4, 2]


@pytest.mark.parametrize(
    ("name", "value"),
    [("policy_noise", -0.1), ("noise_clip", -1.0)],
)
def test_constructor_rejects_out_of_range_argument_naming_it(name, value):
    with pytest.raises(ValueError, match=rf"^{name} must be .*got {re.escape(repr(value))}$"):
        _model(**{name: value})


def test_constructor_rejects_inverted_exploration_noise_range():
    with pytest.raises(ValueError, match="noise_std_min=0.5, noise_std_max=0.1"):
        _model(noise_std_min=0.5, noise_std_max=0.1)
