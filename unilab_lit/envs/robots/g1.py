"""Unitree G1 walking on flat ground: the 29-joint humanoid tracks (vx, vy, yaw rate) commands."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import cached_property

import numpy as np

from unilab_lit.envs.joystick import up_z
from unilab_lit.envs.randomization import DomainRandomization
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

# The seed's G1WalkFlat (its APPO task config), per second of control. Its SAC variant's
# alive bonus and feet orientation penalty are here at weight 0, for a config to switch on.
DEFAULT_REWARD_WEIGHTS: Mapping[str, float] = {
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
# The seed's per-joint weights of the pose term: the legs free to walk, the waist and arms held.
POSE_WEIGHTS: Sequence[tuple[str, float]] = (
    (r".*_hip_pitch_joint|.*_knee_joint", 0.01),
    (r".*_hip_roll_joint", 1.0),
    (r".*_hip_yaw_joint|.*_ankle_(pitch|roll)_joint", 5.0),
    (r"waist_.*|.*_(shoulder|elbow|wrist)_.*", 50.0),
)
_OBS_NOISE = {"ang_vel": 0.2, "projected_gravity": 0.05, "joint_pos": 0.01, "joint_vel": 1.5}
RANDOMIZATION_PRESETS: Mapping[str, DomainRandomization] = {
    # Its observation noise and kp / kd x [0.9, 1.1] (there one factor per env for kp and one
    # for kd; here one per motor for both).
    "seed": DomainRandomization(motor_strength_range=(0.9, 1.1), obs_noise=_OBS_NOISE),
    # legged_gym's usual ranges (the pelvis up to 3 kg heavier), for a policy meant for the robot.
    "sim2real": DomainRandomization(
        friction_range=(0.5, 1.25),
        base_mass_offset_range=(-1.0, 3.0),
        motor_strength_range=(0.9, 1.1),
        push_interval_s=10.0,
        push_velocity=0.5,
        obs_noise=_OBS_NOISE,
        action_delay_probability=0.5,
    ),
}
# Width (m^2) of the feet-phase reward's exponential (the seed's APPO value; its SAC uses 0.04).
FEET_PHASE_SIGMA = 0.008
# Planar commands slower than this (m/s) are set to 0: the seed's standing commands.
STANDING_COMMAND = 0.2


def swing_height_targets(cycles: np.ndarray, swing_height: float) -> np.ndarray:
    """The seed's foot height target (m) at each gait cycle position in [0, 1): a smoothstep
    (3t^2 - 2t^3, a cubic Bezier) up to ``swing_height`` at 0 and back down to the ground at 0.5."""
    rise = 1.0 - np.abs(2.0 * np.mod(cycles + 0.5, 1.0) - 1.0)
    return swing_height * rise * rise * (3.0 - 2.0 * rise)


class G1Walk(LeggedRobotEnv):
    """Unitree G1 (29 joints) walks to body-frame velocity commands on flat ground.

    The seed's ``G1WalkFlat``: policy observation 98 = gyro 3, projected gravity 3,
    joint-position offsets 29, joint velocities 29, last action 29, command 3 and the gait
    clock 2 (cos and sin of the left foot's phase, at 1.5 Hz from a phase drawn per episode;
    the right foot is half a cycle on); critic 101 adds the body-frame linear velocity.
    0.00667 s physics steps, 3 per 0.02 s control step; 20 s episodes; terminated when the
    torso tilts 25 degrees (``max_tilt_deg``) or the pelvis drops below 0.55 m. One command
    per episode, vx in [-0.6, 1], vy in [-0.4, 0.4], yaw rate in [-0.8, 0.8], its planar part
    set to 0 below ``STANDING_COMMAND``; the base starts with up to 0.5 m/s and rad/s of
    velocity. 0.25 rad per unit action over the motor figures' PD. The seed's reward terms and
    weights (``DEFAULT_REWARD_WEIGHTS``; the shared ones in
    :mod:`unilab_lit.envs.robots.legged`, ``orientation`` of the torso) plus:

    - ``feet_phase``: ``exp(-sum over feet of (z - target)^2 / FEET_PHASE_SIGMA)``, z the foot
      site's height and target :func:`swing_height_targets` at the foot's gait cycle;
    - ``pose``: ``sum over joints of w * (q - q_default)^2``, w from ``POSE_WEIGHTS``;
    - ``alive``: 1 per step (weight 0 here; the seed's SAC variant: 10);
    - ``feet_orientation``: ``sum over feet of x^2 + y^2`` of the foot's world quaternion, its
      tilt (weight 0 here; the seed's SAC variant: -20).

    Each term is logged as ``Episode/rew_<term>``, with the tracking-error metrics.

    Args: as :class:`unilab_lit.envs.robots.legged.LeggedRobotEnv`.
    """

    ROBOT = G1
    FRAME_SKIP = 3
    GAIT_PHASE_OFFSETS = (0.0,)
    # Feet in G1's order, left and right, half a cycle apart; the left one is the clock's.
    FOOT_CYCLE_OFFSETS = (0.0, 0.5)
    RANDOM_GAIT_PHASE = True
    UPRIGHT_BODY = "torso_link"
    FOOT_CONTACT_HEIGHT = 0.01
    DEFAULT_REWARD_WEIGHTS = DEFAULT_REWARD_WEIGHTS
    RANDOMIZATION_PRESETS = RANDOMIZATION_PRESETS

    __init__ = robot_constructor(
        action_scale_factor=0.25,
        action_scale=0.25,
        command_resample_steps=0,
        lin_vel_x_range=(-0.6, 1.0),
        lin_vel_y_range=(-0.4, 0.4),
        yaw_rate_range=(-0.8, 0.8),
        reset_joint_noise=0.0,
        reset_base_velocity=0.5,
        gait_frequency=1.5,
        base_height_target=0.754,
        swing_height_target=0.09,
        min_base_height=0.55,
        max_tilt_deg=25.0,
        randomization="seed",
    )

    @cached_property
    def pose_weights(self) -> np.ndarray:
        """``[joints]``: each joint's weight in the ``pose`` term, from ``POSE_WEIGHTS``."""
        return np.array([_pose_weight(joint) for joint in self.joint_names])

    def _compute_terminated(self) -> np.ndarray:
        # The seed tilts the torso, not the pelvis: the waist's bend counts.
        tilted = up_z(self._xquat[:, self._upright_body]) <= self._min_up_z
        return tilted | (self.qpos[:, 2] < self._min_base_height)

    def _sample_commands(self, env_ids: np.ndarray, rng: np.random.Generator) -> None:
        super()._sample_commands(env_ids, rng)
        planar = self._command[env_ids, :2]
        slow = np.linalg.norm(planar, axis=1) <= STANDING_COMMAND
        planar[slow] = 0.0
        self._command[env_ids, :2] = planar

    def _term_feet_phase(self, lin_vel: np.ndarray, ang_vel: np.ndarray) -> np.ndarray:
        height = self._site_xpos[:, self.robot.foot_site_ids, 2]
        target = swing_height_targets(self._foot_cycles, self._swing_height_target)
        return np.exp(-np.sum(np.square(height - target), axis=1) / FEET_PHASE_SIGMA)

    def _term_pose(self, lin_vel: np.ndarray, ang_vel: np.ndarray) -> np.ndarray:
        offset = self.qpos[:, self._qpos_adr] - self.default_joint_pos
        return np.sum(self.pose_weights * np.square(offset), axis=1)

    def _term_alive(self, lin_vel: np.ndarray, ang_vel: np.ndarray) -> np.ndarray:
        return np.ones(self.num_envs)

    def _term_feet_orientation(self, lin_vel: np.ndarray, ang_vel: np.ndarray) -> np.ndarray:
        feet = self.robot.model.site_bodyid[self.robot.foot_site_ids]
        return np.sum(np.square(self._xquat[:, feet, 1:3]), axis=(1, 2))


def _pose_weight(joint: str) -> float:
    for pattern, weight in POSE_WEIGHTS:
        if re.fullmatch(pattern, joint):
            return weight
    raise KeyError(f"POSE_WEIGHTS: no weight for joint {joint!r}")
