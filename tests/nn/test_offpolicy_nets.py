from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.distributions import Independent, Normal, TransformedDistribution
from torch.distributions.transforms import TanhTransform

from unilab_lit.nn.offpolicy_nets import (
    DeterministicActor,
    SquashedGaussianActor,
    TwinDistributionalCritic,
    mlp,
    squashed_gaussian_log_prob,
)

DP, DC, A, N = 6, 7, 3, 16


def test_squashed_log_prob_matches_torch_tanh_transformed_normal():
    g = torch.Generator().manual_seed(0)
    mean = torch.randn(256, A, generator=g, dtype=torch.float64) * 2.0
    log_std = torch.rand(256, A, generator=g, dtype=torch.float64) * 3.0 - 2.5
    pre_tanh = mean + log_std.exp() * torch.randn(256, A, generator=g, dtype=torch.float64)
    reference = TransformedDistribution(
        Independent(Normal(mean, log_std.exp()), 1), [TanhTransform()]
    )
    actions = torch.tanh(pre_tanh)
    torch.testing.assert_close(
        squashed_gaussian_log_prob(pre_tanh, mean, log_std), reference.log_prob(actions)
    )


def test_squashed_log_prob_jacobian_term_matches_a_finite_difference():
    # log π(a) = log N(u) − log |da/du|; check da/du numerically for one dimension.
    u = torch.tensor([[-2.0], [0.3], [1.7]], dtype=torch.float64)
    zeros = torch.zeros_like(u)
    eps = 1e-6
    numeric = (torch.tanh(u + eps) - torch.tanh(u - eps)) / (2 * eps)
    normal = Normal(zeros, torch.ones_like(u)).log_prob(u).squeeze(-1)
    expected = normal - numeric.log().squeeze(-1)
    torch.testing.assert_close(squashed_gaussian_log_prob(u, zeros, zeros), expected)


def test_squashed_log_prob_stays_finite_where_tanh_saturates():
    u = torch.tensor([[25.0, -25.0]])
    log_prob = squashed_gaussian_log_prob(u, torch.zeros(1, 2), torch.zeros(1, 2))
    assert torch.isfinite(log_prob).all()


def test_gaussian_actor_act_returns_the_log_prob_of_the_returned_action():
    torch.manual_seed(0)
    actor = SquashedGaussianActor(DP, A, hidden_dims=(32, 32))
    nn.init.normal_(actor.net[-1].weight, 0.0, 0.5)
    obs = torch.randn(N, DP)
    torch.manual_seed(1)
    out = actor.act(obs)
    torch.manual_seed(1)
    actions, log_prob, log_std = actor.sample(obs)
    assert out["actions"].shape == (N, A) and out["log_prob"].shape == (N,)
    torch.testing.assert_close(out["actions"], actions)
    torch.testing.assert_close(out["log_prob"], log_prob)
    mean, _ = actor.distribution_params(obs)
    reference = TransformedDistribution(
        Independent(Normal(mean, log_std.exp()), 1), [TanhTransform()]
    )
    # The reference inverts tanh in float32, which loses digits near saturation.
    torch.testing.assert_close(out["log_prob"], reference.log_prob(actions), atol=1e-3, rtol=1e-3)
    assert actions.abs().max() < 1.0
    assert ((log_std >= -5.0) & (log_std <= 2.0)).all()


def test_gaussian_actor_starts_with_zero_mean_and_mid_range_log_std():
    actor = SquashedGaussianActor(DP, A, hidden_dims=(8,), log_std_min=-4.0, log_std_max=0.0)
    mean, log_std = actor.distribution_params(torch.randn(N, DP))
    assert torch.equal(mean, torch.zeros(N, A))
    torch.testing.assert_close(log_std, torch.full((N, A), -2.0))
    assert torch.equal(actor(torch.randn(N, DP)), torch.zeros(N, A))


