"""V-trace off-policy value targets and policy-gradient advantages (Espeholt et al. 2018).

:func:`item_vtrace` runs :func:`vtrace` on one APPO rollout item and measures its trace cuts.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from tensordict import TensorDictBase

from unilab_lit.telemetry import metrics
from unilab_lit.validation import check_arg


class VTraceReturns(NamedTuple):
    """Outputs of :func:`vtrace`, both ``[T, M]``.

    Attributes:
        vs: Value targets ``v_s``.
        pg_advantages: Policy-gradient advantages ``ρ̄_s (r_s + γ_s v_{s+1} − V(x_s))``.
    """

    vs: torch.Tensor
    pg_advantages: torch.Tensor


def vtrace(
    log_rhos: torch.Tensor,
    rewards: torch.Tensor,
    values: torch.Tensor,
    bootstrap_value: torch.Tensor,
    discounts: torch.Tensor,
    truncated: torch.Tensor,
    final_values: torch.Tensor,
    gamma: float,
    clip_rho_threshold: float = 1.0,
    clip_c_threshold: float = 1.0,
    lambda_: float = 1.0,
) -> VTraceReturns:
    """V-trace targets and advantages for time-major rollouts, with timeouts that are not terminations.

    Convention (all inputs ``[T, M]`` except ``bootstrap_value`` ``[M]``; step ``t`` moves
    ``x_t -> x_{t+1}`` with reward ``r_t``; ``discounts_t = γ·(1 − done_t)`` where ``done_t`` is
    ``terminated_t | truncated_t``)::

        ρ_t  = exp(log_rhos_t)              ρ̄_t = min(ρ̄, ρ_t)          c_t = λ·min(c̄, ρ_t)
        r'_t = r_t + γ·V(final_obs_t)   if truncated_t   else r_t
        V_{t+1} = values_{t+1}  (t < T−1),   V_T = bootstrap_value
        δ_t  = ρ̄_t · (r'_t + discounts_t · V_{t+1} − V_t)
        v_s  = V_s + Σ_{t=s}^{T−1} (Π_{i=s}^{t−1} discounts_i · c_i) · δ_t            (paper eq. 1)
        A_s  = ρ̄_s · (r'_s + discounts_s · (λ·v_{s+1} + (1 − λ)·V_{s+1}) − V_s),   v_T := bootstrap_value

    ``λ = 1`` is the paper's V-trace; ``λ < 1`` mixes in shorter returns as TD(λ) does, in the form
    of rlax's ``vtrace`` / ``vtrace_td_error_and_advantage`` (λ scales the trace coefficients, and
    the advantage bootstraps from ``λ·v_{s+1} + (1 − λ)·V_{s+1}``); ``λ = 0`` gives one-step targets.

    A truncated step therefore bootstraps from the value of its own final observation
    (``γ·V(final_obs)`` folded into ``r'``) while its zero discount cuts the trace, so nothing
    from the next episode leaks back. A terminated step bootstraps from nothing. ``v_s`` is
    computed with the equivalent backward recursion
    ``v_s − V_s = δ_s + discounts_s · c_s · (v_{s+1} − V_{s+1})``.

    Args:
        log_rhos: ``log π_target(a_t|x_t) − log μ_behaviour(a_t|x_t)``.
        rewards: Environment rewards ``r_t`` (without any bootstrap term).
        values: ``V(x_t)`` under the critic being trained.
        bootstrap_value: ``V(x_T)`` of the observation after the last step, ``[M]``.
        discounts: ``γ·(1 − done_t)``.
        truncated: Bool mask of steps that ended by timeout and not by termination (a subset
            of done; a step that is both must count as terminated, i.e. not truncated).
        final_values: ``V(final_obs_t)``; read only where ``truncated``.
        gamma: Discount used for the truncation bootstrap.
        clip_rho_threshold: ρ̄, clip on the importance weight in δ and in the advantages.
        clip_c_threshold: c̄, clip on the trace-cutting coefficients.
        lambda_: λ in [0, 1], the trace decay on top of ``c̄``.

    Returns:
        :class:`VTraceReturns` of ``vs`` and ``pg_advantages``, detached from the graph.

    Raises:
        ValueError: If the shapes do not match ``[T, M]`` / ``[M]``, or ``lambda_`` is outside [0, 1].
    """
    check_arg(0.0 <= lambda_ <= 1.0, "lambda_", lambda_, "in [0, 1]")
    check_arg(log_rhos.dim() == 2, "log_rhos", tuple(log_rhos.shape), "of shape [T, M]")
    for name, tensor in (
        ("rewards", rewards),
        ("values", values),
        ("discounts", discounts),
        ("truncated", truncated),
        ("final_values", final_values),
    ):
        if tensor.shape != log_rhos.shape:
            raise ValueError(
                f"{name} must have the shape of log_rhos {tuple(log_rhos.shape)}, got {tuple(tensor.shape)}"
            )
    check_arg(
        bootstrap_value.shape == log_rhos.shape[1:],
        "bootstrap_value",
        tuple(bootstrap_value.shape),
        f"[M] = {tuple(log_rhos.shape[1:])}",
    )
    with torch.no_grad():
        rhos = log_rhos.exp()
        clipped_rhos = rhos.clamp(max=clip_rho_threshold)
        cs = lambda_ * rhos.clamp(max=clip_c_threshold)
        rewards = rewards + gamma * torch.where(
            truncated, final_values, torch.zeros_like(final_values)
        )
        next_values = torch.cat([values[1:], bootstrap_value.unsqueeze(0)], dim=0)
        deltas = clipped_rhos * (rewards + discounts * next_values - values)

        # A Python loop over T (tens of steps) of [M]-wide ops: cheaper than any scan trick here.
        vs_minus_v = torch.empty_like(values)
        acc = torch.zeros_like(bootstrap_value)
        for t in range(values.shape[0] - 1, -1, -1):
            acc = deltas[t] + discounts[t] * cs[t] * acc
            vs_minus_v[t] = acc
        vs = values + vs_minus_v

        next_vs = torch.cat([vs[1:], bootstrap_value.unsqueeze(0)], dim=0)
        if lambda_ < 1.0:
            next_vs = lambda_ * next_vs + (1.0 - lambda_) * next_values
        pg_advantages = clipped_rhos * (rewards + discounts * next_vs - values)
    return VTraceReturns(vs=vs, pg_advantages=pg_advantages)


def item_vtrace(
    item: TensorDictBase,
    target_log_prob: torch.Tensor,
    values: torch.Tensor,
    bootstrap_value: torch.Tensor,
    final_values: torch.Tensor,
    gamma: float,
    clip_rho_threshold: float,
    clip_c_threshold: float,
    lambda_: float,
) -> tuple[VTraceReturns, dict[str, torch.Tensor]]:
    """:func:`vtrace` over one rollout item, and how far off-policy the item was.

    The importance weights are ``π_target / μ`` of the item's actions (its ``log_prob`` is the
    behaviour policy's), the discounts ``γ·(1 − done)``; ``reward`` and ``truncated`` enter as
    they are.

    Args:
        item: A rollout item ``[T, M]`` with ``log_prob``, ``reward``, ``done`` and ``truncated``
            (``unilab_lit.algos.appo.ROLLOUT_KEYS``).
        target_log_prob: ``log π_target`` of the item's actions, ``[T, M]``.
        values: ``V(x_t)``, in return units (as for :func:`vtrace`).
        bootstrap_value: ``V(x_T)``, ``[M]``.
        final_values: ``V(final_obs_t)``; read only where ``truncated``.
        gamma: Discount factor.
        clip_rho_threshold: ρ̄.
        clip_c_threshold: c̄.
        lambda_: λ in [0, 1].

    Returns:
        The :class:`VTraceReturns` and the trace diagnostics under their metric keys: the
        fraction of ρ above ρ̄ (clipped), the fraction of traces ``min(c̄, ρ)`` below 1 (cut) and
        the mean trace coefficient ``λ·min(c̄, ρ)``.
    """
    log_rhos = target_log_prob - item["log_prob"]
    returns = vtrace(
        log_rhos,
        item["reward"],
        values,
        bootstrap_value,
        gamma * (~item["done"]).to(values.dtype),
        item["truncated"],
        final_values,
        gamma=gamma,
        clip_rho_threshold=clip_rho_threshold,
        clip_c_threshold=clip_c_threshold,
        lambda_=lambda_,
    )
    rhos = log_rhos.exp()
    traces = rhos.clamp(max=clip_c_threshold)
    trace_terms = {
        metrics.RHO_CLIP_FRACTION: (rhos > clip_rho_threshold).float().mean(),
        metrics.TRACE_CUT_FRACTION: (traces < 1.0).float().mean(),
        metrics.MEAN_TRACE_COEF: lambda_ * traces.mean(),
    }
    return returns, trace_terms
