"""Pure loss and schedule functions of the PPO family (surrogate, value loss, KL, adaptive LR)."""

from __future__ import annotations

import torch


def impact_surrogate_loss(
    log_prob: torch.Tensor,
    behaviour_log_prob: torch.Tensor,
    target_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    clip_param: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO-clipped surrogate on the IMPACT ratio ``π / max(π_behaviour, π_target)``.

    Dividing by the larger of the two densities keeps the ratio bounded when the behaviour
    policy is stale (IMPACT, Luo et al. 2020); when behaviour and target agree it is PPO's ratio.

    Returns:
        ``(loss, clip_fraction)``: ``mean(max(−A·r, −A·clip(r, 1−ε, 1+ε)))`` and the fraction of
        samples with ``|r − 1| > ε``.
    """
    ratio = torch.exp(log_prob - torch.maximum(behaviour_log_prob, target_log_prob))
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


def adaptive_learning_rate(
    lr: float,
    kl: float,
    desired_kl: float,
    kl_tolerance_factor: float,
    lr_factor: float,
    min_lr: float,
    max_lr: float,
) -> float:
    """The next learning rate of the KL-adaptive schedule (as rsl_rl's PPO, with bounds).

    Divides by ``lr_factor`` when ``kl > desired·tolerance``, multiplies when
    ``0 < kl < desired/tolerance`` and keeps it otherwise (including ``kl == 0``, the first
    minibatch of an iteration, and a NaN kl); the result stays in ``[min_lr, max_lr]``.
    """
    if kl > desired_kl * kl_tolerance_factor:
        return max(min_lr, lr / lr_factor)
    if 0.0 < kl < desired_kl / kl_tolerance_factor:
        return min(max_lr, lr * lr_factor)
    return lr
