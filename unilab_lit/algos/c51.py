"""Distributional (C51) critic pieces: categorical projection, expected value, cross-entropy, clipped double Q."""

from __future__ import annotations

import torch


def categorical_projection(
    next_probs: torch.Tensor,
    reward: torch.Tensor,
    discount: torch.Tensor,
    v_min: float,
    v_max: float,
) -> torch.Tensor:
    """Project the distribution of ``reward + discount · Z'`` onto the fixed support.

    Bellemare, Dabney & Munos 2017, "A Distributional Perspective on Reinforcement Learning",
    Algorithm 1: each atom ``z_j`` of the support ``linspace(v_min, v_max, K)`` moves to
    ``Tz_j = clamp(r + discount·z_j, v_min, v_max)``, and its probability is split between the
    two neighbouring atoms in proportion to the distance. A ``Tz_j`` that lands exactly on an atom
    keeps all of its probability there (the algorithm's ``l == u`` case, where both of its
    distance weights are zero).

    Args:
        next_probs: Next-state atom probabilities ``[..., K]`` (K >= 2).
        reward: Rewards, broadcastable to ``next_probs.shape[:-1]``.
        discount: Per-row discount ``γ·bootstrap`` (0 where the episode terminated),
            broadcastable to ``next_probs.shape[:-1]``.
        v_min: Lowest atom.
        v_max: Highest atom (> v_min).

    Returns:
        The projected probabilities, same shape and dtype as ``next_probs``; each row sums to
        the row sum of ``next_probs``.
    """
    num_atoms = next_probs.shape[-1]
    support = torch.linspace(
        v_min, v_max, num_atoms, device=next_probs.device, dtype=next_probs.dtype
    )
    delta_z = (v_max - v_min) / (num_atoms - 1)
    target_z = reward.unsqueeze(-1) + discount.unsqueeze(-1) * support
    # Clamping b (not only Tz) keeps rounding from pushing ceil() one past the last atom.
    b = ((target_z.clamp(v_min, v_max) - v_min) / delta_z).clamp(0, num_atoms - 1)
    lower = b.floor()
    upper = b.ceil()
    on_atom = (lower == upper).to(next_probs.dtype)
    shape = torch.broadcast_shapes(b.shape, next_probs.shape)
    projected = torch.zeros(shape, device=next_probs.device, dtype=next_probs.dtype)
    probs = next_probs.expand(shape)
    projected.scatter_add_(-1, lower.long().expand(shape), probs * (upper - b + on_atom))
    projected.scatter_add_(-1, upper.long().expand(shape), probs * (b - lower))
    return projected


def expected_value(probs: torch.Tensor, support: torch.Tensor) -> torch.Tensor:
    """``Σ_j p_j z_j`` over the last dimension: ``[..., K] -> [...]``."""
    return (probs * support).sum(-1)


def distributional_cross_entropy(logits: torch.Tensor, target_probs: torch.Tensor) -> torch.Tensor:
    """Per-row cross-entropy ``−Σ_j m_j log softmax(logits)_j``: ``[..., K] -> [...]``.

    ``target_probs`` is a constant (no gradient flows into it).
    """
    return -(target_probs.detach() * torch.log_softmax(logits, dim=-1)).sum(-1)


def clipped_double_target(projected: torch.Tensor, support: torch.Tensor) -> torch.Tensor:
    """Clipped double Q for distributions: per row, the twin whose expected value is smaller.

    Fujimoto et al. 2018 (TD3) take ``min(Q1, Q2)``; with distributional critics the whole
    distribution of the smaller-mean twin is the target for both heads.

    Args:
        projected: Target distributions of the two twins ``[2, B, K]``.
        support: Atom values ``[K]``.

    Returns:
        ``[B, K]``: row ``i`` is ``projected[argmin_h E[projected[h, i]], i]``.
    """
    values = expected_value(projected, support)
    return torch.where((values[0] <= values[1]).unsqueeze(-1), projected[0], projected[1])
