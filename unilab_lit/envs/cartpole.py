"""Cart-pole swing-up: the cheap task that default configs and tests train on."""

from __future__ import annotations

from importlib import resources

import mujoco
import numpy as np

from unilab_lit.envs.base import BatchedMujocoEnv, Obs
from unilab_lit.envs.spec import CRITIC, POLICY
from unilab_lit.validation import check_arg

# value_at_margin 0.1 of a Gaussian tolerance: exp(-0.5 * (d * scale)^2) = 0.1 at d = 1.
_GAUSSIAN_SCALE = float(np.sqrt(-2.0 * np.log(0.1)))


def _gaussian_tolerance(x: np.ndarray, margin: float) -> np.ndarray:
    """1 at 0, falling as a Gaussian to 0.1 at ``|x| = margin``."""
    d = x * (_GAUSSIAN_SCALE / margin)
    return np.exp(-0.5 * d * d)


class CartpoleSwingup(BatchedMujocoEnv):
    """Swing a hanging pole up and balance it, keeping the cart centred, in the spirit of
    dm_control's ``cartpole-swingup``.

    reward = upright * centered * small_control * small_velocity, each factor in [0, 1]:
    ``upright = (1 + cos(angle)) / 2``; ``centered = (1 + tol(cart, 2)) / 2``;
    ``small_control = (4 + max(0, 1 - u^2)) / 5``; ``small_velocity = (1 + tol(angvel, 5)) / 2``,
    where ``tol(x, m)`` is a Gaussian that is 1 at 0 and 0.1 at ``|x| = m``. The four factors
    are the reported reward terms. Observation (policy = critic): cart position, cos and sin of
    the pole angle, cart velocity, pole angular velocity. No termination; episodes time out.

    Args:
        num_envs: Number of simulations.
        seed: Seed of the reset noise and the timeout stagger.
        num_threads: Threads stepping the physics.
        frame_skip: Physics steps (10 ms each) per control step.
        max_episode_steps: Control steps per episode.
        reset_noise_scale: Standard deviation of the Gaussian noise on the initial cart
            position, pole angle (around hanging down) and both velocities.
    """

    REWARD_TERMS = ("upright", "centered", "small_control", "small_velocity")
    OBS_SIZE = 5

    def __init__(
        self,
        num_envs: int,
        *,
        seed: int = 0,
        num_threads: int = 1,
        frame_skip: int = 2,
        max_episode_steps: int = 500,
        reset_noise_scale: float = 0.01,
    ) -> None:
        check_arg(
            reset_noise_scale >= 0, "CartpoleSwingup: reset_noise_scale", reset_noise_scale, ">= 0"
        )
        xml = resources.files("unilab_lit.envs").joinpath("assets", "cartpole.xml")
        with resources.as_file(xml) as path:
            model = mujoco.MjModel.from_xml_path(str(path))
        super().__init__(
            model,
            num_envs,
            frame_skip=frame_skip,
            max_episode_steps=max_episode_steps,
            obs_sizes={POLICY: self.OBS_SIZE, CRITIC: self.OBS_SIZE},
            reward_terms=self.REWARD_TERMS,
            seed=seed,
            num_threads=num_threads,
        )
        self._reset_noise_scale = reset_noise_scale

    def _compute_obs(self) -> Obs:
        obs = np.empty((self.num_envs, self.OBS_SIZE), dtype=np.float32)
        obs[:, 0] = self.qpos[:, 0]
        obs[:, 1] = np.cos(self.qpos[:, 1])
        obs[:, 2] = np.sin(self.qpos[:, 1])
        obs[:, 3:5] = self.qvel
        return {POLICY: obs, CRITIC: obs}

    def _compute_reward(self, actions: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        upright = 0.5 * (1.0 + np.cos(self.qpos[:, 1]))
        centered = 0.5 * (1.0 + _gaussian_tolerance(self.qpos[:, 0], margin=2.0))
        control = actions[:, 0].astype(np.float64)
        small_control = (4.0 + np.maximum(0.0, 1.0 - control * control)) / 5.0
        small_velocity = 0.5 * (1.0 + _gaussian_tolerance(self.qvel[:, 1], margin=5.0))
        reward = upright * centered * small_control * small_velocity
        terms = {
            "upright": upright,
            "centered": centered,
            "small_control": small_control,
            "small_velocity": small_velocity,
        }
        return reward, terms

    def _reset_state(self, env_ids: np.ndarray, rng: np.random.Generator) -> None:
        noise = rng.normal(0.0, self._reset_noise_scale, size=(env_ids.size, 4))
        self.qpos[env_ids, 0] = noise[:, 0]
        self.qpos[env_ids, 1] = np.pi + noise[:, 1]
        self.qvel[env_ids] = noise[:, 2:4]
