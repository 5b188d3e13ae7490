"""Velocity-command tracking, shared by every joystick task: commands, tracking terms, metrics.

A joystick task has a free-floating base (``qpos[0:7]`` = position and (w, x, y, z) quaternion,
``qvel[0:6]`` = world linear and body angular velocity) and is told a command
``(vx, vy, yaw_rate)`` in its body frame. This base draws the commands, keeps the last two
actions (observation and action-rate penalty), computes the tracking rewards and the
tracking-error metrics, weights reward terms the legged_gym way and saves its buffers with the
env state. Subclasses build the model, the observations, the other reward terms and resets.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import mujoco
import numpy as np

from unilab_lit.envs.base import BatchedMujocoEnv
from unilab_lit.envs.randomization import DomainRandomization, RandomizationTargets
from unilab_lit.envs.symmetry import MirrorSpec
from unilab_lit.validation import check_arg

GRAVITY_DIR = np.array([0.0, 0.0, -1.0])
TRACKING_METRICS = ("tracking_error_lin_vel", "tracking_error_ang_vel")
# legged_gym's quadruped weights of the terms every floating-base joystick task can compute.
LEGGED_GYM_WEIGHTS: Mapping[str, float] = {
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
    t = 2.0 * _cross(u, vec)
    return vec + w * t + _cross(u, t)


def _cross(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``np.cross`` of 3-vectors along the last axis, bit for bit (the same products and
    differences), without its axis shuffling, which cost a G1 step of 64 envs about 0.5 ms."""
    a = np.asarray(a)
    b = np.asarray(b)
    a0, a1, a2 = a[..., 0], a[..., 1], a[..., 2]
    b0, b1, b2 = b[..., 0], b[..., 1], b[..., 2]
    return np.stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], axis=-1)


def up_z(quat: np.ndarray) -> np.ndarray:
    """z of the body's up axis in the world frame: the cosine of the tilt from upright."""
    return 1.0 - 2.0 * (quat[:, 1] ** 2 + quat[:, 2] ** 2)


