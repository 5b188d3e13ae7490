"""ValueNormalizer: running statistics of value targets, PopArt's output-preserving rescale."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from unilab_lit.nn.normalization import ObsNormalizer
from unilab_lit.nn.policies import MLPCritic
from unilab_lit.nn.value_normalization import ValueNormalizer

OBS = 4


def _critic() -> MLPCritic:
    torch.manual_seed(0)
    return MLPCritic(OBS, [32, 32], "elu")


def _target_batches(rng: np.random.Generator) -> list[np.ndarray]:
    # Returns that grow by orders of magnitude, as a locomotion policy's do while it learns.
    return [
        rng.normal(loc, scale, size=(8, 6))
        for loc, scale in ((0.5, 1.0), (40.0, 15.0), (300.0, 90.0))
    ]


@pytest.mark.parametrize("mode", ["running", "popart"])
def test_statistics_equal_numpy_mean_and_var_of_every_target_folded_in(mode) -> None:
    rng = np.random.default_rng(0)
    normalizer, critic = ValueNormalizer(mode), _critic()
    seen = []
    for batch in _target_batches(rng):
        normalizer.update(torch.from_numpy(batch).float(), critic.model.mlp[-1], torch.zeros(1))
        seen.append(batch.astype(np.float32).astype(np.float64))
        targets = np.concatenate([b.ravel() for b in seen])
        mean, var = normalizer.stats.mean.item(), normalizer.stats.var.item()
        np.testing.assert_allclose(mean, targets.mean(), rtol=1e-6)
        np.testing.assert_allclose(var, targets.var(), rtol=1e-5)
        assert normalizer.stats.count.item() == targets.size
    values = torch.tensor([-50.0, 0.0, 123.0])
    expected = (values - mean) / np.sqrt(var + 1e-8)
    torch.testing.assert_close(normalizer.normalize(values), expected.float())
    torch.testing.assert_close(normalizer.denormalize(normalizer.normalize(values)), values)


# float64 measures the algebra to 1e-6; in float32 the rescale is exact up to rounding of the
# weights (~1e-7 relative to values in the hundreds).
@pytest.mark.parametrize(("dtype", "tolerance"), [(torch.float64, 1e-6), (torch.float32, 2e-5)])
def test_popart_update_leaves_the_denormalised_critic_output_unchanged(dtype, tolerance) -> None:
    rng = np.random.default_rng(1)
    normalizer, critic = ValueNormalizer("popart").to(dtype), _critic().to(dtype)
    obs = torch.randn(256, OBS, dtype=dtype)
    for batch in _target_batches(rng):
        with torch.no_grad():
            outputs = critic(obs)
            before = normalizer.denormalize(outputs)
        targets = torch.from_numpy(batch).to(dtype)
        rescaled = normalizer.update(targets, critic.model.mlp[-1], outputs)
        with torch.no_grad():
            after = critic(obs)
        close = {"rtol": tolerance, "atol": tolerance}
        torch.testing.assert_close(normalizer.denormalize(after), before, **close)
        # The returned outputs are what the rescaled critic now gives for the same inputs,
        torch.testing.assert_close(rescaled, after, **close)
        # while the normalised outputs moved with the statistics.
        assert not torch.allclose(after, outputs, atol=1e-3)


def test_running_update_leaves_the_critic_alone_and_its_outputs_as_they_were() -> None:
    normalizer, critic = ValueNormalizer("running"), _critic()
    weights = {k: v.clone() for k, v in critic.state_dict().items()}
    outputs = torch.randn(5)
    targets = torch.randn(40) * 10.0 + 30.0
    assert torch.equal(normalizer.update(targets, critic.model.mlp[-1], outputs), outputs)
    for key, value in critic.state_dict().items():
        assert torch.equal(value, weights[key]), key


def test_none_mode_is_the_identity_and_adds_no_state() -> None:
    normalizer, critic = ValueNormalizer("none"), _critic()
    values = torch.randn(7) * 100.0
    assert normalizer.state_dict() == {}
    assert normalizer.normalize(values) is values and normalizer.denormalize(values) is values
    assert normalizer.update(values, critic.model.mlp[-1], values) is values


def test_state_dict_round_trip_restores_the_statistics() -> None:
    source = ValueNormalizer("popart")
    source.update(torch.randn(100) * 7.0 + 2.0, _critic().model.mlp[-1], torch.zeros(1))
    restored = ValueNormalizer("popart")
    restored.load_state_dict(source.state_dict())
    assert set(restored.state_dict()) == {"stats.mean", "stats.var", "stats.count"}
    for key, value in source.state_dict().items():
        assert torch.equal(restored.state_dict()[key], value), key


def test_unknown_mode_is_rejected_naming_the_choices() -> None:
    with pytest.raises(ValueError, match=r"mode must be one of \['none', 'running', 'popart'\]"):
        ValueNormalizer("popart2")  # type: ignore[arg-type]


def test_obs_normalizer_without_clip_leaves_far_observations_unbounded() -> None:
    normalizer = ObsNormalizer(2, clip=None)
    normalizer.update(torch.randn(100, 2))
    far = torch.full((1, 2), 1e4)
    assert normalizer(far).min() > 1e3
    with pytest.raises(ValueError, match="clip must be > 0"):
        ObsNormalizer(2, clip=0.0)
