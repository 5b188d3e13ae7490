"""Domain randomisation per environment: physics drawn at each reset, pushes, sensor noise, delay.

A task accepts a :class:`DomainRandomization` (``randomization:`` in its ``init_args``; every
option off by default) and tells the base class what it may change with
:class:`RandomizationTargets`. The model fields are made per-simulation with
``mujoco.batch.Batch.expand``, so each env of one batch runs its own friction, base mass and
motor strength. All draws come from the env's seeded generator, so a randomised run replays
from its seed, and the drawn values are part of the env's ``state_dict``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import mujoco
import numpy as np
from mujoco import batch as mj_batch

from unilab_lit.validation import check_arg

log = logging.getLogger(__name__)

Range = tuple[float, float]


def _check_range(name: str, value: Range | None, low_bound: float | None) -> None:
    if value is None:
        return
    low, high = value
    valid = "(low, high) with low <= high" + (
        "" if low_bound is None else f" and low > {low_bound}"
    )
    check_arg(
        low <= high and (low_bound is None or low > low_bound),
        f"randomization.{name}",
        value,
        valid,
    )


@dataclass(frozen=True)
class DomainRandomization:
    """What to randomise, per env; ``None`` / 0 leaves an option off (the default for all).

    Args:
        friction_range: Sliding friction of the task's friction geoms (the floor and the robot
            geoms that touch it; MuJoCo takes the larger of two geoms' friction, so all of them
            get the one drawn value), uniform in ``(low, high)``, low > 0, drawn at each reset.
        base_mass_offset_range: Kilograms added to the base body's mass, uniform, drawn at each
            reset (its inertia is kept; the model's derived constants follow).
        base_com_x_offset_range: Metres added to the x (forward) coordinate of the base body's
            centre of mass, uniform, drawn at each reset (the seed's ``random_com``).
        motor_strength_range: Factor on each randomised actuator's force, uniform per actuator,
            drawn at each reset, low > 0. For a position actuator this scales kp (``gainprm``)
            and the matching ``biasprm`` terms (-kp, -kv), so it stays the same PD, stronger
            or weaker.
        push_interval_s: Seconds between pushes of an env within an episode; 0 disables them.
        push_velocity: Largest velocity kick (m/s) a push adds to the base's world-frame
            x and y velocity, each uniform in ``[-push_velocity, push_velocity]``.
        obs_noise: Half-width of uniform noise added to the policy observation, by term of the
            task's observation layout (``EnvSpec.policy_obs_layout``), drawn every step; the
            critic observation stays clean (it is privileged information).
        action_delay_probability: Chance, drawn per env at each reset, that the episode runs
            with one control step of action delay (the simulation applies the previous step's
            controls; the first step of an episode applies its own).

    Raises:
        ValueError: If an option is out of range (the message names it).
    """

    friction_range: Range | None = None
    base_mass_offset_range: Range | None = None
    base_com_x_offset_range: Range | None = None
    motor_strength_range: Range | None = None
    push_interval_s: float = 0.0
    push_velocity: float = 0.0
    obs_noise: Mapping[str, float] = field(default_factory=dict)
    action_delay_probability: float = 0.0

    def __post_init__(self) -> None:
        _check_range("friction_range", self.friction_range, 0.0)
        _check_range("base_mass_offset_range", self.base_mass_offset_range, None)
        _check_range("base_com_x_offset_range", self.base_com_x_offset_range, None)
        _check_range("motor_strength_range", self.motor_strength_range, 0.0)
        check_arg(
            self.push_interval_s >= 0, "randomization.push_interval_s", self.push_interval_s, ">= 0"
        )
        check_arg(
            self.push_velocity >= 0, "randomization.push_velocity", self.push_velocity, ">= 0"
        )
        bad = {k: v for k, v in self.obs_noise.items() if not v >= 0}
        check_arg(not bad, "randomization.obs_noise", bad, "a mapping of term -> scale >= 0")
        check_arg(
            0.0 <= self.action_delay_probability <= 1.0,
            "randomization.action_delay_probability",
            self.action_delay_probability,
            "in [0, 1]",
        )

    @property
    def enabled(self) -> bool:
        """Whether any option is on."""
        return self != DomainRandomization()

    @property
    def pushes(self) -> bool:
        return self.push_interval_s > 0 and self.push_velocity > 0

    def describe(self) -> str:
        """The options that are on, one line, for the log."""
        on = {
            "friction": self.friction_range,
            "base_mass_offset": self.base_mass_offset_range,
            "base_com_x_offset": self.base_com_x_offset_range,
            "motor_strength": self.motor_strength_range,
            "push": (
                f"+-{self.push_velocity} m/s every {self.push_interval_s} s"
                if self.pushes
                else None
            ),
            "obs_noise": dict(self.obs_noise) or None,
            "action_delay_probability": self.action_delay_probability or None,
        }
        return ", ".join(f"{key}={value}" for key, value in on.items() if value is not None)


@dataclass(frozen=True)
class RandomizationTargets:
    """What of a task's model domain randomisation may change: its side of the contract.

    Args:
        base_body: Body id of the floating base (its first joint must be a free joint); mass
            offsets and pushes act on it.
        friction_geoms: Geom ids that take the drawn friction: the floor and every robot geom
            that can touch it.
        actuators: Actuator ids whose force motor strength scales (fixed gain, affine or no
            bias: position, velocity and motor actuators).
    """

    base_body: int
    friction_geoms: tuple[int, ...]
    actuators: tuple[int, ...]

    @classmethod
    def floating_base(cls, model: mujoco.MjModel, base_body: str) -> RandomizationTargets:
        """The usual legged-robot targets: ``base_body`` by name, every geom that can collide,
        every actuator.

        Raises:
            KeyError: If the model has no body ``base_body``.
        """
        collides = (model.geom_contype != 0) | (model.geom_conaffinity != 0)
        return cls(
            base_body=model.body(base_body).id,
            friction_geoms=tuple(int(i) for i in np.flatnonzero(collides)),
            actuators=tuple(range(model.nu)),
        )


class Randomizer:
    """The per-env randomisation of one batch: draws, applies and remembers the values.

    Built by :class:`~unilab_lit.envs.base.BatchedMujocoEnv` when its ``randomization`` has an
    option on; an option that needs a target the task did not declare is refused here.

    Args:
        options: What to randomise.
        targets: What the task allows to change (``None``: nothing; only noise and delay work).
        model: The batch's model (the nominal values).
        batch: The batch whose fields are expanded.
        policy_obs_layout: ``(term, width)`` of the policy observation, for ``obs_noise``.
        control_dt: Seconds per control step, for the push interval.
        owner: The task's name, for messages.

    Raises:
        ValueError: If an option needs a target the task lacks, names an unknown observation
            term, or an actuator cannot be scaled.
    """

    def __init__(
        self,
        options: DomainRandomization,
        targets: RandomizationTargets | None,
        model: mujoco.MjModel,
        batch: mj_batch.Batch,
        policy_obs_layout: Sequence[tuple[str, int]],
        control_dt: float,
        owner: str,
    ) -> None:
        needs_targets = (
            options.friction_range,
            options.base_mass_offset_range,
            options.base_com_x_offset_range,
            options.motor_strength_range,
            options.pushes or None,
        )
        if targets is None and any(need is not None for need in needs_targets):
            raise ValueError(
                f"{owner} declares no randomization targets (base body, friction geoms, "
                "actuators); only randomization.obs_noise and action_delay_probability apply to it"
            )
        self.options = options
        self._batch = batch
        n = batch.nsim
        self._targets = targets
        self._friction = np.ones(n)
        self._mass_offset = np.zeros(n)
        self._com_offset = np.zeros(n)
        num_actuators = 0 if targets is None else len(targets.actuators)
        self._strength = np.ones((n, num_actuators))
        self._delayed = np.zeros(n, dtype=bool)
        self._pending_ctrl = np.zeros((n, model.nu))
        self._has_pending = np.zeros(n, dtype=bool)
        self._noise_scale = self._noise_scale_of(options.obs_noise, policy_obs_layout, owner)
        self._push_interval = max(1, round(options.push_interval_s / control_dt))

        if targets is not None:
            geoms = np.asarray(targets.friction_geoms, dtype=np.int64)
            self._geoms = geoms
            self._base = targets.base_body
            self._actuators = np.asarray(targets.actuators, dtype=np.int64)
            if options.pushes:
                joint = model.body_jntadr[self._base]
                if joint < 0 or model.jnt_type[joint] != mujoco.mjtJoint.mjJNT_FREE:
                    raise ValueError(
                        f"{owner}: randomization pushes need a free joint on the base body "
                        f"{self._base}"
                    )
                self._push_dof = int(model.jnt_dofadr[joint])
            if options.motor_strength_range is not None:
                ids = self._actuators
                scalable = (model.actuator_gaintype[ids] == mujoco.mjtGain.mjGAIN_FIXED) & np.isin(
                    model.actuator_biastype[ids],
                    (mujoco.mjtBias.mjBIAS_NONE, mujoco.mjtBias.mjBIAS_AFFINE),
                )
                if not scalable.all():
                    raise ValueError(
                        f"{owner}: randomization.motor_strength_range scales fixed-gain actuators "
                        f"with affine or no bias; actuators {ids[~scalable].tolist()} are not"
                    )
            self._nominal_friction = model.geom_friction[geoms, 0].copy()
            self._nominal_mass = float(model.body_mass[self._base])
            self._nominal_com_x = float(model.body_ipos[self._base, 0])
            self._nominal_gain = model.actuator_gainprm[self._actuators, 0].copy()
            self._nominal_bias = model.actuator_biasprm[self._actuators, 0:3].copy()
        # Expanded once, here: a field is shared by every simulation until then.
        self._friction_field = (
            batch.expand("geom_friction") if options.friction_range is not None else None
        )
        self._mass_field = (
            batch.expand("body_mass") if options.base_mass_offset_range is not None else None
        )
        self._com_field = (
            batch.expand("body_ipos") if options.base_com_x_offset_range is not None else None
        )
        if options.motor_strength_range is not None:
            self._gain_field = batch.expand("actuator_gainprm")
            self._bias_field = batch.expand("actuator_biasprm")
        log.info("%s: domain randomisation per env: %s", owner, options.describe())

    # ------------------------------------------------------------------ at reset

    def resample(self, env_ids: np.ndarray, rng: np.random.Generator) -> None:
        """Draw and apply new values for ``env_ids`` (called at their reset)."""
        options = self.options
        k = env_ids.size
        if options.friction_range is not None:
            self._friction[env_ids] = rng.uniform(*options.friction_range, k)
        if options.base_mass_offset_range is not None:
            self._mass_offset[env_ids] = rng.uniform(*options.base_mass_offset_range, k)
        if options.base_com_x_offset_range is not None:
            self._com_offset[env_ids] = rng.uniform(*options.base_com_x_offset_range, k)
        if options.motor_strength_range is not None:
            shape = (k, self._strength.shape[1])
            self._strength[env_ids] = rng.uniform(*options.motor_strength_range, shape)
        if options.action_delay_probability > 0:
            self._delayed[env_ids] = rng.random(k) < options.action_delay_probability
        self._has_pending[env_ids] = False
        self._apply(env_ids)

    def _apply(self, env_ids: np.ndarray) -> None:
        """Write the drawn model values of ``env_ids`` into the expanded fields."""
        if self._friction_field is not None:
            self._friction_field[np.ix_(env_ids, self._geoms, [0])] = self._friction[
                env_ids, None, None
            ]
        if self._com_field is not None:
            self._com_field[env_ids, self._base, 0] = (
                self._nominal_com_x + self._com_offset[env_ids]
            )
        if self._mass_field is not None:
            self._mass_field[env_ids, self._base] = self._nominal_mass + self._mass_offset[env_ids]
        if self._mass_field is not None or self._com_field is not None:
            # Subtree masses, inverse weights and the like are derived from the body's inertia.
            self._batch.set_const(env_ids)
        if self.options.motor_strength_range is not None:
            scale = self._strength[env_ids]
            rows = np.ix_(env_ids, self._actuators)
            self._gain_field[(*rows, 0)] = self._nominal_gain * scale
            self._bias_field[(*rows, slice(0, 3))] = self._nominal_bias * scale[..., None]

    # ------------------------------------------------------------------ every step

    def delay(self, ctrl: np.ndarray) -> np.ndarray:
        """The controls to apply: the previous step's for delayed envs past their first step."""
        if self.options.action_delay_probability == 0:
            return ctrl
        hold = (self._delayed & self._has_pending)[:, None]
        applied = np.where(hold, self._pending_ctrl, ctrl)
        self._pending_ctrl[:] = ctrl
        self._has_pending[:] = True
        return applied

    def push(self, qvel: np.ndarray, elapsed: np.ndarray, rng: np.random.Generator) -> None:
        """Kick the base of every env whose episode is at a positive multiple of the interval."""
        if not self.options.pushes:
            return
        due = np.flatnonzero((elapsed > 0) & (elapsed % self._push_interval == 0))
        if due.size:
            v = self.options.push_velocity
            qvel[due, self._push_dof : self._push_dof + 2] += rng.uniform(-v, v, (due.size, 2))

    def noise(self, policy_obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """``policy_obs`` plus uniform noise of the configured per-channel half-width (a new array)."""
        if self._noise_scale is None:
            return policy_obs
        draw = rng.uniform(-1.0, 1.0, policy_obs.shape)
        return (policy_obs + draw * self._noise_scale).astype(policy_obs.dtype)

    # ------------------------------------------------------------------ state

    def state_dict(self) -> dict[str, Any]:
        """The drawn values and the delay's held controls (the model fields follow from them)."""
        return {
            "friction": self._friction.copy(),
            "mass_offset": self._mass_offset.copy(),
            "com_x_offset": self._com_offset.copy(),
            "motor_strength": self._strength.copy(),
            "delayed": self._delayed.copy(),
            "pending_ctrl": self._pending_ctrl.copy(),
            "has_pending": self._has_pending.copy(),
        }

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """The shape of each entry of :meth:`state_dict`, to check a saved state against."""
        return {key: value.shape for key, value in self.state_dict().items()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Take over saved values and write them into the model fields."""
        self._friction[:] = state["friction"]
        self._mass_offset[:] = state["mass_offset"]
        self._com_offset[:] = state["com_x_offset"]
        self._strength[:] = state["motor_strength"]
        self._delayed[:] = state["delayed"]
        self._pending_ctrl[:] = state["pending_ctrl"]
        self._has_pending[:] = state["has_pending"]
        self._apply(np.arange(self._batch.nsim))

    @property
    def values(self) -> dict[str, np.ndarray]:
        """The per-env values in force (copies): friction, base mass and centre-of-mass offsets,
        motor strength and whether the episode runs with action delay."""
        state = self.state_dict()
        keys = ("friction", "mass_offset", "com_x_offset", "motor_strength", "delayed")
        return {key: state[key] for key in keys}

    @staticmethod
    def _noise_scale_of(
        obs_noise: Mapping[str, float], layout: Sequence[tuple[str, int]], owner: str
    ) -> np.ndarray | None:
        if not any(obs_noise.values()):
            return None
        names = [name for name, _ in layout]
        unknown = sorted(set(obs_noise) - set(names))
        if unknown:
            raise ValueError(
                f"randomization.obs_noise names {unknown}, which are not terms of {owner}'s "
                f"policy observation; its terms are {names}"
            )
        return np.concatenate(
            [np.full(width, float(obs_noise.get(name, 0.0))) for name, width in layout]
        )
