"""Unitree Go1 joystick on flat ground: the quadruped tracks (vx, vy, yaw rate) commands."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from unilab_lit.envs.joystick import LEGGED_GYM_WEIGHTS
from unilab_lit.envs.robots.legged import LeggedRobotEnv, robot_constructor
from unilab_lit.envs.robots.model import Motor, RobotDescription

# Go1 motors: one rotor (inertia 1.11842e-4 kg m^2) behind a 6:1 gearbox at hip and thigh and
# 9:1 at the knee (calf); peak torques 23.7 and 35.55 N m.
_ROTOR_INERTIA = 1.11842e-4
_HIP = Motor(armature=_ROTOR_INERTIA * 6.0**2, effort_limit=23.7)
_KNEE = Motor(armature=_ROTOR_INERTIA * 9.0**2, effort_limit=35.55)
_LEGS = ("FR", "FL", "RR", "RL")

GO1 = RobotDescription(
    folder="unitree_go1",
    base_body="trunk",
    motors=((r".*_(hip|thigh)_joint", _HIP), (r".*_calf_joint", _KNEE)),
    home_base_height=0.278,
    home_joints=(
        (r".*_thigh_joint", 0.9),
        (r".*_calf_joint", -1.8),
        (r".R_hip_joint", 0.1),
        (r".L_hip_joint", -0.1),
    ),
    # The centre of each foot sphere (radius 0.023 m) at the end of the calf.
    feet=tuple((f"{leg}_calf", (0.0, 0.0, -0.213)) for leg in _LEGS),
    timestep=0.01,
)

DEFAULT_REWARD_WEIGHTS: Mapping[str, float] = {
    **LEGGED_GYM_WEIGHTS,
    "feet_air_time": 1.0,
    "dof_pos_limits": -10.0,
}


class Go1Joystick(LeggedRobotEnv):
    """Unitree Go1 (12 joints) tracks body-frame velocity commands on flat ground.

    As the seed's ``Go1JoystickFlat``: policy observation 49 = gyro 3, projected gravity 3,
    joint-position offsets 12, joint velocities 12, last action 12, command 3 and a trot clock
    4 (cos and sin of the phase of each diagonal leg pair); critic 52 adds the body-frame linear
    velocity. 0.01 s physics steps, 2 per 0.02 s control step; 20 s episodes; terminated when
    the trunk's up axis has z <= 0.5 (``max_tilt_deg`` 60). legged_gym reward terms (see
    :mod:`unilab_lit.envs.robots.legged`), each logged as ``Episode/rew_<term>``, and the
    tracking-error metrics of :class:`unilab_lit.envs.quadruped.QuadrupedJoystick`.

    Args: as :class:`unilab_lit.envs.robots.legged.LeggedRobotEnv`.
    """

    ROBOT = GO1
    FRAME_SKIP = 2
    GAIT_PHASE_OFFSETS = (0.0, np.pi)
    UPRIGHT_BODY = "trunk"
    FOOT_CONTACT_HEIGHT = 0.03
    DEFAULT_REWARD_WEIGHTS = DEFAULT_REWARD_WEIGHTS

    __init__ = robot_constructor(
        action_scale_factor=0.5,
        lin_vel_x_range=(-1.0, 1.0),
        reset_joint_noise=0.1,
        gait_frequency=2.0,
        feet_air_time_target=0.2,
        base_height_target=0.27,
        min_base_height=0.0,
    )
