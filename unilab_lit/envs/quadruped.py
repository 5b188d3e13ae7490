"""Quadruped joystick: a 12-joint quadruped under PD position control tracks velocity commands."""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources
from typing import Any

import mujoco
import numpy as np

from unilab_lit.envs.base import BatchedMujocoEnv, Obs
from unilab_lit.envs.randomization import DomainRandomization, RandomizationTargets
from unilab_lit.envs.spec import CRITIC, POLICY
from unilab_lit.envs.symmetry import Mirror, MirrorSpec, joint_mirror
from unilab_lit.validation import check_arg

NUM_JOINTS = 12
# Free-joint layout: qpos = [xyz, quat(wxyz), joints], qvel = [world linear, body angular, joints].
_QUAT = slice(3, 7)
_JOINT_QPOS = slice(7, 7 + NUM_JOINTS)
_JOINT_QVEL = slice(6, 6 + NUM_JOINTS)
_GRAVITY_DIR = np.array([0.0, 0.0, -1.0])

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
_LEGS = joint_mirror(JOINT_NAMES, [("FR_", "FL_"), ("RR_", "RL_")], negate=["abduction"])
_POLICY_MIRROR = Mirror.concat(
    [Mirror.axial(), Mirror.vector(), Mirror.signs(1, -1, -1), _LEGS, _LEGS, _LEGS]
)
MIRROR = MirrorSpec(
    policy_obs=_POLICY_MIRROR,
    critic_obs=Mirror.concat([_POLICY_MIRROR, Mirror.vector()]),
    actions=_LEGS,
)
"""The task's left-right mirror: the robot, its standing pose and the rewards are symmetric."""

DEFAULT_REWARD_WEIGHTS: Mapping[str, float] = {
    "tracking_lin_vel": 1.0,
    "tracking_ang_vel": 0.5,
    "lin_vel_z": -2.0,
    "ang_vel_xy": -0.05,
    "orientation": -2.0,
    "torques": -2e-4,
    "action_rate": -0.01,
}


def rotate_to_body(quat: np.ndarray, vec: np.ndarray) -> np.ndarray:
    """Express world-frame vectors in the body frame of unit quaternions ``quat`` (w, x, y, z).

    ``quat`` is ``[N, 4]``; ``vec`` is ``[N, 3]`` or ``[3]`` (the same vector for every row).
    """
    w = quat[:, :1]
    u = -quat[:, 1:]  # the conjugate rotates world -> body
    t = 2.0 * np.cross(u, vec)
    return vec + w * t + np.cross(u, t)


