"""Quadruped joystick: a 12-joint quadruped under PD position control tracks velocity commands."""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources

import mujoco
import numpy as np

from unilab_lit.envs.base import Obs
from unilab_lit.envs.joystick import (
    GRAVITY_DIR,
    LEGGED_GYM_WEIGHTS,
    JoystickEnv,
    rotate_to_body,
    up_z,
)
from unilab_lit.envs.randomization import DomainRandomization, RandomizationTargets
from unilab_lit.envs.spec import CRITIC, POLICY
from unilab_lit.envs.symmetry import Mirror, MirrorSpec, joint_mirror
from unilab_lit.validation import check_arg

NUM_JOINTS = 12
# Free-joint layout: qpos = [xyz, quat(wxyz), joints], qvel = [world linear, body angular, joints].
_QUAT = slice(3, 7)
_JOINT_QPOS = slice(7, 7 + NUM_JOINTS)
_JOINT_QVEL = slice(6, 6 + NUM_JOINTS)

POLICY_OBS_LAYOUT = (
    ("ang_vel", 3),
    ("projected_gravity", 3),
    ("command", 3),
    ("joint_pos", NUM_JOINTS),
    ("joint_vel", NUM_JOINTS),
    ("last_action", NUM_JOINTS),
)
JOINT_NAMES = tuple(
    f"{leg}_{joint}"
    for leg in ("FR", "FL", "RR", "RL")
    for joint in ("abduction", "flexion", "knee")
)
"""The joints in action order (the model's actuator order)."""
# Abduction turns about x, so a reflection through the x-z plane flips its sign.
_LEGS = joint_mirror(
    JOINT_NAMES,
    [("FR_", "FL_"), ("RR_", "RL_")],
    flip=[name.endswith("abduction") for name in JOINT_NAMES],
)
_POLICY_MIRROR = Mirror.concat(
    [Mirror.axial(), Mirror.vector(), Mirror.signs(1, -1, -1), _LEGS, _LEGS, _LEGS]
)
MIRROR = MirrorSpec(
    policy_obs=_POLICY_MIRROR,
    critic_obs=Mirror.concat([_POLICY_MIRROR, Mirror.vector()]),
    actions=_LEGS,
)
"""The task's left-right mirror: the robot, its standing pose and the rewards are symmetric."""

DEFAULT_REWARD_WEIGHTS: Mapping[str, float] = LEGGED_GYM_WEIGHTS


