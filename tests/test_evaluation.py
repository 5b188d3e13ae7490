"""``unilab_lit.envs.policy_episodes.run_episodes``: per-episode statistics of a batched env's episodes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from unilab_lit.envs.policy_episodes import run_episodes
from unilab_lit.envs.quadruped import QuadrupedJoystick
from unilab_lit.telemetry import metrics


def test_run_episodes_reports_the_tasks_episode_metrics_under_eval_keys():
    env = QuadrupedJoystick(num_envs=3, seed=0, max_episode_steps=20)
    results = run_episodes(env, lambda obs: torch.zeros(obs.shape[0], 12), 5, seed=2)
    env.close()
    assert set(results.metrics) == set(QuadrupedJoystick.EPISODE_METRICS)
    values = results.eval_metrics()
    for name, means in results.metrics.items():
        assert means.shape == (5,)
        assert values[metrics.eval_metric(name)] == pytest.approx(float(np.mean(means)))
    # Standing still: the robot barely moves, so the error is about the commanded speed.
    assert 0.05 < values["Eval/tracking_error_lin_vel"] < 1.2
