"""Pure tensor functions of the algorithms: target-network averaging, bootstrap mask, finiteness,
term means, and the PPO family's losses (clipped surrogate and its ratio's reference, clipped
value loss, Gaussian KL)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal, get_args

import torch
from tensordict import TensorDictBase
from torch import nn


@torch.no_grad()
def polyak_update(target: nn.Module, source: nn.Module, tau: float) -> None:
    """``θ_target ← (1 − τ)·θ_target + τ·θ_source`` over the parameters, in place (τ = 1 copies)."""
    torch._foreach_lerp_(list(target.parameters()), list(source.parameters()), tau)


def bootstrap_mask(done: torch.Tensor, truncated: torch.Tensor) -> torch.Tensor:
    """Rows whose target bootstraps from ``next_obs``: all but those whose episode terminated.

    A truncated row (time limit) bootstraps from its ``next_obs``, which the collector stores as
    the true final observation. ``done`` may hold terminated alone or terminated | truncated:
    ``truncated`` is never true where the episode terminated (the env guarantees it), so
    ``~done | truncated`` is "not terminated" under both conventions.

    Args:
        done: Boolean ``[...]``.
        truncated: Boolean ``[...]``.

    Returns:
        Boolean ``[...]``, true where the target bootstraps.
    """
    return ~done | truncated


def all_finite(batch: TensorDictBase, keys: Iterable[str]) -> bool:
    """Whether every entry of ``batch[key]`` for each of ``keys`` is finite (one host sync)."""
    return bool(torch.stack([batch[key].isfinite().all() for key in keys]).all())


def mean_terms(steps: Iterable[Mapping[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Per key, the mean over the steps that logged it, in float32 (detached).

    Args:
        steps: One mapping of scalar terms per optimizer step; a step may leave a key out (a
            skipped update logs nothing).

    Returns:
        ``{key: mean}`` over every key any step logged.
    """
    values: dict[str, list[torch.Tensor]] = {}
    for terms in steps:
        for key, value in terms.items():
            values.setdefault(key, []).append(value.detach().float())
    return {key: torch.stack(series).mean() for key, series in values.items()}


SurrogateRatio = Literal["impact", "target", "behaviour"]
"""What the APPO surrogate's ratio divides by: see :func:`surrogate_reference`."""
SURROGATE_RATIOS: tuple[str, ...] = get_args(SurrogateRatio)


def surrogate_reference(
    kind: str, behaviour_log_prob: torch.Tensor, target_log_prob: torch.Tensor
) -> torch.Tensor:
    """Log-density ``π_ref`` the surrogate ratio ``π / π_ref`` divides by, per ``kind``.

    - ``"impact"``: ``max(π_behaviour, π_target)`` (IMPACT, Luo et al. 2020): bounded when the
      behaviour policy is stale; PPO's ratio when behaviour and target agree.
    - ``"target"``: ``π_target``, the policy at the iteration's start (a hard-copied target):
      PPO's trust region around it, with the off-policy correction left to V-trace's
      ρ-weighted advantages alone. ``"impact"`` equals ``ρ · π / π_target`` with
      ``ρ = min(1, π_target / π_behaviour)``, so it weights a stale sample by ρ twice and its
      clip can cut a sample's gradient before any update has moved it.
    - ``"behaviour"``: ``π_behaviour`` (Sample Factory's APPO).
    """
    if kind == "impact":
        return torch.maximum(behaviour_log_prob, target_log_prob)
    if kind == "target":
        return target_log_prob
    if kind == "behaviour":
        return behaviour_log_prob
    raise ValueError(f"surrogate_ratio must be one of {list(SURROGATE_RATIOS)}, got {kind!r}")


def clipped_surrogate_loss(
    log_prob: torch.Tensor,
    reference_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    clip_param: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO-clipped surrogate on the ratio ``r = π / π_ref`` (see :func:`surrogate_reference`).

    Returns:
        ``(loss, clip_fraction)``: ``mean(max(−A·r, −A·clip(r, 1−ε, 1+ε)))`` and the fraction of
        samples with ``|r − 1| > ε``.
    """
    ratio = torch.exp(log_prob - reference_log_prob)
    unclipped = advantages * ratio
    clipped = advantages * ratio.clamp(1.0 - clip_param, 1.0 + clip_param)
    loss = -torch.minimum(unclipped, clipped).mean()
    clip_fraction = ((ratio - 1.0).abs() > clip_param).float().mean()
    return loss, clip_fraction


def clipped_value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    clip_param: float,
    use_clipping: bool,
) -> torch.Tensor:
    """PPO value loss: ``mean(max((V − R)², (V_old + clip(V − V_old, ±ε) − R)²))``, or plain MSE."""
    losses = (values - returns).pow(2)
    if not use_clipping:
        return losses.mean()
    values_clipped = old_values + (values - old_values).clamp(-clip_param, clip_param)
    return torch.maximum(losses, (values_clipped - returns).pow(2)).mean()


def gaussian_kl(
    mean_p: torch.Tensor, std_p: torch.Tensor, mean_q: torch.Tensor, std_q: torch.Tensor
) -> torch.Tensor:
    """``KL(p ‖ q)`` of diagonal Gaussians, summed over the last dimension."""
    return (
        torch.log(std_q / std_p)
        + (std_p.pow(2) + (mean_p - mean_q).pow(2)) / (2.0 * std_q.pow(2))
        - 0.5
    ).sum(-1)
