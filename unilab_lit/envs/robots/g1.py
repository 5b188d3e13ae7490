"""Unitree G1 walking on flat ground: the 29-joint humanoid tracks (vx, vy, yaw rate) commands."""

from __future__ import annotations

from collections.abc import Mapping

from unilab_lit.envs.robots.legged import LeggedRobotEnv, robot_constructor
from unilab_lit.envs.robots.model import Motor, RobotDescription, two_stage_planetary

# G1 motors: rotor and planetary-stage inertias (kg m^2), the two stage ratios, peak torque (N m).
_M5020 = Motor(
    two_stage_planetary((0.139e-4, 0.017e-4, 0.169e-4), (1 + 46 / 18, 1 + 56 / 16)), 25.0
)
_M7520_14 = Motor(two_stage_planetary((0.489e-4, 0.098e-4, 0.533e-4), (4.5, 1 + 48 / 22)), 88.0)
_M7520_22 = Motor(two_stage_planetary((0.489e-4, 0.109e-4, 0.738e-4), (4.5, 5.0)), 139.0)
_M4010 = Motor(two_stage_planetary((0.068e-4, 0.0, 0.0), (5.0, 5.0)), 5.0)

G1 = RobotDescription(
    folder="unitree_g1",
    base_body="pelvis",
    motors=(
        (r".*_(elbow|shoulder_pitch|shoulder_roll|shoulder_yaw|wrist_roll)_joint", _M5020),
        (r".*_hip_pitch_joint|.*_hip_yaw_joint|waist_yaw_joint", _M7520_14),
        (r".*_hip_roll_joint|.*_knee_joint", _M7520_22),
        (r".*_wrist_(pitch|yaw)_joint", _M4010),
        # Waist pitch/roll and the ankles: two 5020 motors through a linkage, taken at 1:1.
        (r"waist_(pitch|roll)_joint|.*_ankle_(pitch|roll)_joint", _M5020.doubled()),
    ),
    home_base_height=0.76,
    home_joints=(
        (r".*_hip_pitch_joint", -0.312),
        (r".*_knee_joint", 0.669),
        (r".*_ankle_pitch_joint", -0.363),
        (r".*_elbow_joint", 0.6),
        (r".*_shoulder_pitch_joint", 0.2),
        (r"left_shoulder_roll_joint", 0.2),
        (r"right_shoulder_roll_joint", -0.2),
    ),
    # Mid-sole, at the bottom of the foot's contact capsules.
    feet=(
        ("left_ankle_roll_link", (0.04, 0.0, -0.035)),
        ("right_ankle_roll_link", (0.04, 0.0, -0.035)),
    ),
    timestep=0.02 / 3,
)

DEFAULT_REWARD_WEIGHTS: Mapping[str, float] = {
    "tracking_lin_vel": 1.0,
    "tracking_ang_vel": 0.5,
    "orientation": -2.0,
    "base_height": -10.0,
    "feet_air_time": 1.0,
    "feet_slip": -0.1,
    "action_rate": -0.01,
    "torques": -1e-5,
    "dof_pos_limits": -5.0,
}


class G1Walk(LeggedRobotEnv):
    """Unitree G1 (29 joints) walks to body-frame velocity commands on flat ground.

    As the seed's ``G1WalkFlat``: policy observation 98 = gyro 3, projected gravity 3,
    joint-position offsets 29, joint velocities 29, last action 29, command 3 and the gait
    clock 2 (cos and sin); critic 101 adds the body-frame linear velocity. 0.00667 s physics
    steps, 3 per 0.02 s control step; 20 s episodes; terminated when the pelvis tilts past
    ``max_tilt_deg`` or drops below ``min_base_height``. Rewards: velocity tracking, upright
    torso (``orientation`` of ``torso_link``), base height, feet air time and slip, action
    rate, torques and joint limits (see :mod:`unilab_lit.envs.robots.legged`), each logged as
    ``Episode/rew_<term>``, with the tracking-error metrics.

    Args: as :class:`unilab_lit.envs.robots.legged.LeggedRobotEnv`.
    """

    ROBOT = G1
    FRAME_SKIP = 3
    GAIT_PHASE_OFFSETS = (0.0,)
    UPRIGHT_BODY = "torso_link"
    FOOT_CONTACT_HEIGHT = 0.01
    # Left foot, right foot: half a cycle apart.
    FOOT_CYCLE_OFFSETS = (0.0, 0.5)
    DEFAULT_REWARD_WEIGHTS = DEFAULT_REWARD_WEIGHTS

    __init__ = robot_constructor(
        action_scale_factor=0.25,
        lin_vel_x_range=(-0.5, 1.0),
        reset_joint_noise=0.05,
        gait_frequency=1.25,
        feet_air_time_target=0.4,
        base_height_target=0.75,
        min_base_height=0.45,
    )
