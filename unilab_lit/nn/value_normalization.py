"""Value-target normalisation for a critic: running statistics in buffers, optionally PopArt."""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from unilab_lit.nn.normalization import ObsNormalizer
from unilab_lit.validation import check_arg

ValueNormalization = Literal["none", "running", "popart"]
"""``"none"``: the critic predicts values; ``"running"`` / ``"popart"``: see :class:`ValueNormalizer`."""

VALUE_NORMALIZATIONS: tuple[str, ...] = ValueNormalization.__args__


class ValueNormalizer(nn.Module):
    """Running mean / variance of value targets; the critic predicts values in their normalised units.

    The learner de-normalises the critic's outputs (:meth:`denormalize`) wherever it needs values
    (V-trace, GAE), folds each batch of fresh targets into the statistics (:meth:`update`) and
    fits the critic to the targets in normalised units (:meth:`normalize`), so the value loss
    has the same scale whatever the reward scale of the task. The statistics are the exact
    running mean and variance of every target folded in (the observation normaliser's
    ``ObsNormalizer`` of width 1, unclipped): registered buffers, so checkpoints carry them, and
    under DDP every rank folds in every rank's targets and holds the same bits.

    Modes:

    - ``"running"``: Sample Factory's ``normalize_returns``. When the statistics move, the
      critic's unchanged output means a different value until the critic catches up.
    - ``"popart"``: "Preserving Outputs Precisely, while Adaptively Rescaling Targets" (van
      Hasselt et al. 2016, "Learning values across many orders of magnitude"; Hessel et al. 2018,
      "Multi-task Deep Reinforcement Learning with PopArt"). Each update also rescales the
      critic's last linear layer, ``w ← w·σ/σ'`` and ``b ← (σ·b + μ − μ')/σ'``, so the
      de-normalised value of every input is unchanged by it. Returns grow by orders of magnitude
      as a locomotion policy improves; PopArt keeps the value estimates (and so the advantages)
      continuous across those moves, which is why it is offered next to the plain normaliser.
      The optimizer's moment estimates of that layer are left as they are.
    - ``"none"``: no statistics and no buffers (a ``state_dict`` without keys, so checkpoints of
      learners without value normalisation are unchanged); every method is the identity.

    Args:
        mode: One of ``"none"``, ``"running"``, ``"popart"``.
        eps: Added to the variance before the square root (> 0); ``σ = sqrt(var + eps)``.

    Raises:
        ValueError: If ``mode`` is unknown or ``eps`` is not positive.
    """

    def __init__(self, mode: ValueNormalization, eps: float = 1e-8) -> None:
        super().__init__()
        check_arg(
            mode in VALUE_NORMALIZATIONS, "mode", mode, f"one of {list(VALUE_NORMALIZATIONS)}"
        )
        self.mode = mode
        if mode != "none":
            self.stats = ObsNormalizer(1, eps=eps, clip=None)

    def normalize(self, values: torch.Tensor) -> torch.Tensor:
        """Values ``[...]`` in the critic's normalised units."""
        if self.mode == "none":
            return values
        return self.stats(values.unsqueeze(-1)).squeeze(-1)

    def denormalize(self, values: torch.Tensor) -> torch.Tensor:
        """Critic outputs ``[...]`` (normalised units) as values."""
        if self.mode == "none":
            return values
        mean, std = self._mean_std()
        return values * std + mean

    @torch.no_grad()
    def update(
        self, targets: torch.Tensor, output_layer: nn.Linear, outputs: torch.Tensor
    ) -> torch.Tensor:
        """Fold ``targets`` into the statistics; under PopArt, rescale ``output_layer`` to match.

        Under DDP every rank must call this in the same iteration (an empty ``targets`` takes
        part too), because the statistics merge over the ranks.

        Args:
            targets: Value targets ``[...]`` (values, not normalised), each sample counted once.
            output_layer: The critic's last linear layer (one output unit), rescaled in place by
                ``"popart"`` and left alone otherwise.
            outputs: Critic outputs computed before this update.

        Returns:
            ``outputs`` as the critic gives them for the same inputs after the update: rescaled
            by PopArt's affine map, unchanged otherwise.
        """
        if self.mode == "none":
            return outputs
        old_mean, old_std = self._mean_std()
        self.stats.update(targets.reshape(-1, 1))
        if self.mode != "popart":
            return outputs
        mean, std = self._mean_std()
        output_layer.weight.mul_(old_std / std)
        output_layer.bias.mul_(old_std).add_(old_mean - mean).div_(std)
        return (outputs * old_std + old_mean - mean) / std

    def _mean_std(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.stats.mean.clone(), (self.stats.var + self.stats.eps).sqrt()

    def extra_repr(self) -> str:
        return f"mode={self.mode!r}"
