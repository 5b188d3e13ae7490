"""EnvStepBudget: fits end at an env-step budget, write last.ckpt, and a resume keeps the budget."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from tests.collector_fits import collector_trainer
from tests.conftest import REPO
from tests.test_cli import assert_smoke_fit
from tests.test_resume import NUM_ENVS, NUM_STEPS, OFF_ENVS
from tests.test_resume import _build as synchronous_appo
from tests.test_resume import _build_offpolicy as synchronous_fast_td3
from unilab_lit.callbacks import EnvStepBudget, StopCheckpoint
from unilab_lit.telemetry.metrics import BUDGET_SPENT

# Synchronous APPO stages exactly one rollout per iteration, so it learns exactly this many.
APPO_ITERATION = NUM_ENVS * NUM_STEPS
APPO_BUDGET = 6 * APPO_ITERATION


def _fit(build, root: Path, budget: int, max_steps: int = 100, ckpt_path: Path | None = None):
    """``build()``'s model and data fitted under ``EnvStepBudget(budget)``; ``last.ckpt`` in ``root``."""
    model, data = build()
    trainer = collector_trainer(
        max_steps,
        EnvStepBudget(budget),
        StopCheckpoint(dirpath=root, save_last=True),
        enable_checkpointing=True,
    )
    trainer.fit(model, datamodule=data, ckpt_path=ckpt_path)
    return trainer, data


def _last(root: Path) -> dict:
    return torch.load(root / "last.ckpt", weights_only=True)


def test_appo_fit_ends_at_the_iteration_that_reaches_the_budget_and_writes_last(tmp_path):
    trainer, data = _fit(synchronous_appo, tmp_path, APPO_BUDGET - 1)
    assert data.feed.learned_env_steps == APPO_BUDGET
    # The share spent that the progress bar projects its total from.
    assert float(trainer.callback_metrics[BUDGET_SPENT]) == pytest.approx(
        APPO_BUDGET / (APPO_BUDGET - 1)
    )
    assert trainer.global_step == APPO_BUDGET // APPO_ITERATION
    saved = _last(tmp_path)
    assert saved["global_step"] == trainer.global_step
    assert saved["RolloutDataModule"]["learned_env_steps"] == APPO_BUDGET


def test_offpolicy_fit_ends_within_one_iteration_past_the_budget(tmp_path):
    budget = 50
    trainer, data = _fit(synchronous_fast_td3, tmp_path, budget)
    learned = data.feed.learned_env_steps
    assert budget <= learned < budget + OFF_ENVS  # one iteration steps each env once
    assert 0 < trainer.global_step < 100
    assert _last(tmp_path)["ReplayDataModule"]["learned_env_steps"] == learned


def test_fit_stopped_halfway_and_resumed_ends_at_the_same_total_budget(tmp_path):
    last = tmp_path / "last.ckpt"
    first, _ = _fit(synchronous_appo, tmp_path, APPO_BUDGET, max_steps=2)
    assert first.global_step == 2
    trainer, data = _fit(synchronous_appo, tmp_path, APPO_BUDGET, ckpt_path=last)
    assert data.feed.learned_env_steps == APPO_BUDGET
    assert trainer.global_step == APPO_BUDGET // APPO_ITERATION
    # Resumed with the budget spent: the fit ends before its first iteration.
    again, data = _fit(synchronous_appo, tmp_path, APPO_BUDGET, ckpt_path=last)
    assert again.global_step == trainer.global_step
    assert data.feed.learned_env_steps == APPO_BUDGET


def test_budget_below_one_env_step_is_refused():
    with pytest.raises(ValueError, match="max_env_steps must be >= 1, got 0"):
        EnvStepBudget(0)


def test_cli_fit_of_the_shipped_appo_config_ends_at_its_budget_and_exits_zero(tmp_path, marked_env):
    num_envs, num_steps = 16, 8
    config = yaml.safe_load((REPO / "configs" / "appo.yaml").read_text())
    staging_capacity = config["data"]["init_args"]["staging_capacity"]
    budget_entry = config["trainer"]["callbacks"][0]
    assert budget_entry["class_path"] == "unilab_lit.callbacks.EnvStepBudget"
    budget = 10 * num_envs * num_steps + 1
    budget_entry["init_args"]["max_env_steps"] = budget
    path = tmp_path / "appo_budget.yaml"
    path.write_text(yaml.safe_dump(config))
    result = assert_smoke_fit(
        str(path),
        [
            "--trainer.max_steps=1000",
            "--trainer.enable_progress_bar=false",
            f"--data.init_args.collector.num_envs={num_envs}",
            f"--data.init_args.num_steps={num_steps}",
        ],
        tmp_path,
        marked_env,
    )
    (last,) = tmp_path.rglob("last.ckpt")
    learned = torch.load(last, weights_only=True)["RolloutDataModule"]["learned_env_steps"]
    # One iteration learns at most the staging pool's rollouts.
    assert budget <= learned < budget + staging_capacity * num_envs * num_steps
    assert f"env-step budget reached: {learned} learned env steps" in result.stderr
