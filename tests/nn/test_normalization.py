"""Exact moment merging, the shared normalise function, and the ObsNormalizer module."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from unilab_lit.nn.normalization import ObsNormalizer, merge_moments, normalize


def test_merge_moments_equals_numpy_statistics_of_concatenation() -> None:
    rng = np.random.default_rng(0)
    a = rng.normal(0.0, 1.0, size=(1000, 3))
    b = rng.normal(3.0, 2.0, size=(1000, 3))
    mean, var, n = merge_moments(
        torch.from_numpy(a.mean(0)),
        torch.from_numpy(a.var(0)),
        1000,
        torch.from_numpy(b.mean(0)),
        torch.from_numpy(b.var(0)),
        1000,
    )
    both = np.concatenate([a, b])
    assert n == 2000
    np.testing.assert_allclose(mean.numpy(), both.mean(0), rtol=0, atol=1e-6)
    np.testing.assert_allclose(var.numpy(), both.var(0), rtol=0, atol=1e-6)
    # The seed's biased merge under-weighted the cross term and landed near 3.5 here.
    assert var[0] > 4.5


def test_merge_moments_with_an_empty_side_returns_the_other() -> None:
    mean, var = torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0])
    merged_mean, merged_var, n = merge_moments(torch.zeros(2), torch.ones(2), 0, mean, var, 5)
    assert torch.equal(merged_mean, mean) and torch.equal(merged_var, var) and n == 5
    merged_mean, merged_var, n = merge_moments(mean, var, 5, torch.zeros(2), torch.ones(2), 0)
    assert torch.equal(merged_mean, mean) and torch.equal(merged_var, var) and n == 5
    assert merge_moments(mean, var, 0, mean, var, 0)[2] == 0


def test_normalizer_updates_over_leading_dims_match_numpy_of_all_batches() -> None:
    rng = np.random.default_rng(1)
    batches = [rng.normal(loc, scale, size=(5, 7, 4)) for loc, scale in ((0, 1), (3, 2), (-1, 0.5))]
    norm = ObsNormalizer(4)
    for batch in batches:
        norm.update(torch.from_numpy(batch).float())
    data = np.concatenate([b.reshape(-1, 4) for b in batches]).astype(np.float32).astype(np.float64)
    np.testing.assert_allclose(norm.mean.numpy(), data.mean(0), rtol=0, atol=1e-6)
    np.testing.assert_allclose(norm.var.numpy(), data.var(0), rtol=0, atol=1e-6)
    assert float(norm.count) == 105.0


def test_normalize_centres_scales_and_clips() -> None:
    mean, var = torch.tensor([1.0, 0.0]), torch.tensor([4.0, 0.0])
    x = torch.tensor([[3.0, 0.0], [101.0, 1.0]])
    out = normalize(x, mean, var, eps=1e-8, clip=5.0)
    assert out[0, 0] == pytest.approx(1.0)
    assert out[0, 1] == 0.0  # a constant dimension stays at zero, not NaN
    assert out[1].tolist() == [5.0, 5.0]  # outliers and near-zero variance are clipped


def test_forward_is_the_shared_normalize_function() -> None:
    norm = ObsNormalizer(3, eps=1e-2, clip=2.0)
    norm.update(torch.randn(64, 3))
    x = torch.randn(8, 3) * 5
    assert torch.equal(norm(x), normalize(x, norm.mean, norm.var, 1e-2, 2.0))


def test_normalizer_state_dict_restores_statistics_on_resume() -> None:
    norm = ObsNormalizer(3)
    norm.update(torch.randn(50, 3) + 2)
    state = norm.state_dict()
    assert set(state) == {"mean", "var", "count"}
    restored = ObsNormalizer(3)
    restored.load_state_dict(state)
    x = torch.randn(4, 3)
    assert torch.equal(restored(x), norm(x))
    assert restored.count.dtype == torch.float64 and float(restored.count) == 50.0


def test_normalizer_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="size must be > 0, got 0"):
        ObsNormalizer(0)
    with pytest.raises(ValueError, match="eps must be > 0"):
        ObsNormalizer(2, eps=0.0)
    with pytest.raises(ValueError, match="clip must be > 0"):
        ObsNormalizer(2, clip=-1.0)
    with pytest.raises(ValueError, match=r"x must end in dimension 2, got shape \(4, 3\)"):
        ObsNormalizer(2).update(torch.zeros(4, 3))
