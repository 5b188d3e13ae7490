"""``python -m unilab_lit.app.export``: ONNX and ExportedProgram of the policy, normaliser folded in."""

from __future__ import annotations

import json
import logging
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
import torch

from unilab_lit.algos.appo import APPO
from unilab_lit.algos.fast_sac import FastSAC
from unilab_lit.algos.fast_td3 import FastTD3
from unilab_lit.app.export import METADATA_FILE, export_policy, main
from unilab_lit.app.trained_run import TrainedRun
from unilab_lit.envs.task_spec import TaskSpec

# (algorithm, task, obs size, action size)
ALGORITHMS = [
    (APPO, "CartpoleSwingup", 5, 1),
    (FastTD3, "HalfCheetah", 17, 6),
    (FastSAC, "HalfCheetah", 17, 6),
]


def _trained_like(cls: type, task: str, obs_size: int, action_size: int) -> TrainedRun:
    torch.manual_seed(0)
    model = cls(
        policy_obs_size=obs_size,
        critic_obs_size=obs_size,
        action_size=action_size,
        actor_hidden_dims=(32, 32),
        critic_hidden_dims=(32,),
    )
    # Statistics far from (0, 1), so a policy that ignored the normaliser would be caught.
    model.obs_normalizer.update(torch.randn(4096, obs_size) * 3.0 + 5.0)
    with torch.no_grad():
        for parameter in model.collector_policy().parameters():
            parameter.add_(torch.randn_like(parameter) * 0.3)
    model.eval()
    return TrainedRun(model, TaskSpec(task), Path("none.ckpt"), 7)


def _read_program(path: Path) -> tuple[torch.nn.Module, dict]:
    extra = {METADATA_FILE: ""}
    module = torch.export.load(path, extra_files=extra).module()
    return module, json.loads(extra[METADATA_FILE])


def _onnx_metadata(path: Path) -> dict[str, str]:
    return {p.key: p.value for p in onnx.load(str(path)).metadata_props}


@pytest.mark.parametrize(
    ("cls", "task", "obs_size", "action_size"), ALGORITHMS, ids=[a[0].__name__ for a in ALGORITHMS]
)
def test_exported_onnx_and_program_equal_the_torch_policy_with_its_normaliser(
    tmp_path, cls, task, obs_size, action_size, caplog, monkeypatch
):
    run = _trained_like(cls, task, obs_size, action_size)
    # torch's loggers stop at "torch" (its own stderr handler); caplog listens at the root.
    monkeypatch.setattr(logging.getLogger("torch"), "propagate", True)
    onnx_path, program_path = tmp_path / "policy.onnx", tmp_path / "policy.pt2"
    # Our export path and the .pt2's read-back warn of nothing deprecated.
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        warnings.simplefilter("error", DeprecationWarning)
        export_policy(run, onnx_path, program_path)
        program, program_meta = _read_program(program_path)
    # Nor of its partial file's name (torch.export.save logs it for any name but *.pt2).
    assert [r.getMessage() for r in caplog.records if "archive file" in r.getMessage()] == []

    # Raw observations near the normaliser's mean, far from it and beyond its clip; one row too.
    raw = torch.cat([torch.randn(64, obs_size) * 6.0 + 5.0, torch.randn(16, obs_size) * 200.0])
    with torch.no_grad():
        expected = run.model.collector_policy()(run.model.obs_normalizer(raw)).numpy()
        np.testing.assert_allclose(program(raw).numpy(), expected, atol=1e-5, rtol=0)
        np.testing.assert_allclose(program(raw[:1]).numpy(), expected[:1], atol=1e-5, rtol=0)
    session = onnxruntime.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    (from_onnx,) = session.run(None, {"obs": raw.numpy()})
    np.testing.assert_allclose(from_onnx, expected, atol=1e-5, rtol=0)

    onnx_meta = _onnx_metadata(onnx_path)
    assert onnx_meta["task"] == program_meta["task"] == task
    assert json.loads(onnx_meta["obs_size"]) == program_meta["obs_size"] == obs_size
    assert json.loads(onnx_meta["action_size"]) == program_meta["action_size"] == action_size
    assert len(json.loads(onnx_meta["action_low"])) == action_size
    assert onnx_meta["algorithm"].endswith(cls.__name__)
    assert sorted(tmp_path.iterdir()) == [onnx_path, program_path], "temporary files left"


def test_export_cli_writes_both_files_from_a_fit_checkpoint(appo_cartpole_run, tmp_path, capsys):
    output = tmp_path / "policy.onnx"
    status = main(
        ["--ckpt_path", "last", "--run_dir", str(appo_cartpole_run), "--output", str(output)]
    )
    assert status == 0, capsys.readouterr().err
    assert output.is_file() and output.with_suffix(".pt2").is_file()
    session = onnxruntime.InferenceSession(str(output), providers=["CPUExecutionProvider"])
    (actions,) = session.run(None, {"obs": np.zeros((3, 5), dtype=np.float32)})
    assert actions.shape == (3, 1)


@pytest.mark.parametrize("case", ["missing checkpoint", "no config", "unwritable output"])
def test_export_bad_input_gives_one_line_error_and_writes_nothing(
    case, appo_cartpole_run, checkpoint_without_config, tmp_path, capsys
):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    ckpt = {
        "missing checkpoint": str(tmp_path / "nope.ckpt"),
        "no config": str(checkpoint_without_config),
        "unwritable output": "last",
    }[case]
    output = (
        out_dir / "missing_dir" / "p.onnx" if case == "unwritable output" else out_dir / "p.onnx"
    )
    status = main(
        ["--ckpt_path", ckpt, "--run_dir", str(appo_cartpole_run), "--output", str(output)]
    )
    err = capsys.readouterr().err
    assert status == 2
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert list(out_dir.rglob("*")) == []


def test_quadruped_deployment_metadata_round_trips_through_onnx_and_program(tmp_path):
    run = _trained_like(FastSAC, "QuadrupedJoystick", 45, 12)
    onnx_path, program_path = tmp_path / "policy.onnx", tmp_path / "policy.pt2"
    metadata = export_policy(run, onnx_path, program_path)
    env = run.task.build(1)
    expected = env.deployment_metadata()
    onnx_meta = _onnx_metadata(onnx_path)
    _, program_meta = _read_program(program_path)
    assert program_meta == json.loads(json.dumps(metadata)) and set(onnx_meta) == set(metadata)
    for key, value in expected.items():
        assert json.loads(onnx_meta[key]) == program_meta[key] == value, key
    assert json.loads(onnx_meta["control_dt"]) == pytest.approx(0.02)
    assert "action_offset + action_scale" in onnx_meta["action_scaling"]


def test_gymnasium_task_exports_without_deployment_keys(tmp_path):
    run = _trained_like(FastTD3, "gym:Pendulum-v1", 3, 1)
    metadata = export_policy(run, tmp_path / "policy.onnx", tmp_path / "policy.pt2")
    assert "joint_names" not in metadata and "no rescaling" in metadata["action_scaling"]
