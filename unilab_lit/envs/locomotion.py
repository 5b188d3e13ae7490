"""Gymnasium v5 MuJoCo locomotion tasks (HalfCheetah, Hopper, Ant, Humanoid), batched.

Each task loads the MJCF file the installed gymnasium package ships and reproduces the v5
environment's observation, reward terms, termination, ``frame_skip``, reset noise and defaults,
so that it agrees step for step with ``gymnasium.make("<Name>-v5")`` started from the same state.
"""

from __future__ import annotations

import importlib.util
from abc import abstractmethod
from pathlib import Path
from typing import Any

import mujoco
import numpy as np

from unilab_lit.envs.base import BatchedMujocoEnv, Obs
from unilab_lit.envs.contact_forces import LastStageContactForces
from unilab_lit.envs.spec import CRITIC, POLICY
from unilab_lit.validation import check_arg


def gymnasium_asset(file_name: str) -> Path:
    """Path of an MJCF file shipped by the installed gymnasium (nothing is downloaded).

    Raises:
        FileNotFoundError: If gymnasium is not installed or does not ship ``file_name``.
    """
    found = importlib.util.find_spec("gymnasium")
    if found is None or not found.submodule_search_locations:
        raise FileNotFoundError(
            "gymnasium is not installed; install it with `pip install gymnasium[mujoco]`"
        )
    assets = Path(found.submodule_search_locations[0]) / "envs" / "mujoco" / "assets"
    path = assets / file_name
    if not path.is_file():
        shipped = sorted(p.name for p in assets.glob("*.xml"))
        raise FileNotFoundError(f"gymnasium ships no {file_name!r} in {assets}; it has {shipped}")
    return path


