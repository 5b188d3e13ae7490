"""Pure tensor functions the algorithms share: target-network averaging, bootstrap mask, finiteness, term means."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

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
