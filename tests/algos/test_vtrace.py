from __future__ import annotations

import pytest
import torch

from unilab_lit.algos.vtrace import vtrace

GAMMA = 0.9


def _reference(
    log_rhos, rewards, values, bootstrap, terminated, truncated, final_values, rho_bar, c_bar,
    lam=1.0,
):  # fmt: skip
    """Paper eq. 1 written as the explicit n-step sum, element by element, in float64.

    ``lam`` < 1 is rlax's λ-V-trace: every trace coefficient is ``λ·min(c̄, ρ)`` and the
    advantage bootstraps from ``λ·v_{s+1} + (1 − λ)·V(x_{s+1})``.

    Timeouts: the reward of a truncated step gets γ·V(final_obs); both kinds of done zero the
    discount, which cuts the product of c's and the bootstrap across the episode boundary.
    """
    T, M = rewards.shape
    rho = log_rhos.exp().tolist()
    vs = [[0.0] * M for _ in range(T)]
    adv = [[0.0] * M for _ in range(T)]

    def value(t, m):
        return bootstrap[m].item() if t == T else values[t, m].item()

    def discount(t, m):
        return 0.0 if terminated[t, m] or truncated[t, m] else GAMMA

    def reward(t, m):
        r = rewards[t, m].item()
        return r + GAMMA * final_values[t, m].item() if truncated[t, m] else r

    def delta(t, m):
        return min(rho_bar, rho[t][m]) * (
            reward(t, m) + discount(t, m) * value(t + 1, m) - value(t, m)
        )

    for m in range(M):
        for s in range(T):
            total = value(s, m)
            for t in range(s, T):
                weight = 1.0
                for i in range(s, t):
                    weight *= discount(i, m) * lam * min(c_bar, rho[i][m])
                total += weight * delta(t, m)
            vs[s][m] = total
        for s in range(T):
            v_next = lam * vs[s + 1][m] + (1 - lam) * value(s + 1, m) if s + 1 < T else value(T, m)
            adv[s][m] = min(rho_bar, rho[s][m]) * (
                reward(s, m) + discount(s, m) * v_next - value(s, m)
            )
    return torch.tensor(vs, dtype=torch.float64), torch.tensor(adv, dtype=torch.float64)


def _random_inputs(T, M, seed):
    g = torch.Generator().manual_seed(seed)
    u = torch.rand(T, M, generator=g)
    terminated = u < 0.1
    truncated = (u >= 0.1) & (u < 0.2)
    return {
        "log_rhos": torch.randn(T, M, generator=g, dtype=torch.float64) * 0.7,
        "rewards": torch.randn(T, M, generator=g, dtype=torch.float64),
        "values": torch.randn(T, M, generator=g, dtype=torch.float64),
        "bootstrap": torch.randn(M, generator=g, dtype=torch.float64),
        "terminated": terminated,
        "truncated": truncated,
        "final_values": torch.randn(T, M, generator=g, dtype=torch.float64),
    }


def _run(x, rho_bar, c_bar, lam=1.0):
    done = x["terminated"] | x["truncated"]
    return vtrace(
        x["log_rhos"],
        x["rewards"],
        x["values"],
        x["bootstrap"],
        GAMMA * (~done).to(torch.float64),
        x["truncated"],
        x["final_values"],
        gamma=GAMMA,
        clip_rho_threshold=rho_bar,
        clip_c_threshold=c_bar,
        lambda_=lam,
    )


