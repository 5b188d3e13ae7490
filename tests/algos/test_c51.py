from __future__ import annotations

import math

import pytest
import torch

from unilab_lit.algos.c51 import (
    categorical_projection,
    clipped_double_target,
    distributional_cross_entropy,
    expected_value,
)


def _algorithm_1(next_probs, reward, discount, v_min, v_max):
    """Bellemare et al. 2017, Algorithm 1, one transition at a time, in float64 Python."""
    num_atoms = len(next_probs)
    delta_z = (v_max - v_min) / (num_atoms - 1)
    m = [0.0] * num_atoms
    for j in range(num_atoms):
        z_j = v_min + j * delta_z
        tz = min(max(reward + discount * z_j, v_min), v_max)
        b = (tz - v_min) / delta_z
        lo, hi = math.floor(b), math.ceil(b)
        if lo == hi:
            m[lo] += next_probs[j]
        else:
            m[lo] += next_probs[j] * (hi - b)
            m[hi] += next_probs[j] * (b - lo)
    return m


def _check_against_reference(next_probs, reward, discount, v_min, v_max):
    projected = categorical_projection(next_probs, reward, discount, v_min, v_max)
    for i in range(next_probs.shape[0]):
        expected = _algorithm_1(
            next_probs[i].tolist(), float(reward[i]), float(discount[i]), v_min, v_max
        )
        torch.testing.assert_close(
            projected[i], torch.tensor(expected, dtype=next_probs.dtype), atol=1e-6, rtol=0
        )
    return projected


def test_projection_matches_algorithm_1_on_random_transitions():
    g = torch.Generator().manual_seed(0)
    next_probs = torch.softmax(torch.randn(64, 11, generator=g, dtype=torch.float64), -1)
    reward = torch.randn(64, generator=g, dtype=torch.float64) * 3.0
    discount = torch.where(torch.rand(64, generator=g) < 0.2, 0.0, 0.97).to(torch.float64)
    projected = _check_against_reference(next_probs, reward, discount, -10.0, 10.0)
    torch.testing.assert_close(projected.sum(-1), torch.ones(64, dtype=torch.float64))


def test_projection_keeps_all_mass_on_an_atom_that_a_target_hits_exactly():
    # Support -2..2 step 1; r=1, γ=1 moves every atom exactly one atom up (top two clamp to 2).
    next_probs = torch.tensor([[0.1, 0.2, 0.3, 0.25, 0.15]], dtype=torch.float64)
    reward = torch.tensor([1.0], dtype=torch.float64)
    discount = torch.tensor([1.0], dtype=torch.float64)
    projected = _check_against_reference(next_probs, reward, discount, -2.0, 2.0)
    torch.testing.assert_close(
        projected[0], torch.tensor([0.0, 0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    )


def test_projection_clamps_targets_beyond_the_support_onto_the_end_atoms():
    next_probs = torch.full((3, 5), 0.2, dtype=torch.float64)
    reward = torch.tensor([100.0, -100.0, 0.5], dtype=torch.float64)
    discount = torch.tensor([0.9, 0.9, 5.0], dtype=torch.float64)
    projected = _check_against_reference(next_probs, reward, discount, -2.0, 2.0)
    torch.testing.assert_close(projected[0], torch.tensor([0, 0, 0, 0, 1.0], dtype=torch.float64))
    torch.testing.assert_close(projected[1], torch.tensor([1.0, 0, 0, 0, 0], dtype=torch.float64))
    # Row 3: atoms -2, -1 land below the support, 1, 2 above it, 0 lands on 0.5.
    torch.testing.assert_close(
        projected[2], torch.tensor([0.4, 0, 0.1, 0.1, 0.4], dtype=torch.float64)
    )


def test_projection_of_a_terminal_row_is_the_reward_alone():
    next_probs = torch.softmax(torch.randn(1, 21, dtype=torch.float64), -1)
    reward = torch.tensor([0.25], dtype=torch.float64)
    projected = _check_against_reference(
        next_probs, reward, torch.zeros(1, dtype=torch.float64), -1.0, 1.0
    )
    # 0.25 sits halfway between atoms 0.2 and 0.3.
    assert projected[0, 12].item() == pytest.approx(0.5)
    assert projected[0, 13].item() == pytest.approx(0.5)
    assert expected_value(projected, torch.linspace(-1, 1, 21, dtype=torch.float64)).item() == (
        pytest.approx(0.25)
    )


def test_projection_broadcasts_one_reward_row_over_twin_distributions():
    g = torch.Generator().manual_seed(1)
    next_probs = torch.softmax(torch.randn(2, 8, 7, generator=g), -1)
    reward = torch.randn(8, generator=g)
    discount = torch.full((8,), 0.99)
    twin = categorical_projection(next_probs, reward, discount, -3.0, 3.0)
    for h in range(2):
        torch.testing.assert_close(
            twin[h], categorical_projection(next_probs[h], reward, discount, -3.0, 3.0)
        )


def test_clipped_double_target_picks_the_smaller_mean_twin_per_row():
    support = torch.tensor([-1.0, 0.0, 1.0])
    low = torch.tensor([0.6, 0.3, 0.1])  # mean -0.5
    high = torch.tensor([0.1, 0.3, 0.6])  # mean 0.5
    projected = torch.stack([torch.stack([low, high]), torch.stack([high, low])])
    torch.testing.assert_close(clipped_double_target(projected, support), torch.stack([low, low]))


def test_cross_entropy_is_minimised_by_the_target_and_passes_no_gradient_to_it():
    target = torch.tensor([[0.2, 0.5, 0.3]], requires_grad=True)
    logits = torch.zeros(1, 3, requires_grad=True)
    loss = distributional_cross_entropy(logits, target).sum()
    loss.backward()
    # d/dlogits of CE = softmax(logits) - target.
    torch.testing.assert_close(logits.grad, torch.full((1, 3), 1 / 3) - target.detach())
    assert target.grad is None
    at_target = distributional_cross_entropy(target.detach().log(), target.detach())
    assert at_target.item() < loss.item()
