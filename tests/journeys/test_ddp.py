"""A 2-rank DDP fit through ``cli.py`` to its normal end, a DDP resume to its env-step budget,
and a DDP fit stopped by SIGTERM to its process group, as a scheduler preempts a job."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.journeys.cli_runs import CLI, fit, report, succeeded, user_env

DDP = ("--trainer.strategy=ddp", "--trainer.devices=2", "--trainer.accelerator=cpu")
# One APPO and one off-policy config; a few iterations each, then a resume whose env-step
# budget (added next to the config's own) is spent after a few more.
CONFIGS = {"appo.yaml": (20, 80_000), "fast_td3.yaml": (20, 40_000)}


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def ddp_run(request, tmp_path_factory) -> tuple[str, Path, object]:
    config = request.param
    cwd = tmp_path_factory.mktemp(config.removesuffix(".yaml"))
    steps, _ = CONFIGS[config]
    return config, cwd, fit(config, cwd, *DDP, f"--trainer.max_steps={steps}")


def test_ddp_fit_ends_with_exit_0_a_summary_and_a_last_checkpoint(ddp_run):
    _, cwd, done = ddp_run
    assert succeeded(done), report(done)
    assert "run summary" in done.stderr
    assert len(list((cwd / "runs").rglob("last.ckpt"))) == 1


def test_ddp_resume_that_ends_at_its_env_step_budget_exits_0(ddp_run):
    config, cwd, first = ddp_run
    assert succeeded(first), report(first)
    _, budget = CONFIGS[config]
    done = fit(
        config,
        cwd,
        *DDP,
        "--ckpt_path=last",
        "--trainer.callbacks+=unilab_lit.callbacks.EnvStepBudget",
        f"--trainer.callbacks.max_env_steps={budget}",
    )
    assert succeeded(done), report(done)
    assert "env-step budget reached" in done.stderr
    assert "run summary" in done.stderr


def test_ddp_fit_sigterm_to_its_process_group_exits_143_with_a_resumable_last_checkpoint(tmp_path):
    log_path = tmp_path / "stderr.log"
    with log_path.open("w") as log_file:
        job = subprocess.Popen(
            [sys.executable, CLI, "fit", "--config", "appo.yaml", *DDP,
             "--trainer.enable_progress_bar=false"],
            cwd=tmp_path, env=user_env(), stdout=subprocess.DEVNULL, stderr=log_file,
            start_new_session=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 300
            # Both ranks' collectors are up: training starts within moments.
            while log_path.read_text().count("ready in") < 2:
                assert job.poll() is None, log_path.read_text()[-4000:]
                assert time.monotonic() < deadline, "the ranks never started"
                time.sleep(0.2)
            time.sleep(3.0)
            os.killpg(job.pid, signal.SIGTERM)
            job.wait(timeout=300)
        finally:
            if job.poll() is None:
                os.killpg(job.pid, signal.SIGKILL)
    stderr = log_path.read_text()
    assert job.returncode == 143, stderr[-4000:]
    assert "stopped by a termination signal" in stderr and "terminate called" not in stderr
    (checkpoint,) = (tmp_path / "runs").rglob("last.ckpt")
    step = torch.load(checkpoint, map_location="cpu", weights_only=True)["global_step"]
    assert step >= 1
    resumed = fit(
        "appo.yaml", tmp_path, *DDP, "--ckpt_path=last", f"--trainer.max_steps={step + 2}"
    )
    assert succeeded(resumed), report(resumed)
    assert "run summary" in resumed.stderr