@pytest.mark.parametrize(
    ("rho_bar", "c_bar", "lam", "seed"),
    [
        (1.0, 1.0, 1.0, 0),
        (2.0, 0.5, 1.0, 1),
        (0.8, 1.5, 1.0, 2),
        (1.0, 1.0, 0.95, 8),
        (2.0, 0.5, 0.5, 9),
        (1.0, 1.0, 0.0, 10),
    ],
)
def test_vtrace_matches_n_step_sum_with_dones_truncations_and_lambda(rho_bar, c_bar, lam, seed):
    x = _random_inputs(T=12, M=9, seed=seed)
    assert x["terminated"].any() and x["truncated"].any()
    out = _run(x, rho_bar, c_bar, lam)
    ref_vs, ref_adv = _reference(
        x["log_rhos"], x["rewards"], x["values"], x["bootstrap"],
        x["terminated"], x["truncated"], x["final_values"], rho_bar, c_bar, lam,
    )  # fmt: skip
    torch.testing.assert_close(out.vs, ref_vs, atol=1e-5, rtol=0)
    torch.testing.assert_close(out.pg_advantages, ref_adv, atol=1e-5, rtol=0)


def test_vtrace_on_policy_without_dones_is_discounted_n_step_return():
    x = _random_inputs(T=5, M=3, seed=3)
    x["log_rhos"].zero_()
    x["terminated"].zero_()
    x["truncated"].zero_()
    out = _run(x, 1.0, 1.0)
    expected = x["bootstrap"].clone()
    for t in range(4, -1, -1):
        expected = x["rewards"][t] + GAMMA * expected
        torch.testing.assert_close(out.vs[t], expected)


def test_vtrace_truncated_step_bootstraps_from_its_final_value_and_cuts_the_trace():
    x = _random_inputs(T=3, M=1, seed=4)
    x["log_rhos"].zero_()
    x["terminated"].zero_()
    x["truncated"].zero_()
    x["truncated"][1, 0] = True
    out = _run(x, 1.0, 1.0)
    r, fv, v = x["rewards"][:, 0], x["final_values"][1, 0], x["values"][:, 0]
    torch.testing.assert_close(out.vs[1, 0], r[1] + GAMMA * fv)
    torch.testing.assert_close(out.vs[0, 0], r[0] + GAMMA * (r[1] + GAMMA * fv))
    torch.testing.assert_close(out.pg_advantages[1, 0], r[1] + GAMMA * fv - v[1])


def test_vtrace_terminated_step_target_is_its_reward():
    x = _random_inputs(T=3, M=1, seed=5)
    x["log_rhos"].zero_()
    x["truncated"].zero_()
    x["terminated"].zero_()
    x["terminated"][1, 0] = True
    out = _run(x, 1.0, 1.0)
    torch.testing.assert_close(out.vs[1, 0], x["rewards"][1, 0])


def test_vtrace_float32_agrees_with_float64_reference():
    x = _random_inputs(T=24, M=16, seed=6)
    x32 = {k: (v.float() if v.is_floating_point() else v) for k, v in x.items()}
    out = _run(x32, 1.0, 1.0)
    ref = _run(x, 1.0, 1.0)
    torch.testing.assert_close(out.vs, ref.vs.float(), atol=1e-5, rtol=1e-5)


def test_vtrace_rejects_mismatched_shapes_naming_the_input():
    x = _random_inputs(T=4, M=2, seed=7)
    with pytest.raises(ValueError, match="rewards"):
        vtrace(
            x["log_rhos"], x["rewards"][:3], x["values"], x["bootstrap"],
            x["values"], x["truncated"], x["final_values"], gamma=GAMMA,
        )  # fmt: skip


def test_vtrace_lambda_zero_on_policy_is_one_step_td_target():
    x = _random_inputs(T=4, M=3, seed=11)
    x["log_rhos"].zero_()
    x["terminated"].zero_()
    x["truncated"].zero_()
    out = _run(x, 1.0, 1.0, lam=0.0)
    next_values = torch.cat([x["values"][1:], x["bootstrap"][None]])
    torch.testing.assert_close(out.vs, x["rewards"] + GAMMA * next_values)


def test_vtrace_rejects_lambda_outside_unit_interval():
    x = _random_inputs(T=4, M=2, seed=12)
    with pytest.raises(ValueError, match="lambda_"):
        _run(x, 1.0, 1.0, lam=1.5)
