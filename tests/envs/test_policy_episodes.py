"""``unilab_lit.envs.policy_episodes``: per-episode statistics of a batched env's episodes, and a
joystick task's tracking errors against standing still's on the same commands."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from unilab_lit.envs import make_env
from unilab_lit.envs.joystick import TRACKING_METRICS
from unilab_lit.envs.policy_episodes import EpisodeResults, run_episodes
from unilab_lit.envs.quadruped import QuadrupedJoystick
from unilab_lit.telemetry import metrics

LIN, YAW = TRACKING_METRICS
VS_STANDING = [metrics.eval_metric_vs_standing_still(name) for name in TRACKING_METRICS]


def _zero_action(obs: torch.Tensor) -> torch.Tensor:
    return torch.zeros(obs.shape[0], 12)


def _swinging_legs(obs: torch.Tensor) -> torch.Tensor:
    """A scripted deterministic policy that moves the joints with what it observes."""
    return 0.5 * torch.sin(3.0 * obs[:, :12])


def test_run_episodes_reports_the_tasks_episode_metrics_under_eval_keys():
    env = QuadrupedJoystick(num_envs=3, seed=0, max_episode_steps=20)
    results = run_episodes(env, _zero_action, 5, seed=2)
    env.close()
    assert set(results.metrics) == set(QuadrupedJoystick.EPISODE_METRICS)
    values = results.eval_metrics()
    for name, means in results.metrics.items():
        assert means.shape == (5,)
        assert values[metrics.eval_metric(name)] == pytest.approx(float(np.mean(means)))
    # Standing still: the robot barely moves, so the error is about the commanded speed.
    assert 0.05 < values["Eval/tracking_error_lin_vel"] < 1.2


def test_standing_still_reference_is_the_commanded_speed_on_fixed_commands():
    env = QuadrupedJoystick(
        num_envs=2,
        seed=0,
        max_episode_steps=30,
        lin_vel_x_range=(0.6, 0.6),
        lin_vel_y_range=(-0.8, -0.8),
        yaw_rate_range=(0.5, 0.5),
    )
    results = run_episodes(env, _swinging_legs, 3, seed=1)
    env.close()
    np.testing.assert_allclose(results.standing_still[LIN], [1.0] * 3, rtol=1e-6)
    np.testing.assert_allclose(results.standing_still[YAW], [0.5] * 3, rtol=1e-6)
    values = results.eval_metrics()
    assert values[VS_STANDING[0]] == pytest.approx(values[metrics.eval_metric(LIN)] / 1.0)
    assert values[VS_STANDING[1]] == pytest.approx(values[metrics.eval_metric(YAW)] / 0.5)
    assert values[metrics.EVAL_MEAN_EPISODE_LENGTH] == 30.0


def test_a_standing_policy_scores_its_reference_per_episode_as_commands_are_resampled():
    # The zero action holds the standing pose, so its errors are the reference's but for the
    # settling after each reset: the reference follows each episode's own resampled commands.
    env = QuadrupedJoystick(num_envs=2, seed=0, max_episode_steps=200, command_resample_steps=50)
    results = run_episodes(env, _zero_action, 4, seed=3)
    env.close()
    for name in TRACKING_METRICS:
        assert results.standing_still[name].shape == (4,)
        np.testing.assert_allclose(results.metrics[name], results.standing_still[name], atol=0.03)
        assert results.vs_standing_still(name) == pytest.approx(1.0, abs=0.03)


def test_the_ratio_is_of_the_means_and_a_zero_reference_gives_none():
    results = EpisodeResults(
        returns=np.zeros(2),
        lengths=np.full(2, 10),
        metrics={LIN: np.array([0.1, 0.3]), YAW: np.array([0.2, 0.4])},
        # An episode commanded to stand (reference 0.01) weighs by its reference, not 10x.
        standing_still={LIN: np.array([0.01, 0.79]), YAW: np.zeros(2)},
    )
    assert results.vs_standing_still(LIN) == pytest.approx(0.2 / 0.4)
    assert results.vs_standing_still(YAW) is None
    values = results.eval_metrics()
    assert values[VS_STANDING[0]] == pytest.approx(0.5)
    assert VS_STANDING[1] not in values


def test_tasks_without_tracking_errors_get_no_reference():
    env = make_env("CartpoleSwingup", 2, max_episode_steps=10)
    results = run_episodes(env, lambda obs: torch.zeros(obs.shape[0], 1), 2, seed=0)
    env.close()
    assert results.standing_still == {}
    assert not set(VS_STANDING) & set(results.eval_metrics())


@pytest.mark.parametrize("task", ["Go1Joystick", "G1Walk"])
def test_every_joystick_robot_gets_the_reference(robot_models, task):
    env = make_env(task, 2, seed=0, max_episode_steps=10)
    size = env.spec.action_size
    results = run_episodes(env, lambda obs: torch.zeros(obs.shape[0], size), 2, seed=0)
    env.close()
    assert set(results.standing_still) == set(TRACKING_METRICS)
    assert set(VS_STANDING) <= set(results.eval_metrics())
