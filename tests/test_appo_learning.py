"""APPO learns CartpoleSwingup through the real CLI, collector and checkpoint."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import torch

from tests.conftest import REPO
from unilab_lit.algos.appo import APPO
from unilab_lit.envs import make_env
from unilab_lit.envs.spec import POLICY

NUM_EVAL_ENVS = 16
TRAIN_STEPS = 200
# Uniform random actions earn ~15 per 500-step episode. Collection is asynchronous, so how
# much data each iteration sees depends on machine load: 150 iterations gave 112-179 on a
# busy 2-core machine. The margin asks for more than 5x the random return.
MARGIN = 60.0


def _episode_return(policy, seed: int) -> float:
    env = make_env("CartpoleSwingup", NUM_EVAL_ENVS, seed=seed, max_episode_steps=500)
    obs = env.reset(seed=seed)
    total = np.zeros(NUM_EVAL_ENVS)
    # One full episode per env from an unstaggered start: reset() staggers the clocks, so
    # sum exactly max_episode_steps rewards per env regardless of where its timeout falls.
    for _ in range(env.spec.max_episode_steps):
        obs, reward, _, _, _ = env.step(policy(obs[POLICY]))
        total += reward
    env.close()
    return float(total.mean())


def test_appo_return_rises_clearly_above_random_policy(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "cli.py",
            "fit",
            "--config",
            "configs/appo.yaml",
            f"--trainer.max_steps={TRAIN_STEPS}",
            "--trainer.enable_progress_bar=false",
            f"--trainer.logger.init_args.save_dir={tmp_path}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    ckpt = next(tmp_path.rglob("last.ckpt"))
    model = APPO.load_from_checkpoint(ckpt, map_location="cpu").eval()

    @torch.no_grad()
    def trained(obs: np.ndarray) -> np.ndarray:
        return model.actor(model.obs_normalizer(torch.from_numpy(obs))).numpy()

    rng = np.random.default_rng(0)

    def random_policy(obs: np.ndarray) -> np.ndarray:
        return rng.uniform(-1.0, 1.0, size=(obs.shape[0], 1)).astype(np.float32)

    random_return = _episode_return(random_policy, seed=123)
    trained_return = _episode_return(trained, seed=123)
    print(f"CartpoleSwingup return: trained {trained_return:.1f}, random {random_return:.1f}")
    assert trained_return > random_return + MARGIN, (trained_return, random_return)