def test_deterministic_actor_act_adds_bounded_per_env_noise_around_forward():
    torch.manual_seed(0)
    actor = DeterministicActor(DP, A, hidden_dims=(32,), noise_std_min=0.1, noise_std_max=0.3)
    obs = torch.randn(N, DP)
    out = actor.act(obs)["actions"]
    assert out.shape == (N, A)
    assert out.abs().max() <= 1.0
    assert not torch.equal(out, actor(obs))
    assert actor.noise_scales.shape == (N, 1)
    assert ((actor.noise_scales >= 0.1) & (actor.noise_scales <= 0.3)).all()
    # Scale 0 everywhere: act is the deterministic action.
    actor.noise_scales = torch.zeros(N, 1)
    torch.testing.assert_close(actor.act(obs)["actions"], actor(obs))


def test_deterministic_actor_resamples_noise_scales_only_for_finished_envs():
    torch.manual_seed(0)
    actor = DeterministicActor(DP, A, hidden_dims=(32,))
    actor.act(torch.randn(N, DP))
    before = actor.noise_scales.clone()
    done = torch.zeros(N, dtype=torch.bool)
    done[[2, 5, 11]] = True
    actor.reset_episodes(done)
    after = actor.noise_scales
    assert torch.equal(after[~done], before[~done])
    assert (after[done] != before[done]).all()
    assert ((after >= actor.noise_std_min) & (after <= actor.noise_std_max)).all()


def test_deterministic_actor_scales_created_under_inference_mode_can_be_reset_outside_it():
    actor = DeterministicActor(DP, A, hidden_dims=(8,))
    with torch.inference_mode():
        actor.act(torch.randn(N, DP))
    actor.reset_episodes(torch.ones(N, dtype=torch.bool))
    assert actor.noise_scales.shape == (N, 1)


def test_deterministic_actor_rejects_a_different_number_of_envs():
    actor = DeterministicActor(DP, A, hidden_dims=(8,))
    actor.act(torch.randn(N, DP))
    with pytest.raises(ValueError, match=f"got {N + 1} envs.*drawn for {N}"):
        actor.act(torch.randn(N + 1, DP))


def test_deterministic_actor_noise_scales_are_not_in_the_state_dict():
    actor = DeterministicActor(DP, A, hidden_dims=(8,))
    keys = set(actor.state_dict())
    actor.act(torch.randn(N, DP))
    assert set(actor.state_dict()) == keys
    assert not any("noise" in k for k in keys)


def test_twin_critic_outputs_independent_logits_per_head():
    critic = TwinDistributionalCritic(DC, A, num_atoms=11, hidden_dims=(16, 16), layer_norm=True)
    logits = critic(torch.randn(N, DC), torch.rand(N, A) * 2 - 1)
    assert logits.shape == (2, N, 11)
    assert not torch.equal(logits[0], logits[1])


def test_mlp_puts_layer_norm_after_each_hidden_linear_when_asked():
    net = mlp(4, 2, (8, 8), "swish", layer_norm=True)
    kinds = [type(m).__name__ for m in net]
    assert kinds == ["Linear", "LayerNorm", "SiLU", "Linear", "LayerNorm", "SiLU", "Linear"]


@pytest.mark.parametrize(
    ("factory", "kwargs", "match"),
    [
        (DeterministicActor, {"noise_std_min": 0.5, "noise_std_max": 0.1}, "noise_std_min"),
        (DeterministicActor, {"init_scale": 0.0}, "init_scale"),
        (SquashedGaussianActor, {"log_std_min": 1.0, "log_std_max": 1.0}, "log_std_min"),
        (DeterministicActor, {"activation": "nope"}, "activation"),
        (SquashedGaussianActor, {"hidden_dims": ()}, "hidden_dims"),
    ],
)
def test_networks_reject_out_of_range_arguments_naming_them(factory, kwargs, match):
    with pytest.raises(ValueError, match=match):
        factory(DP, A, **kwargs)


def test_twin_critic_rejects_zero_atoms():
    with pytest.raises(ValueError, match="num_atoms must be >= 1, got 0"):
        TwinDistributionalCritic(DC, A, num_atoms=0)
