"""Unitree Go1 joystick on flat ground: the quadruped tracks (vx, vy, yaw rate) commands."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from unilab_lit.envs.randomization import DomainRandomization
from unilab_lit.envs.robots.legged import LeggedRobotEnv, robot_constructor
from unilab_lit.envs.robots.model import Motor, PDGains, RobotDescription

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

# The seed's Go1JoystickFlat (its PPO task config), per second of control.
DEFAULT_REWARD_WEIGHTS: Mapping[str, float] = {
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
# The seed's Go1 actuation: one PD for all joints over its asset's joint damping and friction.
SEED_PD_GAINS = PDGains(
    stiffness=35.0, damping=0.5, armature=0.01, joint_damping=2.0, frictionloss=0.2
)
RANDOMIZATION_PRESETS: Mapping[str, DomainRandomization] = {
    # Its pushes (a force of at most 1 N on the trunk, 0.002 m/s on 12 kg) are left out.
    "seed": DomainRandomization(
        base_mass_offset_range=(-1.5, 1.5), base_com_x_offset_range=(-0.05, 0.05)
    ),
    # legged_gym's usual ranges, for a policy meant for the real robot.
    "sim2real": DomainRandomization(
        friction_range=(0.5, 1.25),
        base_mass_offset_range=(-1.0, 1.0),
        motor_strength_range=(0.9, 1.1),
        push_interval_s=10.0,
        push_velocity=0.5,
        obs_noise={"ang_vel": 0.2, "projected_gravity": 0.05, "joint_pos": 0.01, "joint_vel": 1.5},
        action_delay_probability=0.5,
    ),
}
# Share of a foot's gait cycle spent in stance; the rest is swing.
STANCE_FRACTION = 0.6
# Width (m^2) of the swing-height reward's exponential.
_SWING_HEIGHT_SIGMA = 0.01


class Go1Joystick(LeggedRobotEnv):
    """Unitree Go1 (12 joints) tracks body-frame velocity commands on flat ground.

    The seed's ``Go1JoystickFlat``: policy observation 49 = gyro 3, projected gravity 3,
    joint-position offsets 12, joint velocities 12, last action 12, command 3 and a trot clock
    4 (cos and sin of the phase of each diagonal leg pair, half a cycle apart, at 2 Hz); critic
    52 adds the body-frame linear velocity. 0.01 s physics steps, 2 per 0.02 s control step;
    20 s episodes; terminated when the trunk's up axis has z <= 0.5 (``max_tilt_deg`` 60). One
    command per episode, vx in [-0.6, 1], vy in [-0.4, 0.4], yaw rate in [-0.8, 0.8]; the base
    starts with up to 0.5 m/s and rad/s of velocity. Kp 35, Kd 0.5 and 0.25 rad per unit action
    (``SEED_PD_GAINS``). The seed's reward terms and weights (``DEFAULT_REWARD_WEIGHTS``; the
    shared ones in :mod:`unilab_lit.envs.robots.legged`) plus, for each foot at its place in the
    trot (FL and RR together, FR and RL half a cycle later; the first ``STANCE_FRACTION`` of a
    cycle is stance):

    - ``contact``: the number of feet whose contact matches their phase (on the ground in
      stance, off it in swing);
    - ``swing_feet_z``: the mean over feet of ``exp(-(z - swing_height_target)^2 / 0.01)`` in
      swing, 0 in stance, with z the foot sphere's centre.

    Each term is logged as ``Episode/rew_<term>``, with the tracking-error metrics of
    :class:`unilab_lit.envs.quadruped.QuadrupedJoystick`.

    Args: as :class:`unilab_lit.envs.robots.legged.LeggedRobotEnv`.
    """

    ROBOT = GO1
    FRAME_SKIP = 2
    GAIT_PHASE_OFFSETS = (0.0, np.pi)
    # In _LEGS' order: FL and RR lead, FR and RL half a cycle behind.
    FOOT_CYCLE_OFFSETS = (0.5, 0.0, 0.0, 0.5)
    UPRIGHT_BODY = "trunk"
    FOOT_CONTACT_HEIGHT = 0.03
    DEFAULT_REWARD_WEIGHTS = DEFAULT_REWARD_WEIGHTS
    RANDOMIZATION_PRESETS = RANDOMIZATION_PRESETS

    __init__ = robot_constructor(
        action_scale_factor=0.5,
        action_scale=0.25,
        pd_gains=SEED_PD_GAINS,
        command_resample_steps=0,
        lin_vel_x_range=(-0.6, 1.0),
        lin_vel_y_range=(-0.4, 0.4),
        yaw_rate_range=(-0.8, 0.8),
        reset_joint_noise=0.0,
        reset_base_velocity=0.5,
        gait_frequency=2.0,
        base_height_target=0.3,
        swing_height_target=0.1,
        min_base_height=0.0,
        randomization="seed",
    )

    def _term_contact(self, lin_vel: np.ndarray, ang_vel: np.ndarray) -> np.ndarray:
        stance = self._foot_cycles < STANCE_FRACTION
        return np.sum(self._feet_contact == stance, axis=1).astype(np.float64)

    def _term_swing_feet_z(self, lin_vel: np.ndarray, ang_vel: np.ndarray) -> np.ndarray:
        height = self._site_xpos[:, self.robot.foot_site_ids, 2]
        near = np.exp(-np.square(height - self._swing_height_target) / _SWING_HEIGHT_SIGMA)
        return np.mean(near * (self._foot_cycles >= STANCE_FRACTION), axis=1)
