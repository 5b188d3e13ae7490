"""G1Walk's reward terms, the seed's definitions, each on a hand-built state: its value at a
known pose, velocity or gait phase, and its sign in the default weights; and the seed's gait
clock, commands and termination."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from tests.envs.legged_states import (
    check_tracking_and_velocity_terms,
    pose,
    raw_terms,
    resting_env,
)
from unilab_lit.envs.robots.g1 import (
    DEFAULT_REWARD_WEIGHTS,
    FEET_PHASE_SIGMA,
    G1Walk,
    swing_height_targets,
)


@pytest.fixture
def env(robot_models):
    return resting_env(G1Walk)


_pose = functools.partial(pose, height=0.754)
_terms = raw_terms


def _quat_about_x(angle: float) -> np.ndarray:
    return np.array([np.cos(angle / 2), np.sin(angle / 2), 0.0, 0.0])


def test_default_weights_are_the_seed_g1_scales_and_signs_with_the_sac_terms_off():
    assert dict(DEFAULT_REWARD_WEIGHTS) == {
        "tracking_lin_vel": 2.0,
        "tracking_ang_vel": 0.2,
        "feet_phase": 1.0,
        "lin_vel_z": -1.0,
        "ang_vel_xy": -0.25,
        "base_height": -500.0,
        "orientation": -5.0,
        "action_rate": -0.01,
        "pose": -0.1,
        "alive": 0.0,
        "feet_orientation": 0.0,
    }


def test_tracking_and_velocity_terms_are_the_shared_definitions(env):
    check_tracking_and_velocity_terms(env, height=0.754)


def test_base_height_is_the_squared_distance_to_0754(env):
    _pose(env, height=0.704)
    np.testing.assert_allclose(_terms(env)["base_height"], [0.0025, 0.0025])


def test_orientation_is_the_torsos_tilt_squared_sine(env):
    _pose(env)
    env.qpos[0, 3:7] = _quat_about_x(0.3)  # the whole robot rolled 0.3 rad
    env.batch.forward(np.arange(2))
    np.testing.assert_allclose(_terms(env)["orientation"], [np.sin(0.3) ** 2, 0.0], atol=1e-9)


def test_pose_weights_hold_the_waist_and_arms_and_free_the_hip_pitch_and_knees(env):
    weights = dict(zip(env.joint_names, env.pose_weights, strict=True))
    assert weights["left_hip_pitch_joint"] == weights["right_knee_joint"] == 0.01
    assert weights["left_hip_roll_joint"] == 1.0
    assert weights["right_hip_yaw_joint"] == weights["left_ankle_roll_joint"] == 5.0
    assert weights["waist_pitch_joint"] == weights["right_wrist_yaw_joint"] == 50.0
    assert env.pose_weights.tolist().count(50.0) == 17  # the waist's 3 and the arms' 14


def test_pose_is_the_weighted_squared_distance_to_home(env):
    joints = np.tile(env.default_joint_pos, (2, 1))
    names = list(env.joint_names)
    joints[0, names.index("left_knee_joint")] += 0.5  # 0.01 x 0.25
    joints[0, names.index("waist_yaw_joint")] -= 0.1  # 50 x 0.01
    _pose(env)
    env.qpos[:, env._qpos_adr] = joints
    np.testing.assert_allclose(_terms(env)["pose"], [0.0025 + 0.5, 0.0])


def test_action_rate_is_the_squared_change_of_action(env):
    _pose(env)
    env._previous_action[:] = 0.0
    env._last_action[:] = 0.0
    env._last_action[0, :2] = [0.5, -0.5]
    np.testing.assert_allclose(_terms(env)["action_rate"], [0.5, 0.0])


def test_swing_height_target_peaks_at_cycle_0_and_is_on_the_ground_at_half_a_cycle():
    cycles = np.array([0.0, 0.25, 0.5, 0.75, 0.125])
    # A smoothstep of the distance from cycle 0.5: 3t^2 - 2t^3 at t = 1, 0.5, 0, 0.5, 0.75.
    expected = 0.09 * np.array([1.0, 0.5, 0.0, 0.5, 3 * 0.75**2 - 2 * 0.75**3])
    np.testing.assert_allclose(swing_height_targets(cycles, 0.09), expected, atol=1e-15)


def test_feet_phase_is_one_with_both_feet_on_their_targets_and_falls_off_with_sigma(env):
    # Lift the home pose until both feet are at 0.045 m, half the swing height.
    _pose(env)
    feet = env.robot.foot_site_ids
    env.qpos[:, 2] += 0.045 - env._site_xpos[:, feet, 2].mean(axis=1)
    env.batch.forward(np.arange(2))
    np.testing.assert_allclose(env._site_xpos[:, feet, 2], 0.045, atol=1e-9)
    # Env 0: both feet a quarter cycle from the top, target 0.045 m. Env 1: the left foot at
    # its top (target 0.09 m), the right one on the ground (0): each 0.045 m off.
    env._foot_cycles = np.array([[0.25, 0.75], [0.0, 0.5]])
    expected = [1.0, np.exp(-2 * 0.045**2 / FEET_PHASE_SIGMA)]
    np.testing.assert_allclose(_terms(env)["feet_phase"], expected, rtol=1e-6)


def test_alive_is_one_per_step(env):
    np.testing.assert_array_equal(_terms(env)["alive"], [1.0, 1.0])


def test_feet_orientation_is_each_foots_squared_tilt_quaternion(env):
    _pose(env)
    names = list(env.joint_names)
    # Env 0 rolls its left ankle by 0.2 rad: the foot's quaternion gains x = sin(0.1).
    env.qpos[0, env._qpos_adr[names.index("left_ankle_roll_joint")]] = 0.2
    env.batch.forward(np.arange(2))
    value = _terms(env)["feet_orientation"]
    # At home the feet are flat (the knee and the ankle pitch undo the hip pitch).
    assert value[1] < 1e-4
    np.testing.assert_allclose(value[0] - value[1], np.sin(0.1) ** 2, atol=2e-3)


def test_a_25_degree_torso_tilt_or_a_low_pelvis_terminates(env):
    _pose(env)
    env.qpos[0, 3:7] = _quat_about_x(np.deg2rad(26.0))
    env.batch.forward(np.arange(2))
    assert env._compute_terminated().tolist() == [True, False]
    _pose(env, height=0.5)
    assert env._compute_terminated().tolist() == [True, True]


def test_the_gait_clock_starts_at_a_phase_drawn_per_episode_and_the_right_foot_follows(env):
    starts = env._phase_start.copy()
    assert np.all((starts >= 0) & (starts < 2 * np.pi)) and starts[0] != starts[1]
    policy = env._compute_obs()["policy"]
    start, stop = env.spec.policy_obs_slices()["gait_phase"]
    np.testing.assert_allclose(policy[:, start:stop], np.c_[np.cos(starts), np.sin(starts)])
    env.step(np.zeros((2, 29), dtype=np.float32))
    cycles = (starts[:, None] / (2 * np.pi) + [0.0, 0.5]) % 1.0
    np.testing.assert_allclose(env._foot_cycles, cycles, atol=1e-12)


def test_commands_are_drawn_once_in_the_seed_ranges_with_slow_planar_ones_zeroed(robot_models):
    env = G1Walk(num_envs=256, seed=0, randomization=None)
    env.reset(stagger=False)
    commands = env._command.copy()
    assert np.all(commands.min(axis=0) >= [-0.6, -0.4, -0.8])
    assert np.all(commands.max(axis=0) <= [1.0, 0.4, 0.8])
    planar = np.linalg.norm(commands[:, :2], axis=1)
    assert np.all((planar == 0.0) | (planar > 0.2)) and np.any(planar == 0.0)
    assert env._command_resample_steps == 0


def test_the_seed_actuation_and_reset_are_the_defaults(env):
    np.testing.assert_allclose(env.action_scale, 0.25)
    # The base starts with up to 0.5 m/s and rad/s, the joints at home.
    assert 0 < np.abs(env.qvel[:, :6]).max() <= 0.5
    np.testing.assert_allclose(env.qpos[:, env._qpos_adr], np.tile(env.default_joint_pos, (2, 1)))
