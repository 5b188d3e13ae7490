from __future__ import annotations

import copy
import math
import pickle

import pytest
import torch

from unilab_lit.nn.policies import GaussianActor, MLPCritic, PolicySpec

OBS, ACT = 5, 3


def _actor(**kwargs) -> GaussianActor:
    torch.manual_seed(0)
    return GaussianActor(OBS, ACT, hidden_dims=[16, 16], **kwargs)


def test_act_returns_actions_and_log_prob_of_those_actions():
    actor = _actor(init_std=0.5)
    obs = torch.randn(7, OBS)
    with torch.inference_mode():
        out = actor.act(obs)
    assert out["actions"].shape == (7, ACT)
    assert out["log_prob"].shape == (7,)
    mean = actor(obs).detach()
    expected = torch.distributions.Normal(mean, 0.5).log_prob(out["actions"]).sum(-1)
    torch.testing.assert_close(out["log_prob"], expected)


@pytest.mark.parametrize("std_type", ["scalar", "log"])
def test_std_equals_init_std_for_both_parameterisations(std_type):
    actor = _actor(init_std=0.3, std_type=std_type)
    torch.testing.assert_close(actor.std(), torch.full((ACT,), 0.3))


def test_entropy_matches_closed_form_gaussian_entropy():
    actor = _actor(init_std=2.0)
    entropy = actor.distribution(torch.randn(4, OBS)).entropy().sum(-1)
    expected = ACT * (0.5 * math.log(2 * math.pi * math.e) + math.log(2.0))
    torch.testing.assert_close(entropy, torch.full((4,), expected))


def test_distribution_accepts_time_major_batches():
    actor = _actor()
    dist = actor.distribution(torch.randn(6, 4, OBS))
    assert dist.log_prob(torch.zeros(6, 4, ACT)).sum(-1).shape == (6, 4)


def test_deepcopy_after_a_differentiable_forward_keeps_copies_independent():
    actor = _actor()
    # A cached non-leaf Normal would make deepcopy fail here; the actor keeps none.
    loss = actor.distribution(torch.randn(3, OBS)).log_prob(torch.zeros(3, ACT)).sum()
    target = copy.deepcopy(actor)
    loss.backward()
    with torch.no_grad():
        actor.model.distribution.std_param.add_(1.0)
    assert not torch.equal(actor.std(), target.std())


def test_spec_build_gives_identical_state_dict_layout_after_pickling():
    kwargs = {"obs_size": OBS, "action_size": ACT, "hidden_dims": [16, 16], "std_type": "log"}
    spec = PolicySpec("unilab_lit.nn.policies:GaussianActor", kwargs)
    learner = GaussianActor(**kwargs)
    built = pickle.loads(pickle.dumps(spec)).build()
    built.load_state_dict(learner.state_dict())
    obs = torch.randn(2, OBS)
    torch.testing.assert_close(built(obs), learner(obs))
    assert list(built.state_dict()) == list(learner.state_dict())


def test_spec_build_rejects_target_without_colon():
    with pytest.raises(ValueError, match="package.module:Name"):
        PolicySpec("unilab_lit.nn.policies.GaussianActor").build()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"obs_size": 0}, "obs_size"),
        ({"action_size": 0}, "action_size"),
        ({"hidden_dims": []}, "hidden_dims"),
        ({"activation": "softmax"}, "activation"),
        ({"init_std": 0.0}, "init_std"),
        ({"std_type": "exp"}, "std_type"),
    ],
)
def test_actor_rejects_invalid_argument_naming_it(kwargs, match):
    args = {"obs_size": OBS, "action_size": ACT, **kwargs}
    with pytest.raises(ValueError, match=match):
        GaussianActor(**args)


def test_critic_outputs_one_value_per_observation():
    critic = MLPCritic(OBS, hidden_dims=[8])
    assert critic(torch.randn(6, 4, OBS)).shape == (6, 4)
