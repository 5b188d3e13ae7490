"""Go1Joystick's reward terms, the seed's definitions, each on a hand-built state: its value at a
known pose, velocity or contact pattern, and its sign in the default weights."""

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
from unilab_lit.envs.robots.go1 import (
    DEFAULT_REWARD_WEIGHTS,
    SEED_PD_GAINS,
    STANCE_FRACTION,
    Go1Joystick,
)

# Feet in Go1Joystick's order: FR, FL, RR, RL.
_FR, _FL, _RR, _RL = range(4)


@pytest.fixture
def env(robot_models):
    return resting_env(Go1Joystick)


_pose = functools.partial(pose, height=0.3)
_terms = raw_terms


def test_default_weights_are_the_seed_go1_scales_and_signs():
    assert dict(DEFAULT_REWARD_WEIGHTS) == {
        "tracking_lin_vel": 1.0,
        "tracking_ang_vel": 0.2,
        "lin_vel_z": -5.0,
        "ang_vel_xy": -0.1,
        "base_height": -100.0,
        "action_rate": -0.005,
        "similar_to_default": -0.1,
        "swing_feet_z": 4.0,
        "contact": 0.24,
    }


def test_tracking_and_velocity_terms_are_the_shared_definitions(env):
    check_tracking_and_velocity_terms(env, height=0.3)


def test_base_height_is_the_squared_distance_to_030(env):
    _pose(env, height=0.25)
    np.testing.assert_allclose(_terms(env)["base_height"], [0.0025, 0.0025])


def test_similar_to_default_is_the_l1_distance_to_home(env):
    joints = env.default_joint_pos.copy()
    joints[0] += 0.2
    joints[5] -= 0.1
    _pose(env, joints=joints)
    np.testing.assert_allclose(_terms(env)["similar_to_default"], [0.3, 0.3])


def test_action_rate_is_the_squared_change_of_action(env):
    _pose(env)
    env._previous_action[:] = 0.0
    env._last_action[:] = 0.0
    env._last_action[0, :2] = [0.5, -0.5]
    np.testing.assert_allclose(_terms(env)["action_rate"], [0.5, 0.0])


def test_the_trot_clock_puts_diagonal_pairs_half_a_cycle_apart_with_60_percent_stance(env):
    # 2 Hz at 0.02 s: 25 steps a cycle. FL and RR start their cycle at 0, FR and RL at 0.5.
    stance = env._foot_cycles_at(np.array([0, 15])) < STANCE_FRACTION  # cycles 0.0 and 0.6
    assert stance[0].tolist() == [True, True, True, True]  # 0.5 < 0.6 and 0.0 < 0.6
    assert stance[1, [_FL, _RR]].tolist() == [False, False]  # 0.6: swing begins
    assert stance[1, [_FR, _RL]].tolist() == [True, True]  # 0.1


def test_contact_counts_the_feet_whose_contact_matches_their_phase(env):
    env._foot_cycles = env._foot_cycles_at(
        np.array([15, 15])
    )  # FL and RR in swing, FR and RL stance
    env._feet_contact[0] = [True, False, False, True]  # the trot: all four match
    env._feet_contact[1] = [False, True, True, False]  # the opposite: none does
    np.testing.assert_allclose(_terms(env)["contact"], [4.0, 0.0])


def test_swing_feet_z_rewards_swing_feet_near_010_and_ignores_stance_feet(env):
    # Lift the home pose until the feet are at 0.1 m (env 0) and 0.2 m (env 1).
    _pose(env)
    feet = env.robot.foot_site_ids
    foot_height = env._site_xpos[:, feet, 2].mean(axis=1)
    env.qpos[:, 2] += np.array([0.1, 0.2]) - foot_height
    env.batch.forward(np.arange(2))
    np.testing.assert_allclose(env._site_xpos[:, feet, 2], [[0.1] * 4, [0.2] * 4], atol=1e-9)
    env._foot_cycles = env._foot_cycles_at(np.array([15, 15]))  # FL and RR swing: two feet of four
    np.testing.assert_allclose(_terms(env)["swing_feet_z"], [0.5, 0.5 * np.exp(-1.0)])
    env._foot_cycles = env._foot_cycles_at(np.array([0, 0]))  # every foot in stance
    np.testing.assert_allclose(_terms(env)["swing_feet_z"], [0.0, 0.0])


def test_the_seed_actuation_and_commands_are_the_defaults(env):
    np.testing.assert_allclose(env.stiffness, SEED_PD_GAINS.stiffness)
    np.testing.assert_allclose(env.action_scale, 0.25)
    dofs = env.robot.joint_dof_adr
    np.testing.assert_allclose(env.model.dof_damping[dofs], 2.0)
    np.testing.assert_allclose(env.model.dof_frictionloss[dofs], 0.2)
    np.testing.assert_allclose(env.model.actuator_biasprm[:, 2], -0.5)
    commands = np.array(env._command)
    assert np.all(commands.min(axis=0) >= [-0.6, -0.4, -0.8])
    assert np.all(commands.max(axis=0) <= [1.0, 0.4, 0.8])
    for _ in range(600):  # past the 500 steps at which commands used to be redrawn
        env.step(np.zeros((2, 12), dtype=np.float32))
    # One command per episode: an env still in its first episode keeps its first command.
    unbroken = env._elapsed == 600
    assert unbroken.any()
    np.testing.assert_array_equal(env._command[unbroken], commands[unbroken])
