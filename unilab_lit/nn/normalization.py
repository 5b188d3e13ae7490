"""Running observation normalisation: exact moment merging and one normalise function for all."""

from __future__ import annotations

import torch
from torch import nn

from unilab_lit import distributed
from unilab_lit.validation import check_arg


def merge_moments(
    mean_a: torch.Tensor,
    var_a: torch.Tensor,
    n_a: float | torch.Tensor,
    mean_b: torch.Tensor,
    var_b: torch.Tensor,
    n_b: float | torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, float | torch.Tensor]:
    """Mean, population variance and count of the union of two sample sets.

    Chan, Golub & LeVeque's parallel formula: exact, so merging in any grouping gives the
    statistics of the concatenated data (up to floating-point rounding).

    Args:
        mean_a: mean of set a.
        var_a: population variance of set a.
        n_a: size of set a (>= 0).
        mean_b: mean of set b.
        var_b: population variance of set b.
        n_b: size of set b (>= 0).

    Returns:
        ``(mean, var, n)`` of the union; set a unchanged when the union is empty.
    """
    n = n_a + n_b
    if float(n) == 0.0:
        return mean_a, var_a, n
    delta = mean_b - mean_a
    mean = mean_a + delta * (n_b / n)
    m2 = var_a * n_a + var_b * n_b + delta.square() * (n_a * n_b / n)
    return mean, m2 / n, n


def normalize(
    x: torch.Tensor, mean: torch.Tensor, var: torch.Tensor, eps: float, clip: float | None
) -> torch.Tensor:
    """``clamp((x - mean) / sqrt(var + eps), -clip, clip)``; the learner and the collector both call this.

    Args:
        x: observations ``[..., size]``.
        mean: ``[size]`` running mean.
        var: ``[size]`` running variance.
        eps: added to the variance before the square root.
        clip: bound on the normalised magnitude; ``None`` leaves it unbounded.
    """
    normalized = (x - mean) * torch.rsqrt(var + eps)
    return normalized if clip is None else normalized.clamp_(-clip, clip)


class ObsNormalizer(nn.Module):
    """Running mean / variance of observations, kept in registered buffers (so in checkpoints).

    ``update`` folds a batch in (all leading dims are samples); ``forward`` normalises.

    Args:
        size: observation dimension, > 0.
        eps: added to the variance before the square root, > 0.
        clip: bound on the normalised magnitude, > 0; ``None`` leaves it unbounded. The
            collector and the exported policy take it from here, so every user clips alike.

    Raises:
        ValueError: an argument is out of range.
    """

    mean: torch.Tensor
    var: torch.Tensor
    count: torch.Tensor

    def __init__(self, size: int, eps: float = 1e-8, clip: float | None = 10.0) -> None:
        super().__init__()
        check_arg(size > 0, "size", size, "> 0")
        check_arg(eps > 0, "eps", eps, "> 0")
        check_arg(clip is None or clip > 0, "clip", clip, "> 0")
        self.size = size
        self.eps = eps
        self.clip = clip
        self.register_buffer("mean", torch.zeros(size))
        self.register_buffer("var", torch.ones(size))
        # float64 so the count stays exact far beyond float32's 2^24.
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Fold a batch ``[..., size]`` into the running statistics (exact merge, in float64).

        Raises:
            ValueError: the last dimension is not ``size``.
        """
        if x.shape[-1] != self.size:
            raise ValueError(f"x must end in dimension {self.size}, got shape {tuple(x.shape)}")
        batch = x.reshape(-1, self.size).to(torch.float64)
        # Under DDP every rank folds in every rank's batch, in rank order: one normaliser for
        # the job, the same bits on every rank (an empty batch still takes part).
        for batch_mean, batch_var, n in distributed.moments_of_every_rank(batch):
            mean, var, count = merge_moments(
                self.mean.to(torch.float64),
                self.var.to(torch.float64),
                self.count,
                batch_mean,
                batch_var,
                n,
            )
            self.mean.copy_(mean)
            self.var.copy_(var)
            self.count.copy_(count)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise ``x`` with the current statistics."""
        return normalize(x, self.mean, self.var, self.eps, self.clip)

    def extra_repr(self) -> str:
        return f"size={self.size}, eps={self.eps}, clip={self.clip}"
