"""Hand-built states of a legged robot task, for the reward-term tests of each robot."""

from __future__ import annotations

import numpy as np

from unilab_lit.envs.robots.legged import LeggedRobotEnv


def resting_env(task: type[LeggedRobotEnv]) -> LeggedRobotEnv:
    """Two envs of ``task``, unrandomised, reset without the timeout stagger."""
    env = task(num_envs=2, seed=0, randomization=None)
    env.reset(stagger=False)
    return env


def pose(env: LeggedRobotEnv, *, height: float, joints: np.ndarray | None = None) -> None:
    """Both envs upright at ``height`` with ``joints`` (default: home), at rest, and the
    kinematics that the terms read brought up to date."""
    env.qpos[:] = env.robot.home_qpos
    env.qpos[:, 2] = height
    if joints is not None:
        env.qpos[:, env._qpos_adr] = joints
    env.qvel[:] = 0.0
    env.batch.forward(np.arange(env.num_envs))


def raw_terms(env: LeggedRobotEnv, lin_vel=None, ang_vel=None) -> dict[str, np.ndarray]:
    """Every unweighted reward term at body-frame velocities ``lin_vel`` and ``ang_vel``
    (``[2, 3]``; default: at rest)."""
    zeros = np.zeros((env.num_envs, 3))
    lin = zeros if lin_vel is None else np.asarray(lin_vel, dtype=float)
    ang = zeros if ang_vel is None else np.asarray(ang_vel, dtype=float)
    return env._raw_reward_terms(lin, ang)


def check_tracking_and_velocity_terms(env: LeggedRobotEnv, height: float) -> None:
    """The terms both robots share: tracking is 1 on the command and falls off with sigma 0.25;
    the penalties are the squares of the vertical and the roll and pitch rates."""
    pose(env, height=height)
    env._tracked_command[:] = [[0.5, 0.2, 0.3], [0.5, 0.2, 0.3]]
    terms = raw_terms(env, lin_vel=[[0.5, 0.2, 0.0], [0.0, 0.2, 0.0]], ang_vel=[[0, 0, 0.3]] * 2)
    np.testing.assert_allclose(terms["tracking_lin_vel"], [1.0, np.exp(-0.25 / 0.25)])
    np.testing.assert_allclose(terms["tracking_ang_vel"], [1.0, 1.0])
    terms = raw_terms(env, lin_vel=[[0, 0, 0.5], [0, 0, 0]], ang_vel=[[0.3, 0.4, 2.0], [0, 0, 2.0]])
    np.testing.assert_allclose(terms["lin_vel_z"], [0.25, 0.0])
    np.testing.assert_allclose(terms["ang_vel_xy"], [0.25, 0.0])
