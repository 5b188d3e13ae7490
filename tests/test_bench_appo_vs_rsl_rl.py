"""``bench/appo_vs_rsl_rl.py --smoke``: both sides train a task given by class path, end to end,
watching one of its per-episode metrics."""

from __future__ import annotations

import importlib
import math
import os
import re
import subprocess
import sys

import pytest
import yaml

from tests.conftest import REPO

METRIC = "tracking_error_lin_vel"


def test_bench_runs_both_sides_on_a_class_path_task_to_a_metric_threshold(tmp_path):
    with open(REPO / "configs" / "appo.yaml") as f:
        config = yaml.safe_load(f)
    collector = config["data"]["init_args"]["collector"]
    collector["task"] = {
        "class_path": "unilab_lit.envs.quadruped.QuadrupedJoystick",
        "init_args": {"max_episode_steps": 40},
    }
    collector["num_envs"] = 8
    config["data"]["init_args"]["num_steps"] = 8
    path = tmp_path / "appo_class_path.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    done = subprocess.run(
        [
            sys.executable,
            "bench/appo_vs_rsl_rl.py",
            "--smoke",
            f"--config={path}",
            f"--metric={METRIC}",
            "--below",
            "--threshold=0",  # a tracking error never reaches 0: both sides run the smoke time
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )

    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert f"threshold: mean {METRIC} of the last 100 episodes <= 0.0" in lines[0]
    # 40-step episodes end within the few seconds: each side reports finite episode means.
    ours = next(line for line in lines if line.startswith("ours    seed 0"))
    theirs = next(line for line in lines if line.startswith("rsl_rl  seed 0"))
    for line in (ours, theirs):
        assert "NOT reached" in line, line
        assert "mean return    nan" not in line, line
        error = float(re.search(rf"{METRIC} (\S+)", line).group(1))
        assert math.isfinite(error) and error > 0, line
        assert "optimiser steps per 1k env steps" in line, line
    assert "grain" in ours
    assert any(line.startswith("        where the samples went:") for line in lines)
    assert any(line.startswith("seed 0: time ours / rsl_rl") for line in lines)


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(REPO / "bench"))  # the script imports its neighbour
    return importlib.import_module("appo_vs_rsl_rl")


def test_a_metric_the_task_lacks_is_refused_naming_the_ones_it_has(bench):
    with pytest.raises(ValueError, match="tracking_eror.*it has return, tracking_error_lin_vel"):
        bench._check_metric("tracking_eror", ("tracking_error_lin_vel",))
    bench._check_metric("return", ())


def test_errors_are_reached_from_above_and_returns_from_below(bench):
    assert bench.reached(0.2, 0.285, below=True) and not bench.reached(0.3, 0.285, below=True)
    assert bench.reached(10.0, 10.0, below=False) and not bench.reached(9.9, 10.0, below=False)
    assert not bench.reached(float("nan"), 0.285, below=True)  # no episode has finished yet
