"""A legged robot under PD position control tracking velocity commands: what Go1 and G1 share.

The robot comes from :func:`unilab_lit.envs.robots.model.build_robot`. Actions in ``[-1, 1]``
per joint are joint targets ``default_joint_pos + action_scale * action``, with
``action_scale = action_scale_factor * effort_limit / stiffness`` per joint (a unit action
asks for that fraction of the motor's peak torque at rest). The observation is what the robot
itself measures, in this order: gyro (3), projected gravity (3), joint positions minus the
default (J), joint velocities (J), last action (J), command (3) and the gait clock (cos and
sin of each phase in ``GAIT_PHASE_OFFSETS``, plus a start drawn per episode where
``RANDOM_GAIT_PHASE``); the critic adds the body-frame linear velocity
(3), which hardware cannot measure directly.

Reward terms (each available to a subclass's ``DEFAULT_REWARD_WEIGHTS``; see
:class:`unilab_lit.envs.joystick.JoystickEnv` for the weighting and the tracking terms):
``lin_vel_z = v_z^2``, ``ang_vel_xy = |w_xy|^2``, ``orientation = |g_xy|^2`` of
``UPRIGHT_BODY`` (projected gravity), ``base_height = (z - base_height_target)^2``,
``action_rate = |a_t - a_{t-1}|^2`` and ``similar_to_default = sum |q - q_default|``. A foot
is on the ground when its site is below ``FOOT_CONTACT_HEIGHT``; ``_foot_cycles`` is where each
foot is in its gait cycle, for a robot's own gait terms.

Terminated when the base's up axis has z <= cos(``max_tilt_deg``) or the base is below
``min_base_height``; truncated after ``max_episode_steps``.

Both robots are left-right symmetric (``spec.mirror``, for off-policy ``use_symmetry``): the
mirror swaps each joint with its twin and flips abduction, roll and yaw joints, the gyro's x
and z, gravity's y, the command's vy and yaw rate, and the gait clock by half a cycle.

The plain attributes ``base_body_id``, ``floor_geom_id``, ``joint_names``,
``default_joint_pos``, ``action_scale``, ``actuator_ids``, ``stiffness``, ``damping``,
``armature`` and ``effort_limit`` describe the robot for randomisation and deployment.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Literal

import numpy as np

from unilab_lit.envs.base import Obs
from unilab_lit.envs.joystick import GRAVITY_DIR, JoystickEnv, rotate_to_body, up_z
from unilab_lit.envs.randomization import DomainRandomization, RandomizationTargets
from unilab_lit.envs.robots.model import (
    PDGains,
    RobotDescription,
    RobotModel,
    build_robot,
    with_pd_gains,
)
from unilab_lit.envs.spec import CRITIC, POLICY
from unilab_lit.envs.symmetry import Mirror, MirrorSpec, axis_flips, joint_mirror
from unilab_lit.validation import check_arg

# Left and right twins in joint names (Unitree's G1 and Go1 conventions).
_SIDES = (("left_", "right_"), ("FL_", "FR_"), ("RL_", "RR_"))


def _mirror(robot: RobotModel, phases: int) -> MirrorSpec:
    names = robot.joint_names
    joints = joint_mirror(names, _SIDES, axis_flips(robot.model, names))
    # Left and right legs swap, which is the gait clock half a cycle on: every channel flips.
    policy = Mirror.concat(
        [
            Mirror.axial(),
            Mirror.vector(),
            joints,
            joints,
            joints,
            Mirror.signs(1, -1, -1),
            Mirror.signs(*[-1.0] * (2 * phases)),
        ]
    )
    return MirrorSpec(
        policy_obs=policy, critic_obs=Mirror.concat([policy, Mirror.vector()]), actions=joints
    )


class LeggedRobotEnv(JoystickEnv):
    """Velocity tracking for the robot ``ROBOT``; see the module docstring.

    Args:
        num_envs: Number of simulations.
        seed: Seed of resets, commands and the timeout stagger.
        num_threads: Threads stepping the physics.
        model_dir: A local copy of the robot's MuJoCo Menagerie folder; default: the models
            fetched into the user cache (``python -m unilab_lit.envs.robots fetch``).
        max_episode_steps: Control steps per episode (0.02 s each).
        action_scale_factor: Fraction of each motor's peak torque a unit action asks at rest, > 0;
            unused when ``action_scale`` is given.
        action_scale: Joint-target offset (rad) of a unit action, the same for every joint, > 0;
            ``None``: from ``action_scale_factor`` and the motor figures.
        pd_gains: One kp, kd, armature, passive damping and friction for every joint;
            ``None``: each joint's motor figures (see :mod:`unilab_lit.envs.robots.model`).
        command_resample_steps: Steps between command draws within an episode; 0 draws a
            command at reset only.
        lin_vel_x_range: Forward velocity command range (m/s).
        lin_vel_y_range: Lateral velocity command range (m/s).
        yaw_rate_range: Yaw rate command range (rad/s).
        tracking_sigma: Width (squared units) of the exponential tracking rewards, > 0.
        reward_weights: Overrides of ``DEFAULT_REWARD_WEIGHTS`` by term name.
        reset_joint_noise: Half-width (rad) of the uniform noise on the initial joint angles.
        reset_base_velocity: Half-width of the uniform noise on the base's six initial
            velocities (m/s, rad/s), >= 0.
        gait_frequency: Cycles per second of the gait clock in the observation, > 0.
        base_height_target: Base height (m) the ``base_height`` term pulls towards.
        swing_height_target: Foot height (m) the swing terms reward in a foot's swing phase.
        min_base_height: Base height (m) below which an episode terminates.
        max_tilt_deg: Tilt from upright (degrees) at or beyond which an episode terminates,
            in (0, 180].
        randomization: Domain randomisation per env (see
            :mod:`unilab_lit.envs.randomization`): a preset by name from
            ``RANDOMIZATION_PRESETS`` (``seed``: the seed project's; ``sim2real``: ours, for a
            policy meant for hardware), explicit options (friction of the floor and the robot's
            geoms, base (trunk / pelvis) mass and centre of mass, every motor's strength,
            pushes of the base, noise on the policy observation by term (``ang_vel``,
            ``projected_gravity``, ``joint_pos``, ``joint_vel``, ``last_action``, ``command``,
            ``gait_phase``) and one step of action delay) or ``None`` (off).

    The arguments without a default here get one from each robot (:func:`robot_constructor`).

    Raises:
        ValueError: If an argument is out of its range or a reward weight names no term.
        unilab_lit.envs.robots.assets.RobotModelError: If the model is missing or corrupt.
    """

    ROBOT: ClassVar[RobotDescription]
    FRAME_SKIP: ClassVar[int]
    GAIT_PHASE_OFFSETS: ClassVar[tuple[float, ...]]
    UPRIGHT_BODY: ClassVar[str]
    FOOT_CONTACT_HEIGHT: ClassVar[float]
    FOOT_CYCLE_OFFSETS: ClassVar[tuple[float, ...]]
    RANDOMIZATION_PRESETS: ClassVar[Mapping[str, DomainRandomization]]
    # Whether each episode starts its gait clock at a phase drawn uniformly (else at 0).
    RANDOM_GAIT_PHASE: ClassVar[bool] = False

    def __init__(
        self,
        num_envs: int,
        *,
        seed: int = 0,
        num_threads: int = 1,
        model_dir: str | None = None,
        max_episode_steps: int = 1000,
        action_scale_factor: float,
        action_scale: float | None = None,
        pd_gains: PDGains | None = None,
        command_resample_steps: int = 500,
        lin_vel_x_range: tuple[float, float],
        lin_vel_y_range: tuple[float, float] = (-0.5, 0.5),
        yaw_rate_range: tuple[float, float] = (-1.0, 1.0),
        tracking_sigma: float = 0.25,
        reward_weights: Mapping[str, float] | None = None,
        reset_joint_noise: float,
        reset_base_velocity: float = 0.0,
        gait_frequency: float,
        base_height_target: float,
        swing_height_target: float = 0.1,
        min_base_height: float,
        max_tilt_deg: float = 60.0,
        randomization: DomainRandomization | Literal["seed", "sim2real"] | None = None,
    ) -> None:
        name = type(self).__name__
        check_arg(
            action_scale_factor > 0, f"{name}: action_scale_factor", action_scale_factor, "> 0"
        )
        check_arg(
            action_scale is None or action_scale > 0, f"{name}: action_scale", action_scale, "> 0"
        )
        check_arg(reset_joint_noise >= 0, f"{name}: reset_joint_noise", reset_joint_noise, ">= 0")
        check_arg(
            reset_base_velocity >= 0, f"{name}: reset_base_velocity", reset_base_velocity, ">= 0"
        )
        if isinstance(randomization, str):
            randomization = self.RANDOMIZATION_PRESETS[randomization]
        check_arg(gait_frequency > 0, f"{name}: gait_frequency", gait_frequency, "> 0")
        check_arg(0 < max_tilt_deg <= 180, f"{name}: max_tilt_deg", max_tilt_deg, "in (0, 180]")

        robot = build_robot(self.ROBOT, model_dir)
        if pd_gains is not None:
            robot = with_pd_gains(robot, pd_gains)
        joints = len(robot.joint_names)
        layout = (
            ("ang_vel", 3),
            ("projected_gravity", 3),
            ("joint_pos", joints),
            ("joint_vel", joints),
            ("last_action", joints),
            ("command", 3),
            ("gait_phase", 2 * len(self.GAIT_PHASE_OFFSETS)),
        )
        policy_size = sum(width for _, width in layout)
        super().__init__(
            robot.model,
            num_envs,
            frame_skip=self.FRAME_SKIP,
            max_episode_steps=max_episode_steps,
            obs_sizes={POLICY: policy_size, CRITIC: policy_size + 3},
            num_actions=joints,
            seed=seed,
            num_threads=num_threads,
            command_resample_steps=command_resample_steps,
            lin_vel_x_range=lin_vel_x_range,
            lin_vel_y_range=lin_vel_y_range,
            yaw_rate_range=yaw_rate_range,
            tracking_sigma=tracking_sigma,
            reward_weights=reward_weights,
            policy_obs_layout=layout,
            mirror=_mirror(robot, len(self.GAIT_PHASE_OFFSETS)),
            randomization=randomization,
            randomization_targets=RandomizationTargets.floating_base(
                robot.model, self.ROBOT.base_body
            ),
        )
        self.robot = robot
        self.base_body_id = robot.base_body_id
        self.floor_geom_id = robot.floor_geom_id
        self.joint_names = robot.joint_names
        self.default_joint_pos = robot.default_joint_pos
        self.action_scale = (
            action_scale_factor * robot.effort_limit / robot.stiffness
            if action_scale is None
            else np.full(joints, action_scale)
        )
        self.actuator_ids = robot.actuator_ids
        self.stiffness = robot.stiffness
        self.damping = robot.damping
        self.armature = robot.armature
        self.effort_limit = robot.effort_limit

        self._qpos_adr = robot.joint_qpos_adr
        self._dof_adr = robot.joint_dof_adr
        self._reset_joint_noise = reset_joint_noise
        self._reset_base_velocity = reset_base_velocity
        self._cycles_per_step = gait_frequency * self.spec.control_dt
        self._phase_rate = 2.0 * np.pi * self._cycles_per_step
        self._phase_offsets = np.array(self.GAIT_PHASE_OFFSETS)
        self._phase_start = np.zeros(num_envs)
        self._base_height_target = base_height_target
        self._swing_height_target = swing_height_target
        self._min_base_height = min_base_height
        self._min_up_z = float(np.cos(np.deg2rad(max_tilt_deg)))
        self._upright_body = robot.model.body(self.UPRIGHT_BODY).id

        self._sensordata = self.batch.bind("sensordata")
        self._site_xpos = self.batch.bind("site_xpos")
        self._xquat = self.batch.bind("xquat")
        feet = robot.foot_site_ids.size
        self._feet_contact = np.zeros((num_envs, feet), dtype=bool)
        self._foot_cycles = np.zeros((num_envs, feet))

    # ------------------------------------------------------------------ hooks

    def _actions_to_ctrl(self, actions: np.ndarray) -> np.ndarray:
        return self.default_joint_pos + self.action_scale * self._record_actions(actions)

    def _action_map(self) -> tuple[np.ndarray, np.ndarray]:
        return self.default_joint_pos.copy(), self.action_scale.copy()

    def _simulate(self) -> None:
        super()._simulate()
        self._feet_contact = (
            self._site_xpos[:, self.robot.foot_site_ids, 2] < self.FOOT_CONTACT_HEIGHT
        )
        self._foot_cycles = self._foot_cycles_at(self._elapsed)

    def _foot_cycles_at(self, elapsed: np.ndarray) -> np.ndarray:
        """``[N, feet]``: where each foot is in its gait cycle, in [0, 1), at episode step
        ``elapsed`` (the clock the policy sees, offset by ``FOOT_CYCLE_OFFSETS``)."""
        start = self._phase_start[:, None] / (2.0 * np.pi)
        cycles = (
            self._cycles_per_step * elapsed[:, None] + np.asarray(self.FOOT_CYCLE_OFFSETS) + start
        )
        return np.mod(cycles, 1.0)

    def _compute_obs(self) -> Obs:
        gyro_adr = self.robot.gyro_adr
        phase = self._gait_phase()
        policy = np.concatenate(
            [
                self._sensordata[:, gyro_adr : gyro_adr + 3],
                rotate_to_body(self.qpos[:, 3:7], GRAVITY_DIR),
                self.qpos[:, self._qpos_adr] - self.default_joint_pos,
                self.qvel[:, self._dof_adr],
                self._last_action,
                self._command,
                np.cos(phase),
                np.sin(phase),
            ],
            axis=1,
        )
        critic = np.concatenate([policy, rotate_to_body(self.qpos[:, 3:7], self.qvel[:, 0:3])], 1)
        return {POLICY: policy, CRITIC: critic}

    def _raw_reward_terms(self, lin_vel: np.ndarray, ang_vel: np.ndarray) -> dict[str, np.ndarray]:
        terms = self._tracking_rewards(lin_vel, ang_vel)
        for term in self.spec.reward_terms:
            if term not in terms:
                terms[term] = getattr(self, f"_term_{term}")(lin_vel, ang_vel)
        return terms

    def _compute_terminated(self) -> np.ndarray:
        tilted = up_z(self.qpos[:, 3:7]) <= self._min_up_z
        return tilted | (self.qpos[:, 2] < self._min_base_height)

    def _reset_state(self, env_ids: np.ndarray, rng: np.random.Generator) -> None:
        n = env_ids.size
        qpos = np.tile(self.robot.home_qpos, (n, 1))
        yaw = rng.uniform(-np.pi, np.pi, n)
        qpos[:, 3] = np.cos(0.5 * yaw)
        qpos[:, 6] = np.sin(0.5 * yaw)
        noise = self._reset_joint_noise
        qpos[:, self._qpos_adr] += rng.uniform(-noise, noise, (n, self._qpos_adr.size))
        self.qpos[env_ids] = qpos
        self.qvel[env_ids] = 0.0
        kick = self._reset_base_velocity
        if kick > 0:
            self.qvel[env_ids, 0:6] = rng.uniform(-kick, kick, (n, 6))
        self._feet_contact[env_ids] = True
        self._reset_commands(env_ids, rng)
        if self.RANDOM_GAIT_PHASE:
            self._phase_start[env_ids] = rng.uniform(0.0, 2.0 * np.pi, n)

    def _task_buffers(self) -> dict[str, np.ndarray]:
        return {
            **super()._task_buffers(),
            "feet_contact": self._feet_contact,
            "gait_phase_start": self._phase_start,
        }

    def _gait_phase(self) -> np.ndarray:
        """``[N, len(GAIT_PHASE_OFFSETS)]``: the phases (rad) of the gait clock the policy sees."""
        return (
            self._phase_rate * self._elapsed[:, None]
            + self._phase_offsets
            + self._phase_start[:, None]
        )

    # ------------------------------------------------------------------ reward terms

    def _term_lin_vel_z(self, lin_vel: np.ndarray, ang_vel: np.ndarray) -> np.ndarray:
        return np.square(lin_vel[:, 2])

    def _term_ang_vel_xy(self, lin_vel: np.ndarray, ang_vel: np.ndarray) -> np.ndarray:
        return np.sum(np.square(ang_vel[:, :2]), axis=1)

    def _term_orientation(self, lin_vel: np.ndarray, ang_vel: np.ndarray) -> np.ndarray:
        gravity = rotate_to_body(self._xquat[:, self._upright_body], GRAVITY_DIR)
        return np.sum(np.square(gravity[:, :2]), axis=1)

    def _term_base_height(self, lin_vel: np.ndarray, ang_vel: np.ndarray) -> np.ndarray:
        return np.square(self.qpos[:, 2] - self._base_height_target)

    def _term_action_rate(self, lin_vel: np.ndarray, ang_vel: np.ndarray) -> np.ndarray:
        return self._action_rate()

    def _term_similar_to_default(self, lin_vel: np.ndarray, ang_vel: np.ndarray) -> np.ndarray:
        return np.sum(np.abs(self.qpos[:, self._qpos_adr] - self.default_joint_pos), axis=1)


def robot_constructor(**defaults: Any) -> Callable[..., None]:
    """:class:`LeggedRobotEnv`'s constructor with one robot's ``defaults``, for its ``__init__``.

    The typed arguments are written once, on :class:`LeggedRobotEnv`, and the signature that
    jsonargparse reads (the robot task's config schema, as ``--print_config`` shows it) carries
    the robot's values.

    Raises:
        TypeError: If ``defaults`` names no argument of the constructor.
    """
    base = LeggedRobotEnv.__init__
    unknown = sorted(set(defaults) - set(inspect.signature(base).parameters))
    if unknown:
        raise TypeError(f"robot_constructor: LeggedRobotEnv has no arguments {unknown}")
    init = types.FunctionType(
        base.__code__, base.__globals__, base.__name__, base.__defaults__, base.__closure__
    )
    init.__kwdefaults__ = {**(base.__kwdefaults__ or {}), **defaults}
    init.__annotations__ = dict(base.__annotations__)
    init.__module__ = base.__module__
    init.__qualname__ = base.__qualname__
    return init