class JoystickEnv(BatchedMujocoEnv):
    """A batched task that tracks body-frame velocity commands; see the module docstring.

    Subclasses set ``DEFAULT_REWARD_WEIGHTS`` (term -> weight; the reported terms, in order),
    return the unweighted terms from ``_raw_reward_terms`` and call ``_reset_commands`` from
    ``_reset_state``. Reward per step = ``control_dt * sum(weight * term)`` (rates per second,
    as legged_gym); each reported term is its weighted, dt-scaled contribution, so the terms
    sum to the reward. ``tracking_lin_vel = exp(-|cmd_xy - v_xy|^2 / sigma)`` and
    ``tracking_ang_vel = exp(-(cmd_yaw - w_z)^2 / sigma)`` with body-frame velocities. The
    metrics ``tracking_error_lin_vel = |cmd_xy - v_xy|`` (m/s) and
    ``tracking_error_ang_vel = |cmd_yaw - w_z|`` (rad/s) are episode means. A command is drawn
    uniformly from the ranges at each reset and every ``command_resample_steps`` steps (never
    within an episode if 0).

    Args:
        model: The compiled model (free base first).
        num_envs: Number of simulations.
        frame_skip: Physics substeps per control step.
        max_episode_steps: Control steps per episode.
        obs_sizes: Width of each observation group.
        num_actions: Width of the actions, each in ``[-1, 1]``.
        seed: Seed of resets, commands and the timeout stagger.
        num_threads: Threads stepping the physics.
        command_resample_steps: Steps between command draws within an episode; 0 draws a
            command at reset only.
        lin_vel_x_range: Forward velocity command range (m/s), low <= high.
        lin_vel_y_range: Lateral velocity command range (m/s), low <= high.
        yaw_rate_range: Yaw rate command range (rad/s), low <= high.
        tracking_sigma: Width (squared units) of the exponential tracking rewards, > 0.
        reward_weights: Overrides of ``DEFAULT_REWARD_WEIGHTS`` by term name.
        policy_obs_layout: As :class:`~unilab_lit.envs.base.BatchedMujocoEnv`.
        mirror: As :class:`~unilab_lit.envs.base.BatchedMujocoEnv`.
        randomization: As :class:`~unilab_lit.envs.base.BatchedMujocoEnv`.
        randomization_targets: As :class:`~unilab_lit.envs.base.BatchedMujocoEnv`.

    Raises:
        ValueError: If an argument is out of its range or a reward weight names no term.
    """

    DEFAULT_REWARD_WEIGHTS: ClassVar[Mapping[str, float]]
    EPISODE_METRICS = TRACKING_METRICS

    def __init__(
        self,
        model: mujoco.MjModel,
        num_envs: int,
        *,
        frame_skip: int,
        max_episode_steps: int,
        obs_sizes: Mapping[str, int],
        num_actions: int,
        seed: int,
        num_threads: int,
        command_resample_steps: int,
        lin_vel_x_range: tuple[float, float],
        lin_vel_y_range: tuple[float, float],
        yaw_rate_range: tuple[float, float],
        tracking_sigma: float,
        reward_weights: Mapping[str, float] | None,
        policy_obs_layout: Sequence[tuple[str, int]] = (),
        mirror: MirrorSpec | None = None,
        randomization: DomainRandomization | None = None,
        randomization_targets: RandomizationTargets | None = None,
    ) -> None:
        name = type(self).__name__
        check_arg(
            command_resample_steps >= 0,
            f"{name}: command_resample_steps",
            command_resample_steps,
            ">= 0 (0: at reset only)",
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
        unknown = set(reward_weights or {}) - set(self.DEFAULT_REWARD_WEIGHTS)
        if unknown:
            raise ValueError(
                f"{name}: reward_weights names unknown terms {sorted(unknown)}; "
                f"valid terms: {list(self.DEFAULT_REWARD_WEIGHTS)}"
            )
        super().__init__(
            model,
            num_envs,
            frame_skip=frame_skip,
            max_episode_steps=max_episode_steps,
            obs_sizes=obs_sizes,
            reward_terms=tuple(self.DEFAULT_REWARD_WEIGHTS),
            episode_metrics=TRACKING_METRICS,
            seed=seed,
            num_threads=num_threads,
            action_low=-np.ones(num_actions, dtype=np.float32),
            action_high=np.ones(num_actions, dtype=np.float32),
            policy_obs_layout=policy_obs_layout,
            mirror=mirror,
            randomization=randomization,
            randomization_targets=randomization_targets,
        )
        self._command_resample_steps = command_resample_steps
        self._command_low = np.array([low for low, _ in ranges.values()])
        self._command_high = np.array([high for _, high in ranges.values()])
        self._tracking_sigma = tracking_sigma
        weights = {**self.DEFAULT_REWARD_WEIGHTS, **(reward_weights or {})}
        dt = self.spec.control_dt
        self._weights = {term: weights[term] * dt for term in self.spec.reward_terms}

        self._command = np.zeros((num_envs, 3))
        self._tracked_command = np.zeros((num_envs, 3))
        self._command_age = np.zeros(num_envs, dtype=np.int64)
        self._last_action = np.zeros((num_envs, num_actions))
        self._previous_action = np.zeros((num_envs, num_actions))

    # ------------------------------------------------------------------ for subclasses

    @abstractmethod
    def _raw_reward_terms(self, lin_vel: np.ndarray, ang_vel: np.ndarray) -> dict[str, np.ndarray]:
        """Each term of ``DEFAULT_REWARD_WEIGHTS``, unweighted, from body-frame velocities."""

    def _record_actions(self, actions: np.ndarray) -> np.ndarray:
        """Keep ``actions`` as the last action (and the last as the one before); return it."""
        # Called from _actions_to_ctrl, the only hook that sees the actions before the
        # observation is assembled, which shows them as "last action".
        self._previous_action, self._last_action = self._last_action, actions.astype(np.float64)
        return self._last_action

    def _reset_commands(self, env_ids: np.ndarray, rng: np.random.Generator) -> None:
        """Forget the actions of ``env_ids`` and draw their first command."""
        self._last_action[env_ids] = 0.0
        self._previous_action[env_ids] = 0.0
        self._sample_commands(env_ids, rng)

    def _body_velocities(self) -> tuple[np.ndarray, np.ndarray]:
        """Body-frame linear ``[N, 3]`` and angular ``[N, 3]`` velocity of the base."""
        return rotate_to_body(self.qpos[:, 3:7], self.qvel[:, 0:3]), self.qvel[:, 3:6]

    def _tracking_rewards(self, lin_vel: np.ndarray, ang_vel: np.ndarray) -> dict[str, np.ndarray]:
        lin_delta, yaw_delta = self._tracking_deltas(lin_vel, ang_vel)
        sigma = self._tracking_sigma
        return {
            "tracking_lin_vel": np.exp(-np.sum(np.square(lin_delta), axis=1) / sigma),
            "tracking_ang_vel": np.exp(-np.square(yaw_delta) / sigma),
        }

    def _action_rate(self) -> np.ndarray:
        return np.sum(np.square(self._last_action - self._previous_action), axis=1)

    # ------------------------------------------------------------------ hooks

    def _simulate(self) -> None:
        super()._simulate()
        # The step's reward tracks the command the policy acted on; a command due for a new draw
        # changes only after the physics step, so the observation returned by this step shows
        # the new command the next action will be judged against.
        self._tracked_command[:] = self._command
        self._command_age += 1
        if not self._command_resample_steps:
            return
        due = np.flatnonzero(self._command_age >= self._command_resample_steps)
        if due.size:
            self._sample_commands(due, self._rng)

    def _compute_reward(self, actions: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        raw = self._raw_reward_terms(*self._body_velocities())
        terms = {term: self._weights[term] * raw[term] for term in self.spec.reward_terms}
        return sum(terms.values()), terms

    def _compute_metrics(self) -> dict[str, np.ndarray]:
        lin_delta, yaw_delta = self._tracking_deltas(*self._body_velocities())
        return {
            "tracking_error_lin_vel": np.linalg.norm(lin_delta, axis=1),
            "tracking_error_ang_vel": np.abs(yaw_delta),
        }

    # ------------------------------------------------------------------ state

    def _task_buffers(self) -> dict[str, np.ndarray]:
        """The per-env arrays that carry over steps; subclasses add theirs."""
        return {
            "command": self._command,
            "tracked_command": self._tracked_command,
            "command_age": self._command_age,
            "last_action": self._last_action,
            "previous_action": self._previous_action,
        }

    def state_dict(self) -> dict[str, Any]:
        """The base state plus the task buffers (commands, the last two actions, ...)."""
        state = super().state_dict()
        state["task"] = {key: value.copy() for key, value in self._task_buffers().items()}
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        for key, value in self._task_buffers().items():
            value[:] = state["task"][key]

    # ------------------------------------------------------------------ internals

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
