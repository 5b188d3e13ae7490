"""``bench/appo_vs_rsl_rl.py --smoke``: both sides train a task given by class path, end to end."""

from __future__ import annotations

import os
import subprocess
import sys

import yaml

from tests.conftest import REPO


def test_bench_runs_both_sides_on_a_class_path_task(tmp_path):
    with open(REPO / "configs" / "appo.yaml") as f:
        config = yaml.safe_load(f)
    collector = config["data"]["init_args"]["collector"]
    collector["task"] = {
        "class_path": "unilab_lit.envs.cartpole.CartpoleSwingup",
        "init_args": {"max_episode_steps": 50},
    }
    collector["num_envs"] = 8
    config["data"]["init_args"]["num_steps"] = 8
    path = tmp_path / "appo_class_path.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    done = subprocess.run(
        [sys.executable, "bench/appo_vs_rsl_rl.py", "--smoke", f"--config={path}"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )

    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    # 50-step episodes end within the few seconds: each side reports a finite mean return.
    ours = next(line for line in lines if line.startswith("ours    seed 0"))
    theirs = next(line for line in lines if line.startswith("rsl_rl  seed 0"))
    for line in (ours, theirs):
        assert "mean return    nan" not in line, line
        assert "optimiser steps per 1k env steps" in line, line
    assert "grain" in ours
    assert any(line.startswith("        where the samples went:") for line in lines)
    assert any(line.startswith("seed 0: time ours / rsl_rl") for line in lines)
