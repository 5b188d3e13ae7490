"""CLI smoke tests of the QuadrupedJoystick configs: ``cli.py`` as a real subprocess, per config."""

from __future__ import annotations

import pytest

from tests.test_cli import SMOKE_OVERRIDES, assert_no_leftovers, run_cli


@pytest.mark.parametrize(
    "config", ["configs/appo_quadruped.yaml", "configs/appo_quadruped_2core.yaml"]
)
def test_quadruped_config_fit_writes_checkpoint_and_events_without_leaks(
    config, tmp_path, marked_env
):
    env, mark = marked_env
    result = run_cli(
        [
            "fit",
            "--config",
            config,
            *SMOKE_OVERRIDES,
            # The many-core config picks a GPU where there is one; the smoke test runs on CPU.
            "--trainer.accelerator=cpu",
            f"--trainer.logger.init_args.save_dir={tmp_path}",
        ],
        env,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert list(tmp_path.rglob("last.ckpt")), "no last.ckpt written"
    assert list(tmp_path.rglob("events.out.tfevents*")), "no TensorBoard events written"
    assert_no_leftovers(result, mark)
