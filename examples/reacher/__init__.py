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

from pathlib import Path

import mujoco
import numpy as np

from unilab_lit.envs.base import BatchedMujocoEnv, Obs
from unilab_lit.envs.spec import CRITIC, POLICY

LINK_LENGTH = 0.1  # both links, as in reacher.xml
XML_FILE = Path(__file__).with_name("reacher.xml")


class Reacher(BatchedMujocoEnv):
    """Move the fingertip of a planar two-link arm onto a target drawn at every reset.

    The target sits on two slide joints (``qpos[:, 2:4]``), so the whole state is the physics
    state, laid out as in gymnasium's Reacher. Observation (policy, 10), in gymnasium's
    order: ``cos`` and ``sin`` of both joint angles, the target, the joint velocities and the
    target-to-fingertip vector; the critic also gets the distance (11). Reward ``dist + ctrl``:
    minus the fingertip's distance to the target and minus the weighted squared action, as
    gymnasium's ``reward_dist`` and ``reward_ctrl``. Episodes time out; metric ``distance`` is
    the mean distance per episode.

    Args:
        num_envs: Number of simulations (the trainer passes it).
        seed: Seed of the targets, reset noise and timeout stagger (the trainer passes it).
        num_threads: Threads stepping the physics (the trainer passes it).
        xml_file: The arm's MJCF (two hinge joints with motors, then the target's two slide
            joints; bodies ``fingertip`` and ``target``); ``None``: this package's
            ``reacher.xml``.
        ctrl_cost_weight: Weight of the squared action.
        target_radius: Targets lie in ``[0.05, target_radius]`` from the shoulder (<= 0.2).
        frame_skip: Physics steps per control step.
        max_episode_steps: Control steps per episode.

    Raises:
        ValueError: If ``target_radius`` is outside ``(0.05, 0.2]``.
    """

    REWARD_TERMS = ("dist", "ctrl")

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
        model = mujoco.MjModel.from_xml_path(xml_file or str(XML_FILE))
        super().__init__(
            model,
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
        # World positions of every body, [num_envs, nbody, 3], updated by every step and reset.
        self._xpos = self.batch.bind("xpos")
        self._fingertip = model.body("fingertip").id
        self._target = model.body("target").id

    # ------------------------------------------------------------------ task hooks

    def _compute_obs(self) -> Obs:
        angles = self.qpos[:, :2]
        to_fingertip = self._to_fingertip()
        policy = np.concatenate(
            [np.cos(angles), np.sin(angles), self.qpos[:, 2:], self.qvel[:, :2], to_fingertip],
            axis=1,
        )
        distance = np.linalg.norm(to_fingertip, axis=1, keepdims=True)
        return {POLICY: policy, CRITIC: np.concatenate([policy, distance], axis=1)}

    def _compute_reward(self, actions: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        dist = -self._distance()
        ctrl = -self._ctrl_cost_weight * np.square(actions).sum(axis=1)
        return dist + ctrl, {"dist": dist, "ctrl": ctrl}

    def _compute_metrics(self) -> dict[str, np.ndarray]:
        return {"distance": self._distance()}

    def _reset_state(self, env_ids: np.ndarray, rng: np.random.Generator) -> None:
        n = len(env_ids)
        radius = rng.uniform(0.05, self._target_radius, size=n)
        angle = rng.uniform(-np.pi, np.pi, size=n)
        self.qpos[env_ids, :2] = rng.uniform(-0.1, 0.1, size=(n, 2))
        self.qpos[env_ids, 2:] = np.stack([radius * np.cos(angle), radius * np.sin(angle)], 1)
        self.qvel[env_ids] = 0.0

    # ------------------------------------------------------------------ internals

    def _to_fingertip(self) -> np.ndarray:
        """The target-to-fingertip vector in the table's plane, ``[num_envs, 2]``."""
        return self._xpos[:, self._fingertip, :2] - self._xpos[:, self._target, :2]

    def _distance(self) -> np.ndarray:
        return np.linalg.norm(self._to_fingertip(), axis=1)