class _GymnasiumLocomotion(BatchedMujocoEnv):
    """What the gymnasium v5 tasks share: the asset, forward progress, ctrl cost, contact probe."""

    def __init__(
        self,
        xml_file: str,
        num_envs: int,
        *,
        obs_size: int,
        reward_terms: tuple[str, ...],
        frame_skip: int,
        max_episode_steps: int,
        reset_noise_scale: float,
        seed: int,
        num_threads: int,
        forward_reward_weight: float,
        ctrl_cost_weight: float,
    ) -> None:
        check_arg(
            reset_noise_scale >= 0,
            f"{type(self).__name__}: reset_noise_scale",
            reset_noise_scale,
            ">= 0",
        )
        self._xml_path = gymnasium_asset(xml_file)
        model = mujoco.MjModel.from_xml_path(str(self._xml_path))
        super().__init__(
            model,
            num_envs,
            frame_skip=frame_skip,
            max_episode_steps=max_episode_steps,
            obs_sizes={POLICY: obs_size, CRITIC: obs_size},
            reward_terms=reward_terms,
            seed=seed,
            num_threads=num_threads,
        )
        self._reset_noise_scale = reset_noise_scale
        self._forward_reward_weight = forward_reward_weight
        self._ctrl_cost_weight = ctrl_cost_weight
        self._init_qpos = model.qpos0.copy()
        # gymnasium's dt, computed the same way so velocities agree to the last bit.
        self._dt = model.opt.timestep * frame_skip
        self._x_before = np.zeros(num_envs)
        self._cfrc_ext = np.zeros((num_envs, model.nbody, 6))
        self._probe: LastStageContactForces | None = None

    def _probe_contact_forces(self, num_threads: int) -> None:
        """Read ``cfrc_ext`` after every step, as gymnasium does with ``mj_rnePostConstraint``."""
        self._probe = LastStageContactForces(self._xml_path, self.batch, num_threads)

    def _before_physics(self) -> None:
        self._x_before = self.qpos[:, 0].copy()

    def _simulate(self) -> None:
        if self._probe is None:
            self.batch.step(nstep=self.frame_skip)
            return
        if self.frame_skip > 1:
            self.batch.step(nstep=self.frame_skip - 1)
        before_last = self.batch.state.copy()
        self.batch.step(nstep=1)
        self._cfrc_ext[:] = self._probe.forces(before_last)

    def _zero_contact_forces(self, env_ids: np.ndarray) -> None:
        # After mj_resetData and a forward pass gymnasium's cfrc_ext is zero.
        self._cfrc_ext[env_ids] = 0.0

    @staticmethod
    def _ctrl_cost(actions: np.ndarray, weight: float) -> np.ndarray:
        # float32 like gymnasium, which squares the float32 action.
        return (weight * np.sum(np.square(actions), axis=1)).astype(np.float64)

    def _uniform_noise(self, rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
        return rng.uniform(-self._reset_noise_scale, self._reset_noise_scale, size=shape)


class _HealthyLocomotion(_GymnasiumLocomotion):
    """Tasks paid while healthy whose episodes end once unhealthy (Hopper, Ant, Humanoid).

    Subclasses define :meth:`_is_healthy` (reading ``_healthy_z_range`` and their own ranges).
    """

    def __init__(
        self,
        xml_file: str,
        num_envs: int,
        *,
        healthy_reward: float,
        terminate_when_unhealthy: bool,
        healthy_z_range: tuple[float, float],
        **locomotion: Any,
    ) -> None:
        super().__init__(xml_file, num_envs, **locomotion)
        self._healthy_reward = healthy_reward
        self._terminate_when_unhealthy = terminate_when_unhealthy
        self._healthy_z_range = healthy_z_range

    @abstractmethod
    def _is_healthy(self) -> np.ndarray:
        """Which envs are healthy after the physics step, ``[num_envs]`` bool."""

    def _survive_reward(self) -> np.ndarray:
        return self._is_healthy() * self._healthy_reward

    def _compute_terminated(self) -> np.ndarray:
        if not self._terminate_when_unhealthy:
            return np.zeros(self.num_envs, dtype=bool)
        return ~self._is_healthy()

    @staticmethod
    def _reward_with_contact_cost(
        forward: np.ndarray, survive: np.ndarray, ctrl_cost: np.ndarray, contact_cost: np.ndarray
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        # gymnasium's grouping: (forward + survive) - (ctrl + contact), bit for bit.
        reward = (forward + survive) - (ctrl_cost + contact_cost)
        terms = {
            "forward": forward,
            "survive": survive,
            "ctrl": -ctrl_cost,
            "contact": -contact_cost,
        }
        return reward, terms


class HalfCheetah(_GymnasiumLocomotion):
    """Gymnasium ``HalfCheetah-v5``: run forward on a planar cheetah.

    Observation (policy = critic, 17): ``qpos[1:]``, ``qvel``. Reward = ``forward - ctrl`` with
    terms ``forward`` (x velocity x weight) and ``ctrl`` (minus the weighted squared action).
    Never terminates; episodes time out.

    Args:
        num_envs: Number of simulations.
        seed: Seed of the reset noise and the timeout stagger.
        num_threads: Threads stepping the physics.
        forward_reward_weight: Weight of the forward velocity.
        ctrl_cost_weight: Weight of the squared action.
        reset_noise_scale: Half-width of the uniform qpos noise and std of the Gaussian qvel noise.
        frame_skip: Physics steps per control step.
        max_episode_steps: Control steps per episode.
    """

    def __init__(
        self,
        num_envs: int,
        *,
        seed: int = 0,
        num_threads: int = 1,
        forward_reward_weight: float = 1.0,
        ctrl_cost_weight: float = 0.1,
        reset_noise_scale: float = 0.1,
        frame_skip: int = 5,
        max_episode_steps: int = 1000,
    ) -> None:
        super().__init__(
            "half_cheetah.xml",
            num_envs,
            obs_size=17,
            reward_terms=("forward", "ctrl"),
            frame_skip=frame_skip,
            max_episode_steps=max_episode_steps,
            reset_noise_scale=reset_noise_scale,
            seed=seed,
            num_threads=num_threads,
            forward_reward_weight=forward_reward_weight,
            ctrl_cost_weight=ctrl_cost_weight,
        )

    def _compute_obs(self) -> Obs:
        obs = np.concatenate([self.qpos[:, 1:], self.qvel], axis=1).astype(np.float32)
        return {POLICY: obs, CRITIC: obs}

    def _compute_reward(self, actions: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        x_velocity = (self.qpos[:, 0] - self._x_before) / self._dt
        forward = self._forward_reward_weight * x_velocity
        ctrl_cost = self._ctrl_cost(actions, self._ctrl_cost_weight)
        return forward - ctrl_cost, {"forward": forward, "ctrl": -ctrl_cost}

    def _reset_state(self, env_ids: np.ndarray, rng: np.random.Generator) -> None:
        n, nq, nv = env_ids.size, self.qpos.shape[1], self.qvel.shape[1]
        self.qpos[env_ids] = self._init_qpos + self._uniform_noise(rng, (n, nq))
        self.qvel[env_ids] = self._reset_noise_scale * rng.standard_normal((n, nv))


class Hopper(_HealthyLocomotion):
    """Gymnasium ``Hopper-v5``: hop forward on one leg without falling.

    Observation (policy = critic, 11): ``qpos[1:]``, ``clip(qvel, -10, 10)``. Reward =
    ``forward + survive - ctrl`` with terms ``forward``, ``survive`` (``healthy_reward`` while
    healthy) and ``ctrl``. Healthy: every entry of ``(qpos, qvel)[2:]`` strictly inside
    ``healthy_state_range``, height ``qpos[1]`` inside ``healthy_z_range`` and torso angle
    ``qpos[2]`` inside ``healthy_angle_range`` (all open intervals).

    Args:
        num_envs: Number of simulations.
        seed: Seed of the reset noise and the timeout stagger.
        num_threads: Threads stepping the physics.
        forward_reward_weight: Weight of the forward velocity.
        ctrl_cost_weight: Weight of the squared action.
        healthy_reward: Reward per step while healthy.
        terminate_when_unhealthy: End the episode (terminated) once unhealthy.
        healthy_state_range: Open interval for ``(qpos, qvel)[2:]``.
        healthy_z_range: Open interval for the torso height.
        healthy_angle_range: Open interval for the torso angle.
        reset_noise_scale: Half-width of the uniform qpos and qvel noise.
        frame_skip: Physics steps per control step.
        max_episode_steps: Control steps per episode.
    """

    def __init__(
        self,
        num_envs: int,
        *,
        seed: int = 0,
        num_threads: int = 1,
        forward_reward_weight: float = 1.0,
        ctrl_cost_weight: float = 1e-3,
        healthy_reward: float = 1.0,
        terminate_when_unhealthy: bool = True,
        healthy_state_range: tuple[float, float] = (-100.0, 100.0),
        healthy_z_range: tuple[float, float] = (0.7, float("inf")),
        healthy_angle_range: tuple[float, float] = (-0.2, 0.2),
        reset_noise_scale: float = 5e-3,
        frame_skip: int = 4,
        max_episode_steps: int = 1000,
    ) -> None:
        super().__init__(
            "hopper.xml",
            num_envs,
            obs_size=11,
            reward_terms=("forward", "survive", "ctrl"),
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
        self._healthy_state_range = healthy_state_range
        self._healthy_angle_range = healthy_angle_range

    def _is_healthy(self) -> np.ndarray:
        low, high = self._healthy_state_range
        state = np.concatenate([self.qpos[:, 2:], self.qvel], axis=1)
        healthy = ((low < state) & (state < high)).all(axis=1)
        z, angle = self.qpos[:, 1], self.qpos[:, 2]
        healthy &= (self._healthy_z_range[0] < z) & (z < self._healthy_z_range[1])
        healthy &= (self._healthy_angle_range[0] < angle) & (angle < self._healthy_angle_range[1])
        return healthy

    def _compute_obs(self) -> Obs:
        velocity = np.clip(self.qvel, -10.0, 10.0)
        obs = np.concatenate([self.qpos[:, 1:], velocity], axis=1).astype(np.float32)
        return {POLICY: obs, CRITIC: obs}

    def _compute_reward(self, actions: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        x_velocity = (self.qpos[:, 0] - self._x_before) / self._dt
        forward = self._forward_reward_weight * x_velocity
        survive = self._survive_reward()
        ctrl_cost = self._ctrl_cost(actions, self._ctrl_cost_weight)
        reward = (forward + survive) - ctrl_cost
        return reward, {"forward": forward, "survive": survive, "ctrl": -ctrl_cost}

    def _reset_state(self, env_ids: np.ndarray, rng: np.random.Generator) -> None:
        n, nq, nv = env_ids.size, self.qpos.shape[1], self.qvel.shape[1]
        self.qpos[env_ids] = self._init_qpos + self._uniform_noise(rng, (n, nq))
        self.qvel[env_ids] = self._uniform_noise(rng, (n, nv))
