"""A 2-rank DDP fit through ``cli.py`` to its normal end, and a DDP resume to its env-step budget."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.journeys.cli_runs import fit, report, succeeded

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
        "--trainer.callbacks+=callbacks.EnvStepBudget",
        f"--trainer.callbacks.max_env_steps={budget}",
    )
    assert succeeded(done), report(done)
    assert "env-step budget reached" in done.stderr
    assert "run summary" in done.stderr
