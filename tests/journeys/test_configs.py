"""Each shipped config as a user takes it, through ``cli.py`` from a run folder: a short fit, a
``--ckpt_path last`` resume, ``play`` with a video, and ``export`` read back against the
checkpoint's own policy. Only the sizes are shrunk (envs, steps, batch); the checkpoint, logger
and callback settings are the config's own."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import numpy as np
import onnxruntime
import pytest
import torch

from tests.journeys.cli_runs import assert_no_leftovers, fit, report, run, succeeded
from unilab_lit.app.export import METADATA_FILE
from unilab_lit.app.trained_run import load_trained_run

APPO_SIZES = ("--data.init_args.collector.num_envs=16", "--data.init_args.num_steps=8")
# learning_starts=2 keeps the off-policy warm-up short.
OFFPOLICY_SIZES = (
    "--data.init_args.collector.num_envs=4",
    "--data.init_args.batch_size=16",
    "--data.init_args.learning_starts=2",
)
# (config, its shrunk sizes, whether it needs the fetched robot models, marks)
_SLOW = [pytest.mark.slow]
CONFIGS = [
    ("appo.yaml", APPO_SIZES, False, []),
    # Whole journey slow, its fit by default (see FIT_ONLY): as appo.yaml's.
    ("appo_halfcheetah.yaml", APPO_SIZES, False, _SLOW),
    # Slow (pytest -m slow), to keep CI's default run within its 30 minutes on 2 cores: each has
    # the same structure (algorithm, callbacks, logger, checkpoint settings) as a config that runs
    # by default: hopper and ant as appo_halfcheetah (the same built-in MuJoCo task family),
    # appo_quadruped as appo_quadruped_2core (the same task, bigger sizes), fast_sac_humanoid as
    # fast_sac.
    ("appo_hopper.yaml", APPO_SIZES, False, _SLOW),
    ("appo_ant.yaml", APPO_SIZES, False, _SLOW),
    ("appo_quadruped.yaml", APPO_SIZES, False, _SLOW),
    # Whole journey slow, its fit by default: as appo_go1.yaml's (a legged task, the same
    # callbacks and checkpoint settings).
    ("appo_quadruped_2core.yaml", APPO_SIZES, False, _SLOW),
    ("appo_go1.yaml", APPO_SIZES, True, []),
    # Slow: the same algorithm, callbacks and checkpoint settings as appo_go1.yaml; its task runs
    # by default in fast_sac_g1.yaml's journey.
    ("appo_g1.yaml", APPO_SIZES, True, _SLOW),
    # Same task and settings as appo_go1.yaml; only the (shrunk) sizes differ.
    ("appo_go1_gpu.yaml", APPO_SIZES, True, _SLOW),
    ("fast_td3.yaml", OFFPOLICY_SIZES, False, []),
    # Whole journey slow, its fit by default: as fast_sac_g1.yaml's (FastSAC, the same callbacks);
    # its replay sidecar (RLCheckpoint save_replay) through fit, kill and resume: tests/faults/.
    ("fast_sac.yaml", OFFPOLICY_SIZES, False, _SLOW),
    ("fast_sac_humanoid.yaml", OFFPOLICY_SIZES, False, _SLOW),
    ("fast_sac_g1.yaml", OFFPOLICY_SIZES, True, []),
]
# Configs of a joystick task, whose play reports the tracking errors against standing still's.
JOYSTICK = {
    "appo_quadruped.yaml",
    "appo_quadruped_2core.yaml",
    "appo_go1.yaml",
    "appo_g1.yaml",
    "appo_go1_gpu.yaml",
    "fast_sac_g1.yaml",
}
# Configs whose whole journey is slow but whose fit runs by default, so that every config with a
# whole journey elsewhere still starts from the CLI in CI's default run.
FIT_ONLY = ("appo_halfcheetah.yaml", "appo_quadruped_2core.yaml", "fast_sac.yaml")


def _params(configs):
    return [
        pytest.param(config, sizes, robot, id=config.removesuffix(".yaml"), marks=marks)
        for config, sizes, robot, marks in configs
    ]


FIRST_STEPS, RESUMED_STEPS = 2, 4


def _newest_last_checkpoint(cwd: Path) -> Path:
    return max((cwd / "runs").rglob("last*.ckpt"), key=lambda path: path.stat().st_mtime)


def _global_step(checkpoint: Path) -> int:
    return torch.load(checkpoint, map_location="cpu", weights_only=True)["global_step"]


def _fit(config: str, cwd: Path, sizes: tuple[str, ...], *extra: str) -> None:
    """A fit on CPU (a config for a GPU machine picks it where there is one) that exits 0 and
    leaves no process or shared memory behind."""
    mark = uuid.uuid4().hex
    done = fit(config, cwd, *sizes, "--trainer.accelerator=cpu", *extra, mark=mark)
    assert succeeded(done), report(done)
    assert "run summary" in done.stderr, report(done)
    assert_no_leftovers(done, mark)


def _assert_exported_policy_is_the_checkpoints(cwd: Path, config: str) -> None:
    onnx_path, program_path = cwd / "policy.onnx", cwd / "policy.pt2"
    done = run(["-m", "unilab_lit.app.export", "--ckpt_path", "last", "--config", config,
                "--output", str(onnx_path)], cwd)  # fmt: skip
    assert succeeded(done), report(done)
    model = load_trained_run("last", run_dir=cwd / "runs").model.eval()
    raw = torch.randn(8, model.hparams.policy_obs_size) * 3.0
    with torch.no_grad():
        expected = model.collector_policy()(model.obs_normalizer(raw)).numpy()
    session = onnxruntime.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    (from_onnx,) = session.run(None, {"obs": raw.numpy()})
    np.testing.assert_allclose(from_onnx, expected, atol=1e-5, rtol=0)
    extra = {METADATA_FILE: ""}
    program = torch.export.load(program_path, extra_files=extra).module()
    with torch.no_grad():
        np.testing.assert_allclose(program(raw).numpy(), expected, atol=1e-5, rtol=0)
    assert json.loads(extra[METADATA_FILE])["global_step"] == RESUMED_STEPS


@pytest.mark.parametrize(("config", "sizes", "robot"), _params(CONFIGS))
def test_config_fits_resumes_plays_a_video_and_exports(config, sizes, robot, tmp_path, request):
    if robot:
        request.getfixturevalue("robot_models")
    _fit(config, tmp_path, sizes, f"--trainer.max_steps={FIRST_STEPS}")
    first = _newest_last_checkpoint(tmp_path)
    assert _global_step(first) == FIRST_STEPS
    assert list((tmp_path / "runs").rglob("events.out.tfevents*")), "no TensorBoard events"

    _fit(config, tmp_path, sizes, "--ckpt_path=last", f"--trainer.max_steps={RESUMED_STEPS}")
    assert _global_step(_newest_last_checkpoint(tmp_path)) == RESUMED_STEPS

    clip = tmp_path / "clip.mp4"
    done = run(["-m", "unilab_lit.app.play", "--ckpt_path", "last", "--config", config,
                "--episodes", "1", "--num_envs", "1", "--video", str(clip),
                "--width", "64", "--height", "48", "--max_frames", "6"], tmp_path)  # fmt: skip
    assert succeeded(done), report(done)
    assert "mean return" in done.stdout, done.stdout
    assert ("x standing still's" in done.stdout) == (config in JOYSTICK), done.stdout
    assert clip.read_bytes()[4:8] == b"ftyp", "not an MP4 file"
    assert not list(tmp_path.glob(".*partial")), "a partial clip was left"

    _assert_exported_policy_is_the_checkpoints(tmp_path, config)


@pytest.mark.parametrize(
    ("config", "sizes", "robot"),
    _params(
        (config, sizes, robot, []) for config, sizes, robot, _ in CONFIGS if config in FIT_ONLY
    ),
)
def test_config_fits_from_a_run_folder_with_a_checkpoint_and_events(
    config, sizes, robot, tmp_path, request
):
    if robot:
        request.getfixturevalue("robot_models")
    _fit(config, tmp_path, sizes, f"--trainer.max_steps={FIRST_STEPS}")
    assert _global_step(_newest_last_checkpoint(tmp_path)) == FIRST_STEPS
    assert list((tmp_path / "runs").rglob("events.out.tfevents*")), "no TensorBoard events"
