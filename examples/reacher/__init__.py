"""An example of a user's own task: a two-link arm that reaches for a random target.

Nothing in ``unilab_lit`` knows this package; a config names the class by its path::

    data:
      init_args:
        collector:
          task:
            class_path: examples.reacher.Reacher
            init_args: {max_episode_steps: 50}

See ``docs/tasks.md`` for what each method does.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import mujoco
import numpy as np

from unilab_lit.envs.base import BatchedMujocoEnv, Obs
from unilab_lit.envs.spec import CRITIC, POLICY

LINK_LENGTH = 0.1  # both links, as in reacher.xml


class Reacher(BatchedMujocoEnv):
    """Move the fingertip of a planar two-link arm onto a target drawn at every reset.

    Observation (policy, 10): ``cos`` and ``sin`` of both joint angles, joint velocities, the
    target and the fingertip-to-target vector; the critic also gets the distance (11). Reward
    ``distance + ctrl``: minus the fingertip's distance to the target and minus the weighted
    squared action. Episodes time out; metric ``distance`` is the mean distance per episode.

    Args:
        num_envs: Number of simulations (the trainer passes it).
        seed: Seed of the targets, reset noise and timeout stagger (the trainer passes it).
        num_threads: Threads stepping the physics (the trainer passes it).
        xml_file: The arm's MJCF (two hinge joints, two motors); ``None``: this package's
            ``reacher.xml``.
        ctrl_cost_weight: Weight of the squared action.
        target_radius: Targets lie in ``[0.05, target_radius]`` from the shoulder (<= 0.2).
        frame_skip: Physics steps per control step.
        max_episode_steps: Control steps per episode.

    Raises:
        ValueError: If ``target_radius`` is outside ``(0.05, 0.2]``.
    """

    REWARD_TERMS = ("distance", "ctrl")

    def __init__(
        self,
        num_envs: int,
        *,
        seed: int = 0,
        num_threads: int = 1,
        xml_file: str | None = None,
        ctrl_cost_weight: float = 0.01,
        target_radius: float = 0.18,
        frame_skip: int = 2,
        max_episode_steps: int = 50,
    ) -> None:
        if not 0.05 < target_radius <= 2 * LINK_LENGTH:
            raise ValueError(f"Reacher: target_radius must be in (0.05, 0.2], got {target_radius}")
        super().__init__(
            mujoco.MjModel.from_xml_path(xml_file or str(Path(__file__).with_name("reacher.xml"))),
            num_envs,
            frame_skip=frame_skip,
            max_episode_steps=max_episode_steps,
            obs_sizes={POLICY: 10, CRITIC: 11},
            reward_terms=self.REWARD_TERMS,
            episode_metrics=("distance",),
            seed=seed,
            num_threads=num_threads,
        )
        self._ctrl_cost_weight = ctrl_cost_weight
        self._target_radius = target_radius
        self._target = np.zeros((num_envs, 2))

    # ------------------------------------------------------------------ task hooks

    def _compute_obs(self) -> Obs:
        to_target = self._target - self._fingertip()
        policy = np.concatenate(
            [np.cos(self.qpos), np.sin(self.qpos), self.qvel, self._target, to_target], axis=1
        )
        distance = np.linalg.norm(to_target, axis=1, keepdims=True)
        return {POLICY: policy, CRITIC: np.concatenate([policy, distance], axis=1)}

    def _compute_reward(self, actions: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        distance = -self._distance()
        ctrl = -self._ctrl_cost_weight * np.square(actions).sum(axis=1)
        return distance + ctrl, {"distance": distance, "ctrl": ctrl}

    def _compute_metrics(self) -> dict[str, np.ndarray]:
        return {"distance": self._distance()}

    def _reset_state(self, env_ids: np.ndarray, rng: np.random.Generator) -> None:
        n = len(env_ids)
        self.qpos[env_ids] = rng.uniform(-0.1, 0.1, size=(n, 2))
        self.qvel[env_ids] = 0.0
        radius = rng.uniform(0.05, self._target_radius, size=n)
        angle = rng.uniform(-np.pi, np.pi, size=n)
        self._target[env_ids] = np.stack([radius * np.cos(angle), radius * np.sin(angle)], 1)

    # ------------------------------------------------------------------ state

    def state_dict(self) -> dict[str, Any]:
        """The base state plus the targets (they carry over from one step to the next)."""
        return {**super().state_dict(), "target": self._target.copy()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self._target[:] = state["target"]

    # ------------------------------------------------------------------ internals

    def _fingertip(self) -> np.ndarray:
        shoulder, elbow = self.qpos[:, 0], self.qpos[:, 1]
        x = LINK_LENGTH * (np.cos(shoulder) + np.cos(shoulder + elbow))
        y = LINK_LENGTH * (np.sin(shoulder) + np.sin(shoulder + elbow))
        return np.stack([x, y], axis=1)

    def _distance(self) -> np.ndarray:
        return np.linalg.norm(self._target - self._fingertip(), axis=1)
