"""What every algorithm gets from RLAlgorithm: the inference policy."""

from __future__ import annotations

import pytest
import torch
from offpolicy_batches import DC, DP, SMALL, A, build

from unilab_lit.algos.appo import APPO
from unilab_lit.algos.base import RLAlgorithm
from unilab_lit.algos.fast_sac import FastSAC
from unilab_lit.algos.fast_td3 import FastTD3
from unilab_lit.nn.normalization import normalize


def _appo() -> APPO:
    return APPO(DP, DC, A, actor_hidden_dims=[16], critic_hidden_dims=[16])


def _fast_td3() -> FastTD3:
    return build(FastTD3, **SMALL)


def _fast_sac() -> FastSAC:
    return build(FastSAC, **SMALL)


ALGOS = [_appo, _fast_td3, _fast_sac]


def _trained_statistics(model: RLAlgorithm) -> None:
    # Off-centre statistics and moved weights, so neither the normaliser nor the actor is a no-op.
    torch.manual_seed(0)
    model.obs_normalizer.update(torch.randn(64, DP) * 3.0 + 5.0)
    with torch.no_grad():
        for p in model.collector_policy().parameters():
            p.add_(0.3 * torch.randn_like(p))


@pytest.mark.parametrize("make", ALGOS)
def test_inference_policy_equals_the_collectors_deterministic_action_on_raw_obs(make):
    model = make()
    _trained_statistics(model)
    # The collector's side: the policy rebuilt from its spec with the published weights,
    # acting on observations normalised with the published statistics.
    collector = model.collector_policy_spec().build()
    collector.load_state_dict(model.collector_policy().state_dict())
    norm = model.obs_normalizer
    raw = torch.randn(32, DP) * 3.0 + 5.0
    expected = collector(normalize(raw, norm.mean, norm.var, norm.eps, norm.clip))
    with torch.no_grad():
        torch.testing.assert_close(model.inference_policy()(raw), expected)


@pytest.mark.parametrize("make", ALGOS)
def test_inference_policy_exports_without_data_dependent_branches(make):
    model = make()
    _trained_statistics(model)
    policy = model.inference_policy().eval()
    example, other = torch.randn(4, DP), torch.randn(9, DP) * 30.0  # the other one hits the clip
    with torch.no_grad():
        exported = torch.export.export(
            policy, (example,), dynamic_shapes=({0: torch.export.Dim("batch")},)
        )
        torch.testing.assert_close(exported.module()(other), policy(other))
