"""Gymnasium's contact-sensing walkers, Ant-v5 and Humanoid-v5, on a batched MuJoCo simulation."""

from __future__ import annotations

import mujoco
import numpy as np

from unilab_lit.envs.base import Obs
from unilab_lit.envs.locomotion import _HealthyLocomotion, gymnasium_asset
from unilab_lit.envs.spec import CRITIC, POLICY
from unilab_lit.validation import check_arg


class Ant(_HealthyLocomotion):
    """Gymnasium ``Ant-v5``: walk forward on a four-legged robot.

    Observation (policy = critic, 105): ``qpos[2:]``, ``qvel`` and, by default, the external
    contact wrenches ``clip(cfrc_ext[1:], *contact_force_range)`` (13 bodies x 6). Reward =
    ``forward + survive - ctrl - contact`` with terms ``forward`` (torso x velocity x weight),
    ``survive``, ``ctrl`` and ``contact`` (minus the weighted squared clipped contact wrenches).
    Healthy: finite state and torso height ``qpos[2]`` inside the closed ``healthy_z_range``.

    Args:
        num_envs: Number of simulations.
        seed: Seed of the reset noise and the timeout stagger.
        num_threads: Threads stepping the physics.
        forward_reward_weight: Weight of the forward velocity.
        ctrl_cost_weight: Weight of the squared action.
        contact_cost_weight: Weight of the squared clipped contact wrenches.
        healthy_reward: Reward per step while healthy.
        terminate_when_unhealthy: End the episode (terminated) once unhealthy.
        healthy_z_range: Closed interval for the torso height.
        contact_force_range: Clip range of the contact wrenches.
        include_cfrc_ext_in_observation: Append the clipped contact wrenches to the observation.
        reset_noise_scale: Half-width of the uniform qpos noise and std of the Gaussian qvel noise.
        frame_skip: Physics steps per control step.
        max_episode_steps: Control steps per episode.
    """

    MAIN_BODY = 1

    def __init__(
        self,
        num_envs: int,
        *,
        seed: int = 0,
        num_threads: int = 1,
        forward_reward_weight: float = 1.0,
        ctrl_cost_weight: float = 0.5,
        contact_cost_weight: float = 5e-4,
        healthy_reward: float = 1.0,
        terminate_when_unhealthy: bool = True,
        healthy_z_range: tuple[float, float] = (0.2, 1.0),
        contact_force_range: tuple[float, float] = (-1.0, 1.0),
        include_cfrc_ext_in_observation: bool = True,
        reset_noise_scale: float = 0.1,
        frame_skip: int = 5,
        max_episode_steps: int = 1000,
    ) -> None:
        check_arg(
            contact_force_range[0] <= contact_force_range[1],
            "Ant: contact_force_range",
            contact_force_range,
            "(low, high)",
        )
        sizes = mujoco.MjModel.from_xml_path(str(gymnasium_asset("ant.xml")))
        contact_size = 6 * (sizes.nbody - 1) if include_cfrc_ext_in_observation else 0
        super().__init__(
            "ant.xml",
            num_envs,
            obs_size=sizes.nq - 2 + sizes.nv + contact_size,
            reward_terms=("forward", "survive", "ctrl", "contact"),
            frame_skip=frame_skip,
            max_episode_steps=max_episode_steps,
            reset_noise_scale=reset_noise_scale,
            seed=seed,
            num_threads=num_threads,
            forward_reward_weight=forward_reward_weight,
            ctrl_cost_weight=ctrl_cost_weight,
            healthy_reward=healthy_reward,
            terminate_when_unhealthy=terminate_when_unhealthy,
            healthy_z_range=healthy_z_range,
        )
        self._contact_cost_weight = contact_cost_weight
        self._contact_force_range = contact_force_range
        self._include_cfrc_ext = include_cfrc_ext_in_observation
        self._xpos = self.batch.bind("xpos")
        self._xy_before = np.zeros((num_envs, 2))
        if include_cfrc_ext_in_observation or contact_cost_weight != 0:
            self._probe_contact_forces(num_threads)

    def _before_physics(self) -> None:
        self._xy_before = self._xpos[:, self.MAIN_BODY, :2].copy()

    def _contact_forces(self) -> np.ndarray:
        low, high = self._contact_force_range
        return np.clip(self._cfrc_ext, low, high)

    def _is_healthy(self) -> np.ndarray:
        z = self.qpos[:, 2]
        finite = np.isfinite(self.qpos).all(axis=1) & np.isfinite(self.qvel).all(axis=1)
        return finite & (self._healthy_z_range[0] <= z) & (z <= self._healthy_z_range[1])

    def _compute_obs(self) -> Obs:
        parts = [self.qpos[:, 2:], self.qvel]
        if self._include_cfrc_ext:
            parts.append(self._contact_forces()[:, 1:].reshape(self.num_envs, -1))
        obs = np.concatenate(parts, axis=1).astype(np.float32)
        return {POLICY: obs, CRITIC: obs}

    def _compute_reward(self, actions: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        xy_velocity = (self._xpos[:, self.MAIN_BODY, :2] - self._xy_before) / self._dt
        forward = xy_velocity[:, 0] * self._forward_reward_weight
        survive = self._survive_reward()
        ctrl_cost = self._ctrl_cost(actions, self._ctrl_cost_weight)
        contact = self._contact_forces().reshape(self.num_envs, -1)
        contact_cost = self._contact_cost_weight * np.sum(np.square(contact), axis=1)
        return self._reward_with_contact_cost(forward, survive, ctrl_cost, contact_cost)

    def _reset_state(self, env_ids: np.ndarray, rng: np.random.Generator) -> None:
        n, nq, nv = env_ids.size, self.qpos.shape[1], self.qvel.shape[1]
        self.qpos[env_ids] = self._init_qpos + self._uniform_noise(rng, (n, nq))
        self.qvel[env_ids] = self._reset_noise_scale * rng.standard_normal((n, nv))
        self._zero_contact_forces(env_ids)


class Humanoid(_HealthyLocomotion):
    """Gymnasium ``Humanoid-v5``: walk forward on a 3D humanoid without falling.

    Observation (policy = critic, 348 by default): ``qpos[2:]``, ``qvel`` and, each optional,
    ``cinert[1:]`` (13 bodies x 10), ``cvel[1:]`` (13 x 6), ``qfrc_actuator[6:]`` (17) and
    ``cfrc_ext[1:]`` (13 x 6). Like gymnasium after ``mj_step`` with RK4, the derived fields
    (``cinert``, ``cvel``, ``qfrc_actuator``, ``xipos`` and the contact wrenches) are those of the
    last integration stage. Reward = ``forward + survive - ctrl - contact`` with terms
    ``forward`` (x velocity of the centre of mass x weight), ``survive`` (``healthy_reward``
    while healthy), ``ctrl`` (minus the weighted squared control) and ``contact`` (minus the
    weighted squared contact wrenches of all bodies, clipped to ``contact_cost_range``).
    Healthy: torso height ``qpos[2]`` inside the open ``healthy_z_range``.

    Args:
        num_envs: Number of simulations.
        seed: Seed of the reset noise and the timeout stagger.
        num_threads: Threads stepping the physics.
        forward_reward_weight: Weight of the forward velocity.
        ctrl_cost_weight: Weight of the squared control.
        contact_cost_weight: Weight of the squared contact wrenches.
        contact_cost_range: Clip range of the contact cost.
        healthy_reward: Reward per step while healthy.
        terminate_when_unhealthy: End the episode (terminated) once unhealthy.
        healthy_z_range: Open interval for the torso height.
        include_cinert_in_observation: Append the bodies' com-based inertia.
        include_cvel_in_observation: Append the bodies' com-based velocity.
        include_qfrc_actuator_in_observation: Append the actuator forces of the hinges.
        include_cfrc_ext_in_observation: Append the external contact wrenches.
        reset_noise_scale: Half-width of the uniform qpos and qvel noise.
        frame_skip: Physics steps per control step.
        max_episode_steps: Control steps per episode.

    Raises:
        ValueError: If a range is not ``(low, high)`` or ``reset_noise_scale`` is negative.
    """

    def __init__(
        self,
        num_envs: int,
        *,
        seed: int = 0,
        num_threads: int = 1,
        forward_reward_weight: float = 1.25,
        ctrl_cost_weight: float = 0.1,
        contact_cost_weight: float = 5e-7,
        contact_cost_range: tuple[float, float] = (float("-inf"), 10.0),
        healthy_reward: float = 5.0,
        terminate_when_unhealthy: bool = True,
        healthy_z_range: tuple[float, float] = (1.0, 2.0),
        include_cinert_in_observation: bool = True,
        include_cvel_in_observation: bool = True,
        include_qfrc_actuator_in_observation: bool = True,
        include_cfrc_ext_in_observation: bool = True,
        reset_noise_scale: float = 1e-2,
        frame_skip: int = 5,
        max_episode_steps: int = 1000,
    ) -> None:
        for name, (low, high) in (
            ("contact_cost_range", contact_cost_range),
            ("healthy_z_range", healthy_z_range),
        ):
            check_arg(low <= high, f"Humanoid: {name}", (low, high), "(low, high)")
        sizes = mujoco.MjModel.from_xml_path(str(gymnasium_asset("humanoid.xml")))
        bodies = sizes.nbody - 1
        self._parts = {
            "cinert": include_cinert_in_observation,
            "cvel": include_cvel_in_observation,
            "qfrc_actuator": include_qfrc_actuator_in_observation,
            "cfrc_ext": include_cfrc_ext_in_observation,
        }
        widths = {"cinert": 10 * bodies, "cvel": 6 * bodies, "cfrc_ext": 6 * bodies}
        widths["qfrc_actuator"] = sizes.nv - 6
        obs_size = sizes.nq - 2 + sizes.nv
        obs_size += sum(widths[part] for part, on in self._parts.items() if on)
        super().__init__(
            "humanoid.xml",
            num_envs,
            obs_size=obs_size,
            reward_terms=("forward", "survive", "ctrl", "contact"),
            frame_skip=frame_skip,
            max_episode_steps=max_episode_steps,
            reset_noise_scale=reset_noise_scale,
            seed=seed,
            num_threads=num_threads,
            forward_reward_weight=forward_reward_weight,
            ctrl_cost_weight=ctrl_cost_weight,
            healthy_reward=healthy_reward,
            terminate_when_unhealthy=terminate_when_unhealthy,
            healthy_z_range=healthy_z_range,
        )
        self._contact_cost_weight = contact_cost_weight
        self._contact_cost_range = contact_cost_range
        self._body_mass = self.model.body_mass.copy()
        self._fields = {name: self.batch.bind(name) for name in ("xipos", "cinert", "cvel")}
        self._fields["qfrc_actuator"] = self.batch.bind("qfrc_actuator")
        self._xy_before = np.zeros((num_envs, 2))
        if include_cfrc_ext_in_observation or contact_cost_weight != 0:
            self._probe_contact_forces(num_threads)

    def _mass_center_xy(self) -> np.ndarray:
        mass = self._body_mass
        return (np.einsum("b,nbj->nj", mass, self._fields["xipos"]) / mass.sum())[:, :2]

    def _before_physics(self) -> None:
        self._xy_before = self._mass_center_xy()

    def _is_healthy(self) -> np.ndarray:
        z = self.qpos[:, 2]
        return (self._healthy_z_range[0] < z) & (z < self._healthy_z_range[1])

    def _compute_obs(self) -> Obs:
        n = self.num_envs
        parts = [self.qpos[:, 2:], self.qvel]
        for name in ("cinert", "cvel"):
            if self._parts[name]:
                parts.append(self._fields[name][:, 1:].reshape(n, -1))
        if self._parts["qfrc_actuator"]:
            parts.append(self._fields["qfrc_actuator"][:, 6:])
        if self._parts["cfrc_ext"]:
            parts.append(self._cfrc_ext[:, 1:].reshape(n, -1))
        obs = np.concatenate(parts, axis=1).astype(np.float32)
        return {POLICY: obs, CRITIC: obs}

    def _compute_reward(self, actions: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        xy_velocity = (self._mass_center_xy() - self._xy_before) / self._dt
        forward = self._forward_reward_weight * xy_velocity[:, 0]
        survive = self._survive_reward()
        # gymnasium squares data.ctrl (float64), not the float32 action.
        ctrl_cost = self._ctrl_cost_weight * np.sum(np.square(self.ctrl), axis=1)
        contact = self._cfrc_ext.reshape(self.num_envs, -1)
        contact_cost = np.clip(
            self._contact_cost_weight * np.sum(np.square(contact), axis=1),
            *self._contact_cost_range,
        )
        return self._reward_with_contact_cost(forward, survive, ctrl_cost, contact_cost)

    def _reset_state(self, env_ids: np.ndarray, rng: np.random.Generator) -> None:
        n, nq, nv = env_ids.size, self.qpos.shape[1], self.qvel.shape[1]
        self.qpos[env_ids] = self._init_qpos + self._uniform_noise(rng, (n, nq))
        # gymnasium adds the noise to init_qvel, which is zero.
        self.qvel[env_ids] = self._uniform_noise(rng, (n, nv))
        self._zero_contact_forces(env_ids)
