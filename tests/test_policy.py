"""``unilab_lit.load_policy``: a checkpoint's or an export's policy, callable on numpy or torch."""

from __future__ import annotations

import re
import sys
import warnings

import numpy as np
import pytest
import torch

import unilab_lit
from unilab_lit.app.export import ONNX_EXTRA_INSTALL
from unilab_lit.app.export import main as export_main
from unilab_lit.app.trained_run import load_trained_run
from unilab_lit.envs.policy_episodes import policy_actions


@pytest.fixture(scope="module")
def checkpoint(appo_cartpole_run):
    (path,) = appo_cartpole_run.rglob("last.ckpt")
    return path


def _observations(obs_size: int) -> np.ndarray:
    # Raw observations far from the normaliser's mean, so a policy without it would differ.
    return (np.random.default_rng(0).normal(size=(32, obs_size)) * 4.0).astype(np.float32)


def test_checkpoint_onnx_and_program_policies_act_as_plays_policy(checkpoint, tmp_path):
    play_act = policy_actions(load_trained_run(checkpoint).model, deterministic=True)
    obs = _observations(5)
    with torch.no_grad():
        expected = play_act(torch.from_numpy(obs)).numpy()
    onnx_path = tmp_path / "policy.onnx"
    assert export_main(["--ckpt_path", str(checkpoint), "--output", str(onnx_path)]) == 0

    from_checkpoint = unilab_lit.load_policy(checkpoint)
    from_onnx = unilab_lit.load_policy(onnx_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        from_program = unilab_lit.load_policy(onnx_path.with_suffix(".pt2"))
    assert (from_checkpoint.obs_size, from_checkpoint.action_size) == (5, 1)
    assert (from_program.obs_size, from_program.action_size) == (5, 1)
    np.testing.assert_array_equal(from_checkpoint(obs), expected)
    np.testing.assert_allclose(from_onnx(obs), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(from_program(obs), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(from_program(obs[0]), expected[0], rtol=1e-5, atol=1e-6)


def test_policy_keeps_the_kind_and_shape_of_its_input(checkpoint):
    policy = unilab_lit.load_policy(checkpoint)
    obs = _observations(5)
    as_torch = policy(torch.from_numpy(obs))
    assert isinstance(as_torch, torch.Tensor) and as_torch.shape == (32, 1)
    single = policy(obs[0])
    assert isinstance(single, np.ndarray) and single.shape == (1,)
    # One row against 32: the matmul may round differently with the batch size.
    np.testing.assert_allclose(single, as_torch[0].numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"obs must be \[5\] or \[N, 5\], got \(3,\)"):
        policy(np.zeros(3))


def test_sampling_policy_differs_from_the_deterministic_one_and_exports_refuse_it(
    checkpoint, tmp_path
):
    obs = _observations(5)
    sampled = unilab_lit.load_policy(checkpoint, deterministic=False)(obs)
    assert not np.array_equal(sampled, unilab_lit.load_policy(checkpoint)(obs))
    for exported in ("policy.onnx", "policy.pt2"):
        with pytest.raises(ValueError, match="deterministic policy only"):
            unilab_lit.load_policy(tmp_path / exported, deterministic=False)


def test_onnx_file_without_onnxruntime_is_refused_in_one_line_naming_the_extra(
    tmp_path, monkeypatch
):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import onnxruntime: ImportError
    with pytest.raises(RuntimeError, match=re.escape(ONNX_EXTRA_INSTALL)) as refused:
        unilab_lit.load_policy(tmp_path / "policy.onnx")
    assert "needs onnxruntime" in str(refused.value) and "\n" not in str(refused.value)