class QuadrupedJoystick(JoystickEnv):
    """Track a commanded body velocity (forward, lateral, yaw rate) with a 12-joint quadruped.

    Modelled on the Go1 joystick task of legged_gym / MuJoCo Playground, on a Go1-sized robot
    authored in ``assets/quadruped.xml`` (position actuators kp 60, kv 1.5; 5 ms implicitfast
    steps, 4 per control step, so ``control_dt`` is 0.02 s).

    Actions in ``[-1, 1]^12`` are joint targets ``home + action_scale * action`` around the
    standing pose. A command ``(vx, vy, yaw_rate)`` is drawn uniformly from the ranges at each
    reset and again every ``command_resample_steps`` steps of an episode.

    Reward per step = ``control_dt * sum(weight * term)`` (rates per second, as legged_gym):
    ``tracking_lin_vel = exp(-|cmd_xy - v_xy|^2 / sigma)`` and
    ``tracking_ang_vel = exp(-(cmd_yaw - w_z)^2 / sigma)`` with body-frame velocities;
    penalties ``lin_vel_z = v_z^2``, ``ang_vel_xy = |w_xy|^2``, ``orientation = |g_xy|^2``
    (projected gravity), ``torques = |tau|^2``, ``action_rate = |a_t - a_{t-1}|^2``. Each
    reported term is the weighted, dt-scaled contribution, so the terms sum to the reward.

    Episode metrics (the mean over an episode's steps, in the units of the command):
    ``tracking_error_lin_vel = |cmd_xy - v_xy|`` (m/s) and
    ``tracking_error_ang_vel = |cmd_yaw - w_z|`` (rad/s), against the same body-frame
    velocities and command as the tracking rewards.

    Observations: ``policy`` (45) = body angular velocity (3), projected gravity (3),
    command (3), joint positions minus home (12), joint velocities (12), last action (12);
    ``critic`` (48) = policy + body-frame linear velocity (3), which a real robot cannot
    measure directly. Terminated when the trunk tilts past ``max_tilt_deg`` or drops below
    ``min_base_height``; truncated after ``max_episode_steps`` (1000 = 20 s).

    The task is left-right symmetric (:data:`MIRROR`). Domain randomisation acts on the trunk
    (base mass, pushes), on every geom that can collide (friction) and on all 12 motors.

    Args:
        num_envs: Number of simulations.
        seed: Seed of reset noise, commands and the timeout stagger.
        num_threads: Threads stepping the physics.
        max_episode_steps: Control steps per episode (0.02 s each).
        action_scale: Radians of joint-target offset per unit of action, > 0.
        command_resample_steps: Steps between command draws within an episode; 0: at reset only.
        lin_vel_x_range: Forward velocity command range (m/s), low <= high.
        lin_vel_y_range: Lateral velocity command range (m/s), low <= high.
        yaw_rate_range: Yaw rate command range (rad/s), low <= high.
        tracking_sigma: Width (squared units) of the exponential tracking rewards, > 0.
        reward_weights: Overrides of ``DEFAULT_REWARD_WEIGHTS`` by term name.
        reset_joint_noise: Half-width (rad) of the uniform noise on the initial joint angles.
        min_base_height: Trunk height (m) below which an episode terminates.
        max_tilt_deg: Trunk tilt from upright (degrees) beyond which an episode terminates,
            in (0, 180].
        randomization: Domain randomisation per env (off by default); ``obs_noise`` names the
            terms of :data:`POLICY_OBS_LAYOUT`.

    Raises:
        ValueError: If an argument is out of its range or a reward weight names no term.
    """

    DEFAULT_REWARD_WEIGHTS = DEFAULT_REWARD_WEIGHTS
    POLICY_OBS_SIZE = 3 + 3 + 3 + 3 * NUM_JOINTS
    CRITIC_OBS_SIZE = POLICY_OBS_SIZE + 3
    FRAME_SKIP = 4

    def __init__(
        self,
        num_envs: int,
        *,
        seed: int = 0,
        num_threads: int = 1,
        max_episode_steps: int = 1000,
        action_scale: float = 0.25,
        command_resample_steps: int = 500,
        lin_vel_x_range: tuple[float, float] = (-1.0, 1.0),
        lin_vel_y_range: tuple[float, float] = (-0.5, 0.5),
        yaw_rate_range: tuple[float, float] = (-1.0, 1.0),
        tracking_sigma: float = 0.25,
        reward_weights: Mapping[str, float] | None = None,
        reset_joint_noise: float = 0.1,
        min_base_height: float = 0.15,
        max_tilt_deg: float = 60.0,
        randomization: DomainRandomization | None = None,
    ) -> None:
        name = type(self).__name__
        check_arg(action_scale > 0, f"{name}: action_scale", action_scale, "> 0")
        check_arg(reset_joint_noise >= 0, f"{name}: reset_joint_noise", reset_joint_noise, ">= 0")
        check_arg(0 < max_tilt_deg <= 180, f"{name}: max_tilt_deg", max_tilt_deg, "in (0, 180]")

        xml = resources.files("unilab_lit.envs").joinpath("assets", "quadruped.xml")
        with resources.as_file(xml) as path:
            model = mujoco.MjModel.from_xml_path(str(path))
        super().__init__(
            model,
            num_envs,
            frame_skip=self.FRAME_SKIP,
            max_episode_steps=max_episode_steps,
            obs_sizes={POLICY: self.POLICY_OBS_SIZE, CRITIC: self.CRITIC_OBS_SIZE},
            num_actions=NUM_JOINTS,
            seed=seed,
            num_threads=num_threads,
            command_resample_steps=command_resample_steps,
            lin_vel_x_range=lin_vel_x_range,
            lin_vel_y_range=lin_vel_y_range,
            yaw_rate_range=yaw_rate_range,
            tracking_sigma=tracking_sigma,
            reward_weights=reward_weights,
            policy_obs_layout=POLICY_OBS_LAYOUT,
            mirror=MIRROR,
            randomization=randomization,
            randomization_targets=RandomizationTargets.floating_base(model, "trunk"),
        )
        home = model.key("home")
        self._home_qpos = home.qpos.copy()
        self._home_joints = home.qpos[_JOINT_QPOS].copy()
        self._action_scale = action_scale
        self._reset_joint_noise = reset_joint_noise
        self._min_base_height = min_base_height
        self._min_up_z = float(np.cos(np.deg2rad(max_tilt_deg)))

        self._actuator_force = self.batch.bind("actuator_force")

    # ------------------------------------------------------------------ hooks

    def _actions_to_ctrl(self, actions: np.ndarray) -> np.ndarray:
        return self._home_joints + self._action_scale * self._record_actions(actions)

    def _action_map(self) -> tuple[np.ndarray, np.ndarray]:
        return self._home_joints.copy(), np.full(NUM_JOINTS, self._action_scale)

    def _compute_obs(self) -> Obs:
        quat = self.qpos[:, _QUAT]
        policy = np.concatenate(
            [
                self.qvel[:, 3:6],
                rotate_to_body(quat, GRAVITY_DIR),
                self._command,
                self.qpos[:, _JOINT_QPOS] - self._home_joints,
                self.qvel[:, _JOINT_QVEL],
                self._last_action,
            ],
            axis=1,
        )
        critic = np.concatenate([policy, rotate_to_body(quat, self.qvel[:, 0:3])], axis=1)
        return {POLICY: policy, CRITIC: critic}

    def _raw_reward_terms(self, lin_vel: np.ndarray, ang_vel: np.ndarray) -> dict[str, np.ndarray]:
        gravity = rotate_to_body(self.qpos[:, _QUAT], GRAVITY_DIR)
        return {
            **self._tracking_rewards(lin_vel, ang_vel),
            "lin_vel_z": np.square(lin_vel[:, 2]),
            "ang_vel_xy": np.sum(np.square(ang_vel[:, :2]), axis=1),
            "orientation": np.sum(np.square(gravity[:, :2]), axis=1),
            "torques": np.sum(np.square(self._actuator_force), axis=1),
            "action_rate": self._action_rate(),
        }

    def _compute_terminated(self) -> np.ndarray:
        return (up_z(self.qpos[:, _QUAT]) < self._min_up_z) | (
            self.qpos[:, 2] < self._min_base_height
        )

    def _reset_state(self, env_ids: np.ndarray, rng: np.random.Generator) -> None:
        n = env_ids.size
        qpos = np.tile(self._home_qpos, (n, 1))
        yaw = rng.uniform(-np.pi, np.pi, n)
        qpos[:, 3] = np.cos(0.5 * yaw)
        qpos[:, 6] = np.sin(0.5 * yaw)
        noise = self._reset_joint_noise
        qpos[:, _JOINT_QPOS] += rng.uniform(-noise, noise, (n, NUM_JOINTS))
        self.qpos[env_ids] = qpos
        self.qvel[env_ids] = 0.0
        self._reset_commands(env_ids, rng)
