from __future__ import annotations

import copy
import io
import math
import pickle
import subprocess
import sys

import onnx
import pytest
import torch
import torch.nn.functional as F

from unilab_lit.nn.policies import ELU, GaussianActor, MLPCritic, PolicySpec, mlp

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


def _rsl_rl_model(obs_size: int, output_size: int, activation: str, distribution: dict | None):
    from rsl_rl.models import MLPModel
    from tensordict import TensorDict

    obs = TensorDict({"policy": torch.zeros(1, obs_size)}, batch_size=[1])
    return MLPModel(
        obs,
        {"actor": ["policy"]},
        "actor",
        output_size,
        hidden_dims=[16, 8],
        activation=activation,
        obs_normalization=False,
        distribution_cfg=distribution,
    )


@pytest.mark.parametrize("activation", ["elu", "crelu", "lrelu", "swish", "mish"])
@pytest.mark.parametrize("std_type", ["scalar", "log"])
def test_actor_matches_rsl_rl_mlp_model_layout_init_and_outputs(activation, std_type):
    torch.manual_seed(3)
    theirs = _rsl_rl_model(
        OBS,
        ACT,
        activation,
        {"class_name": "GaussianDistribution", "init_std": 0.7, "std_type": std_type},
    )
    torch.manual_seed(3)
    ours = GaussianActor(OBS, ACT, [16, 8], activation, init_std=0.7, std_type=std_type)
    their_state = {
        k: v for k, v in theirs.state_dict().items() if k.startswith(("mlp.", "distribution."))
    }
    our_state = ours.model.state_dict()
    assert list(our_state) == list(their_state)
    for key, value in our_state.items():
        assert torch.equal(value, their_state[key]), key
    obs = torch.randn(9, OBS)
    theirs.distribution.update(theirs.mlp(obs))
    # Equal but for our ELU's exp(x) - 1 where ATen's ELU takes expm1(x) (see policies.ELU).
    torch.testing.assert_close(ours(obs), theirs.mlp(obs), rtol=0.0, atol=1e-6)
    assert torch.equal(ours.std().expand(9, ACT), theirs.distribution.std)


def test_critic_matches_rsl_rl_mlp_model_layout_init_and_outputs():
    torch.manual_seed(4)
    theirs = _rsl_rl_model(OBS, 1, "elu", None)
    torch.manual_seed(4)
    ours = MLPCritic(OBS, [16, 8], "elu")
    their_state = {k: v for k, v in theirs.state_dict().items() if k.startswith("mlp.")}
    assert list(ours.model.state_dict()) == list(their_state)
    obs = torch.randn(9, OBS)
    torch.testing.assert_close(ours(obs), theirs.mlp(obs).squeeze(-1), rtol=0.0, atol=1e-6)


def test_elu_matches_aten_elu_in_values_and_gradients_on_the_cpu():
    # Over _ELU_BY_EXP_MIN_NUMEL, so both of ELU's own paths (autograd, no grad) are taken.
    x = torch.cat([torch.randn(16384) * 3.0, torch.tensor([0.0, -0.0, 1e-9, -1e-9, -80.0, 80.0])])
    x = torch.cat([x, torch.tensor([float("inf"), float("-inf"), float("nan")])])
    with torch.no_grad():
        torch.testing.assert_close(ELU()(x), F.elu(x), rtol=1e-6, atol=1e-7, equal_nan=True)
    ours_x, aten_x = x.clone().requires_grad_(), x.clone().requires_grad_()
    ours, aten = ELU()(ours_x), F.elu(aten_x)
    torch.testing.assert_close(ours, aten, rtol=1e-6, atol=1e-7, equal_nan=True)
    grad = torch.randn_like(x)
    ours.backward(grad)
    aten.backward(grad)
    # At the NaN input ATen's gradient is the incoming one; ours is NaN, as the output is.
    torch.testing.assert_close(ours_x.grad[:-1], aten_x.grad[:-1], rtol=1e-6, atol=1e-7)
    assert ours_x.grad[-1].isnan()


def test_elu_is_aten_elu_in_exported_graphs():
    net = mlp(OBS, ACT, [8], "elu")
    # A dynamic batch, as the exporter's: ELU's size test must not guard it.
    batch = {0: torch.export.Dim("batch")}
    program = torch.export.export(net, (torch.randn(2, OBS),), dynamic_shapes=(batch,))
    assert torch.ops.aten.elu.default in {node.target for node in program.graph.nodes}
    buffer = io.BytesIO()
    torch.onnx.export(net, (torch.randn(2, OBS),), buffer, dynamo=False)
    assert "Elu" in {node.op_type for node in onnx.load_from_string(buffer.getvalue()).graph.node}


def test_act_log_prob_is_bit_identical_to_torch_normal_log_prob():
    actor = _actor(init_std=0.4, std_type="log")
    obs = torch.randn(64, OBS)
    with torch.inference_mode():
        out = actor.act(obs)
        normal = torch.distributions.Normal(actor(obs), actor.std().expand(64, ACT))
        assert torch.equal(out["log_prob"], normal.log_prob(out["actions"]).sum(-1))


def test_act_samples_from_the_actor_mean_and_std():
    actor = _actor(init_std=0.3)
    obs = torch.randn(1, OBS).expand(200_000, OBS)
    with torch.inference_mode():
        actions = actor.act(obs)["actions"]
        mean = actor(obs[:1])[0]
    torch.testing.assert_close(actions.mean(0), mean, atol=0.005, rtol=0.0)
    torch.testing.assert_close(actions.std(0), torch.full((ACT,), 0.3), atol=0.005, rtol=0.0)


def test_collector_imports_neither_rsl_rl_nor_tensordict():
    # Both pull in torch._dynamo: seconds of collector start-up for nothing it uses.
    code = (
        "import sys, unilab_lit.collector._entry, unilab_lit.collector.loop, "
        "unilab_lit.collector.writers, unilab_lit.nn.policies; "
        "print(sorted(m for m in ('rsl_rl', 'tensordict', 'lightning') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
