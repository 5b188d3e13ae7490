"""rsl-rl-lib ``VecEnv`` over a batched env, so rsl_rl's ``OnPolicyRunner`` can train our tasks.

Not used by training here: ``bench/appo_vs_rsl_rl.py`` runs rsl_rl's PPO through it as the
in-run baseline, and a user can do the same to compare (rsl-rl-lib is a runtime dependency).
It steps the task in the learner process, with no collector.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
from rsl_rl.env import VecEnv
from tensordict import TensorDict

from unilab_lit.envs.base import BatchedMujocoEnv
from unilab_lit.envs.spec import episode_log_key


class RslRlVecEnv(VecEnv):
    """Presents a :class:`BatchedMujocoEnv` as an rsl-rl-lib 5.x ``VecEnv``.

    Observations are a ``TensorDict`` of the env's groups (``"policy"``, ``"critic"``), so
    rsl_rl's ``obs_groups`` map onto them by name. ``step`` returns ``(obs, rewards, dones,
    extras)`` with ``dones = terminated | truncated`` (long), ``extras["time_outs"]`` the
    truncations (rsl_rl bootstraps those) and ``extras["log"]`` the per-term episode sums and
    the per-episode metric means (``Episode/tracking_error_lin_vel``) of the episodes that
    finished in this step, under the same keys our loggers use, so rsl_rl's TensorBoard shows
    them too.

    The env staggers its first timeouts itself on reset, so rsl_rl's
    ``learn(init_at_random_ep_len=True)``, which assigns ``episode_length_buf``, is refused
    rather than silently ignored. ``last_info`` holds the wrapped env's ``info`` of the latest
    step (final observations, finished episodes) for callers that need more than rsl_rl reads.

    Args:
        env: The batched env; it is reset here with ``seed`` and owned by the adapter
            (:meth:`close` closes it).
        device: Device of every tensor the adapter returns.
        seed: Seed of the first reset (``None`` continues the env's own generator).
    """

    def __init__(
        self, env: BatchedMujocoEnv, device: torch.device | str = "cpu", seed: int | None = None
    ) -> None:
        self.env = env
        self.device = torch.device(device)
        self.num_envs = env.num_envs
        self.num_actions = env.spec.action_size
        self.max_episode_length = env.spec.max_episode_steps
        self.cfg = {"task": type(env).__name__, **dataclasses.asdict(env.spec)}
        self._episode_length = torch.zeros(self.num_envs, dtype=torch.long, device=self.device)
        self._obs = self._to_tensordict(env.reset(seed=seed))
        self.last_info: dict = {}

    @property
    def episode_length_buf(self) -> torch.Tensor:
        """Steps taken in each env's current episode (since the adapter's reset)."""
        return self._episode_length

    @episode_length_buf.setter
    def episode_length_buf(self, value: torch.Tensor) -> None:
        raise AttributeError(
            "RslRlVecEnv.episode_length_buf cannot be assigned: the env staggers its timeouts "
            "itself on reset; call OnPolicyRunner.learn(..., init_at_random_ep_len=False)"
        )

    def get_observations(self) -> TensorDict:
        return self._obs

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict]:
        """Step every env with ``actions`` ``[num_envs, num_actions]`` (clipped by the env)."""
        obs, reward, terminated, truncated, info = self.env.step(
            actions.detach().to("cpu", torch.float32).numpy()
        )
        self.last_info = info
        self._obs = self._to_tensordict(obs)
        done = torch.from_numpy(info["done"]).to(self.device)
        self._episode_length += 1
        self._episode_length[done] = 0
        extras = {
            "time_outs": torch.from_numpy(truncated).to(self.device),
            "log": self._episode_log(info["episode"]),
        }
        return (
            self._obs,
            torch.from_numpy(reward).to(self.device),
            done.to(torch.long),
            extras,
        )

    def close(self) -> None:
        """Close the wrapped env."""
        self.env.close()

    def _to_tensordict(self, obs: dict[str, np.ndarray]) -> TensorDict:
        return TensorDict(
            {group: torch.from_numpy(value) for group, value in obs.items()},
            batch_size=[self.num_envs],
        ).to(self.device)

    def _episode_log(self, episode: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
        if len(episode["return"]) == 0:
            return {}
        logged = {episode_log_key(name): value for name, value in episode.items()}
        return {key: torch.from_numpy(value) for key, value in logged.items() if key is not None}