class QuadrupedJoystick(BatchedMujocoEnv):
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
        command_resample_steps: Steps between command draws within an episode, >= 1.
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

    REWARD_TERMS = tuple(DEFAULT_REWARD_WEIGHTS)
    EPISODE_METRICS = ("tracking_error_lin_vel", "tracking_error_ang_vel")
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
        check_arg(
            command_resample_steps >= 1,
            f"{name}: command_resample_steps",
            command_resample_steps,
            ">= 1",
        )
        ranges = {
            "lin_vel_x_range": lin_vel_x_range,
            "lin_vel_y_range": lin_vel_y_range,
            "yaw_rate_range": yaw_rate_range,
        }
        for arg, (low, high) in ranges.items():
            if not low <= high:
                raise ValueError(f"{name}: {arg} must have low <= high, got {(low, high)}")
        check_arg(tracking_sigma > 0, f"{name}: tracking_sigma", tracking_sigma, "> 0")
        unknown = set(reward_weights or {}) - set(DEFAULT_REWARD_WEIGHTS)
        if unknown:
            raise ValueError(
                f"{name}: reward_weights names unknown terms {sorted(unknown)}; "
                f"valid terms: {list(DEFAULT_REWARD_WEIGHTS)}"
            )
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
            reward_terms=self.REWARD_TERMS,
            episode_metrics=self.EPISODE_METRICS,
            seed=seed,
            num_threads=num_threads,
            action_low=-np.ones(NUM_JOINTS, dtype=np.float32),
            action_high=np.ones(NUM_JOINTS, dtype=np.float32),
            policy_obs_layout=POLICY_OBS_LAYOUT,
            mirror=MIRROR,
            randomization=randomization,
            randomization_targets=RandomizationTargets.floating_base(model, "trunk"),
        )
        home = model.key("home")
        self._home_qpos = home.qpos.copy()
        self._home_joints = home.qpos[_JOINT_QPOS].copy()
        self._action_scale = action_scale
        self._command_resample_steps = command_resample_steps
        self._command_low = np.array([r[0] for r in ranges.values()])
        self._command_high = np.array([r[1] for r in ranges.values()])
        self._tracking_sigma = tracking_sigma
        weights = {**DEFAULT_REWARD_WEIGHTS, **(reward_weights or {})}
        self._weights = {term: weights[term] * self.spec.control_dt for term in self.REWARD_TERMS}
        self._reset_joint_noise = reset_joint_noise
        self._min_base_height = min_base_height
        self._min_up_z = float(np.cos(np.deg2rad(max_tilt_deg)))

        self._actuator_force = self.batch.bind("actuator_force")
        self._command = np.zeros((num_envs, 3))
        self._tracked_command = np.zeros((num_envs, 3))
        self._command_age = np.zeros(num_envs, dtype=np.int64)
        self._last_action = np.zeros((num_envs, NUM_JOINTS))
        self._previous_action = np.zeros((num_envs, NUM_JOINTS))

    # ------------------------------------------------------------------ hooks

    def _actions_to_ctrl(self, actions: np.ndarray) -> np.ndarray:
        # The only hook that sees the actions before the observation is assembled, which needs
        # them as "last action"; the reward's action-rate term needs the one before as well.
        self._previous_action, self._last_action = self._last_action, actions.astype(np.float64)
        return self._home_joints + self._action_scale * self._last_action

    def _action_map(self) -> tuple[np.ndarray, np.ndarray]:
        return self._home_joints.copy(), np.full(NUM_JOINTS, self._action_scale)

    def _simulate(self) -> None:
        super()._simulate()
        # The step's reward tracks the command the policy acted on; a command due for a new draw
        # changes only after the physics step, so the observation returned by this step shows
        # the new command the next action will be judged against.
        self._tracked_command[:] = self._command
        self._command_age += 1
        due = np.flatnonzero(self._command_age >= self._command_resample_steps)
        if due.size:
            self._sample_commands(due, self._rng)

    def _compute_obs(self) -> Obs:
        quat = self.qpos[:, _QUAT]
        policy = np.concatenate(
            [
                self.qvel[:, 3:6],
                rotate_to_body(quat, _GRAVITY_DIR),
                self._command,
                self.qpos[:, _JOINT_QPOS] - self._home_joints,
                self.qvel[:, _JOINT_QVEL],
                self._last_action,
            ],
            axis=1,
        )
        critic = np.concatenate([policy, rotate_to_body(quat, self.qvel[:, 0:3])], axis=1)
        return {POLICY: policy, CRITIC: critic}

    def _compute_reward(self, actions: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        lin_vel, ang_vel = self._body_velocities()
        gravity = rotate_to_body(self.qpos[:, _QUAT], _GRAVITY_DIR)
        lin_delta, yaw_delta = self._tracking_deltas(lin_vel, ang_vel)
        lin_error = np.sum(np.square(lin_delta), axis=1)
        yaw_error = np.square(yaw_delta)
        raw = {
            "tracking_lin_vel": np.exp(-lin_error / self._tracking_sigma),
            "tracking_ang_vel": np.exp(-yaw_error / self._tracking_sigma),
            "lin_vel_z": np.square(lin_vel[:, 2]),
            "ang_vel_xy": np.sum(np.square(ang_vel[:, :2]), axis=1),
            "orientation": np.sum(np.square(gravity[:, :2]), axis=1),
            "torques": np.sum(np.square(self._actuator_force), axis=1),
            "action_rate": np.sum(np.square(self._last_action - self._previous_action), axis=1),
        }
        terms = {term: self._weights[term] * value for term, value in raw.items()}
        return sum(terms.values()), terms

    def _compute_metrics(self) -> dict[str, np.ndarray]:
        lin_delta, yaw_delta = self._tracking_deltas(*self._body_velocities())
        return {
            "tracking_error_lin_vel": np.linalg.norm(lin_delta, axis=1),
            "tracking_error_ang_vel": np.abs(yaw_delta),
        }

    def _compute_terminated(self) -> np.ndarray:
        quat = self.qpos[:, _QUAT]
        # z of the trunk's up axis in the world frame: cos(tilt from upright).
        up_z = 1.0 - 2.0 * (quat[:, 1] ** 2 + quat[:, 2] ** 2)
        return (up_z < self._min_up_z) | (self.qpos[:, 2] < self._min_base_height)

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
        self._last_action[env_ids] = 0.0
        self._previous_action[env_ids] = 0.0
        self._sample_commands(env_ids, rng)

    # ------------------------------------------------------------------ state

    def state_dict(self) -> dict[str, Any]:
        """The base state plus the commands and the last two actions (they carry over steps)."""
        state = super().state_dict()
        state["task"] = {
            "command": self._command.copy(),
            "tracked_command": self._tracked_command.copy(),
            "command_age": self._command_age.copy(),
            "last_action": self._last_action.copy(),
            "previous_action": self._previous_action.copy(),
        }
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        task = state["task"]
        self._command[:] = task["command"]
        self._tracked_command[:] = task["tracked_command"]
        self._command_age[:] = task["command_age"]
        self._last_action[:] = task["last_action"]
        self._previous_action[:] = task["previous_action"]

    # ------------------------------------------------------------------ internals

    def _body_velocities(self) -> tuple[np.ndarray, np.ndarray]:
        """Body-frame linear ``[N, 3]`` and angular ``[N, 3]`` velocity of the trunk."""
        return rotate_to_body(self.qpos[:, _QUAT], self.qvel[:, 0:3]), self.qvel[:, 3:6]

    def _tracking_deltas(
        self, lin_vel: np.ndarray, ang_vel: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Command minus velocity: planar linear ``[N, 2]`` and yaw rate ``[N]``."""
        command = self._tracked_command
        return command[:, :2] - lin_vel[:, :2], command[:, 2] - ang_vel[:, 2]

    def _sample_commands(self, env_ids: np.ndarray, rng: np.random.Generator) -> None:
        self._command[env_ids] = rng.uniform(
            self._command_low, self._command_high, (env_ids.size, 3)
        )
        self._command_age[env_ids] = 0
