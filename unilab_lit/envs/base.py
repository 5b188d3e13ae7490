"""The batched MuJoCo environment: one ``mujoco.batch.Batch`` stepped as a whole, tasks as hooks."""

from __future__ import annotations

import copy
import logging
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

import mujoco
import numpy as np
from mujoco import batch as mj_batch

from unilab_lit.envs.deployment import actuator_metadata
from unilab_lit.envs.env_state import EnvStateDict
from unilab_lit.envs.episodes import EpisodeTotals, columns
from unilab_lit.envs.randomization import DomainRandomization, RandomizationTargets, Randomizer
from unilab_lit.envs.render import CachedFrameRenderer
from unilab_lit.envs.spec import CRITIC, POLICY, EnvSpec, action_bounds
from unilab_lit.envs.symmetry import MirrorSpec
from unilab_lit.telemetry.log_limits import RateLimitFilter
from unilab_lit.validation import check_arg

log = logging.getLogger(__name__)
# An env (or a learner) that keeps failing would print one line per step; counters keep the total.
log.addFilter(RateLimitFilter())

Obs = dict[str, np.ndarray]


class BatchedMujocoEnv(EnvStateDict, ABC):
    """A batch of ``num_envs`` simulations of one model behind a numpy step/reset contract.

    The base class owns everything that is the same for every task: the ``Batch``, action
    clipping and ``frame_skip`` substeps, auto-reset with the pre-reset final observation,
    staggered timeouts, per-term episode accounting, the non-finite guard and seeding. A task
    subclass builds the model, passes its sizes to ``__init__`` and implements the hooks:

    - ``_compute_obs()``: observation groups from the bound arrays (all envs at once);
    - ``_compute_reward(actions)``: the reward and its named terms (all envs at once);
    - ``_reset_state(env_ids, rng)``: write the initial ``qpos``/``qvel`` (and any task
      buffers) of the given envs; the base resets those simulations before and runs
      ``mj_forward`` on them after;

    and may override ``_compute_terminated()``, ``_compute_metrics()``,
    ``_actions_to_ctrl(actions)`` (with ``_action_map()`` describing it for export),
    ``_before_physics()`` and ``_simulate()``. Hooks read and
    write the live arrays returned by ``self.batch.bind(...)``; ``self.qpos``, ``self.qvel``
    and ``self.ctrl`` are bound already.
    Any other task randomness draws from ``self._rng`` (the generator ``seed`` starts), so that
    one seed fixes the whole trajectory.

    A task that offers domain randomisation takes a ``randomization`` argument and passes it on
    with the ``randomization_targets`` of its model (see
    :mod:`unilab_lit.envs.randomization`); with every option off the env is exactly the
    unrandomised one. A symmetric task passes its ``mirror``; a task that names its policy
    observation terms passes ``policy_obs_layout`` (observation noise and export use it).

    Args:
        model: The compiled model; the batch keeps its own copy, with MuJoCo's silent
            auto-reset on bad values disabled so that the non-finite guard sees (and counts) them.
        num_envs: Number of simulations, >= 1.
        frame_skip: Physics substeps per ``step``, >= 1.
        max_episode_steps: Steps after which an episode is truncated, >= 1.
        obs_sizes: Width of each observation group; must name ``"policy"`` and ``"critic"``.
        reward_terms: Names of the terms ``_compute_reward`` returns, in a fixed order.
        episode_metrics: Names of the per-step metrics ``_compute_metrics`` returns; episode
            info reports each as its mean over the episode's steps.
        seed: Seed of the generator behind reset noise and the initial timeout stagger.
        num_threads: Threads of the batch's pool, >= 1.
        action_low: Lower action bound ``[action_size]``; default: the actuators' ``ctrlrange``.
        action_high: Upper action bound ``[action_size]``; default: the actuators' ``ctrlrange``.
        policy_obs_layout: ``(term, width)`` of the policy observation's terms, in order;
            default: one term ``"policy"``.
        mirror: The task's left-right mirror (``EnvSpec.mirror``), if it is symmetric.
        randomization: Domain randomisation per env; ``None`` or all options off: none.
        randomization_targets: The base body, friction geoms and actuators randomisation may
            change; needed by the physics options and pushes.

    Raises:
        ValueError: If a size, count or bound is out of range, the layout or mirror does not fit
            the sizes, or a randomisation option needs a target the task did not give.
    """

    def __init__(
        self,
        model: mujoco.MjModel,
        num_envs: int,
        *,
        frame_skip: int,
        max_episode_steps: int,
        obs_sizes: Mapping[str, int],
        reward_terms: Sequence[str],
        episode_metrics: Sequence[str] = (),
        seed: int = 0,
        num_threads: int = 1,
        action_low: np.ndarray | None = None,
        action_high: np.ndarray | None = None,
        policy_obs_layout: Sequence[tuple[str, int]] = (),
        mirror: MirrorSpec | None = None,
        randomization: DomainRandomization | None = None,
        randomization_targets: RandomizationTargets | None = None,
    ) -> None:
        name = type(self).__name__
        check_arg(num_envs >= 1, f"{name}: num_envs", num_envs, ">= 1")
        check_arg(frame_skip >= 1, f"{name}: frame_skip", frame_skip, ">= 1")
        check_arg(max_episode_steps >= 1, f"{name}: max_episode_steps", max_episode_steps, ">= 1")
        check_arg(num_threads >= 1, f"{name}: num_threads", num_threads, ">= 1")
        missing = {POLICY, CRITIC} - set(obs_sizes)
        if missing:
            raise ValueError(
                f"{name}: obs_sizes must name {sorted({POLICY, CRITIC})}, "
                f"missing {sorted(missing)} in {dict(obs_sizes)}"
            )
        action_low, action_high = action_bounds(model, action_low, action_high, name)

        self._model = copy.copy(model)
        self._model.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_AUTORESET
        self.frame_skip = frame_skip
        self.spec = EnvSpec(
            num_envs=num_envs,
            obs_sizes={k: int(v) for k, v in obs_sizes.items()},
            action_size=int(action_low.shape[0]),
            action_low=action_low,
            action_high=action_high,
            control_dt=float(model.opt.timestep * frame_skip),
            max_episode_steps=max_episode_steps,
            reward_terms=tuple(reward_terms),
            episode_metrics=tuple(episode_metrics),
            policy_obs_layout=tuple((str(term), int(width)) for term, width in policy_obs_layout),
            mirror=mirror,
        )
        self.batch = mj_batch.Batch(self._model, nsim=num_envs, nthread=num_threads)
        self.qpos = self.batch.bind("qpos")
        self.qvel = self.batch.bind("qvel")
        self.ctrl = self.batch.bind("ctrl")

        self._rng = np.random.default_rng(seed)
        self._elapsed = np.zeros(num_envs, dtype=np.int64)
        self._episodes = EpisodeTotals(num_envs, self.spec.reward_terms, self.spec.episode_metrics)
        self._all_ids = np.arange(num_envs, dtype=np.int64)
        self._needs_reset = True
        self._frames = CachedFrameRenderer(self._model, self.batch)
        self._randomizer = (
            Randomizer(
                randomization,
                randomization_targets,
                self._model,
                self.batch,
                self.spec.policy_obs_layout,
                self.spec.control_dt,
                name,
            )
            if randomization is not None and randomization.enabled
            else None
        )

    # ------------------------------------------------------------------ task hooks

    @abstractmethod
    def _compute_obs(self) -> Obs:
        """Observation groups of every env, ``{group: [num_envs, size]}``, from the bound arrays."""

    @abstractmethod
    def _compute_reward(self, actions: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Reward ``[num_envs]`` and each term of ``spec.reward_terms`` ``[num_envs]``.

        Called after the physics step with the clipped actions that were applied.
        """

    @abstractmethod
    def _reset_state(self, env_ids: np.ndarray, rng: np.random.Generator) -> None:
        """Write the initial state of ``env_ids`` (rows of ``self.qpos``, ``self.qvel``, ...)."""

    def _compute_terminated(self) -> np.ndarray:
        """Which envs reached a terminal state after the physics step; none by default."""
        return np.zeros(self.spec.num_envs, dtype=bool)

    def _compute_metrics(self) -> dict[str, np.ndarray]:
        """Each metric of ``spec.episode_metrics`` ``[num_envs]`` after the physics step.

        Called after ``_compute_reward``; none by default.
        """
        return {}

    def _actions_to_ctrl(self, actions: np.ndarray) -> np.ndarray:
        """Map clipped actions to actuator controls; the identity by default."""
        return actions

    def _action_map(self) -> tuple[np.ndarray, np.ndarray]:
        """``(offset, scale)`` per actuator of the affine map ``_actions_to_ctrl`` applies,
        ``ctrl = offset + scale * action``; the identity by default. Export writes it."""
        nu = self._model.nu
        return np.zeros(nu), np.ones(nu)

    def _before_physics(self) -> None:
        """Record what the reward needs from the state before the physics step (e.g. position)."""
        return None

    def _simulate(self) -> None:
        """Advance every simulation by ``frame_skip`` substeps with the controls already set."""
        self.batch.step(nstep=self.frame_skip)

    # ------------------------------------------------------------------ public API

    @property
    def num_envs(self) -> int:
        return self.spec.num_envs

    @property
    def model(self) -> mujoco.MjModel:
        """The model the batch simulates (a copy of the one given to ``__init__``)."""
        return self._model

    def reset(self, seed: int | None = None, *, stagger: bool = True) -> Obs:
        """Reset every env and stagger their timeouts; returns the observation groups.

        Args:
            seed: Reseeds the generator when given; otherwise it continues its stream (the
                constructor's ``seed`` on a fresh env).
            stagger: Spread the first episodes' timeouts over an episode length (for training);
                ``False`` gives every env a full first episode (for evaluation).
        """
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self._reset_envs(self._all_ids)
        if stagger:
            # After the reset (not before it, which the reset would undo) so that timeouts of
            # the first episodes spread over a whole episode length.
            self._elapsed[:] = self._rng.integers(0, self.spec.max_episode_steps, self.num_envs)
        self._needs_reset = False
        obs = self._obs_float32()
        self.spec.check_obs_shapes(obs, type(self).__name__)
        return obs

    def step(self, actions: np.ndarray) -> tuple[Obs, np.ndarray, np.ndarray, np.ndarray, dict]:
        """Apply ``actions`` for ``frame_skip`` substeps, auto-resetting finished envs.

        Args:
            actions: ``[num_envs, action_size]``; clipped to the action bounds.

        Returns:
            ``(obs, reward, terminated, truncated, info)``: obs after auto-reset, float32 reward,
            bool flags (never both set for one env) and ``info`` with ``final_obs``, ``done``,
            ``episode`` and ``nonfinite_resets``. The arrays are fresh on every call, but where
            no env finished ``final_obs`` holds the very arrays of ``obs``.

        Raises:
            RuntimeError: If ``reset`` was not called first.
            ValueError: If ``actions`` has the wrong shape or a NaN/Inf entry.
        """
        if self._needs_reset:
            raise RuntimeError(f"{type(self).__name__}: call reset() before step()")
        expected = (self.num_envs, self.spec.action_size)
        actions = np.asarray(actions, dtype=np.float32)
        if actions.shape != expected:
            raise ValueError(
                f"{type(self).__name__}.step: actions must have shape {expected}, "
                f"got {actions.shape}"
            )
        if not np.isfinite(actions).all():
            rows = np.flatnonzero(~np.isfinite(actions).all(axis=1))
            raise ValueError(
                f"{type(self).__name__}.step: actions are NaN or Inf in envs {rows.tolist()}; "
                "the policy produced non-finite outputs"
            )
        actions = np.clip(actions, self.spec.action_low, self.spec.action_high)

        self._before_physics()
        ctrl = self._actions_to_ctrl(actions)
        if self._randomizer is not None:
            ctrl = self._randomizer.delay(ctrl)
            self._randomizer.push(self.qvel, self._elapsed, self._rng)
        self.ctrl[:] = ctrl
        self._simulate()

        obs = self._obs_float32()
        reward, terms = self._compute_reward(actions)
        terminated = np.asarray(self._compute_terminated(), dtype=bool)
        reward = np.asarray(reward, dtype=np.float64)
        n = self.num_envs
        term_values = columns(terms, self.spec.reward_terms, n, self, "_compute_reward")
        metrics = self._compute_metrics()
        metric_values = columns(metrics, self.spec.episode_metrics, n, self, "_compute_metrics")

        bad = self._nonfinite_rows(obs, reward, term_values)
        num_bad = int(np.count_nonzero(bad))
        if num_bad:
            log.warning(
                "%s: %d env(s) went non-finite; resetting them (counted in Train/nonfinite_resets)",
                type(self).__name__,
                num_bad,
            )
            reward[bad] = 0.0
            term_values[bad] = 0.0
            metric_values[bad] = 0.0
            terminated = terminated | bad
            for value in obs.values():
                value[bad] = 0.0

        self._elapsed += 1
        self._episodes.add(reward, term_values, metric_values)
        truncated = (self._elapsed >= self.spec.max_episode_steps) & ~terminated
        done = terminated | truncated

        final_obs = obs
        ids = np.flatnonzero(done)
        episode = self._episodes.finished(ids)
        if ids.size:
            self._reset_envs(ids)
            fresh = self._obs_float32()
            obs = {}
            for group, value in final_obs.items():
                merged = value.copy()
                merged[ids] = fresh[group][ids]
                obs[group] = merged

        info = {
            "final_obs": final_obs,
            "done": done,
            "episode": episode,
            "nonfinite_resets": num_bad,
        }
        return obs, reward.astype(np.float32), terminated, truncated, info

    def render(
        self, env_ids: Sequence[int], width: int = 640, height: int = 480, camera: str | None = None
    ) -> np.ndarray:
        """RGB frames ``[len(env_ids), height, width, 3]`` (uint8) of the envs' current state.

        Offscreen, without a display (see :class:`~unilab_lit.envs.render.BatchFrameRenderer`
        for the backend and the default camera). The renderer is kept for the next call with
        the same size and camera.

        Raises:
            RuntimeError: If no OpenGL context can be created.
            ValueError: If a size is not positive or ``camera`` is not a camera of the model.
        """
        return self._frames.render(env_ids, width, height, camera)

    def deployment_metadata(self) -> dict[str, Any]:
        """What a deployment script needs besides the policy, as JSON values (export writes it):
        :func:`~unilab_lit.envs.deployment.actuator_metadata` of the model, with this task's
        :meth:`_action_map` and policy observation layout. A task extends it with anything else
        its deployment needs."""
        offset, scale = self._action_map()
        return actuator_metadata(self._model, offset, scale, self.spec.policy_obs_slices())

    @property
    def randomization_values(self) -> dict[str, np.ndarray]:
        """The domain-randomisation values each env runs with now (copies; empty when off):
        ``friction [N]``, ``mass_offset [N]``, ``motor_strength [N, actuators]``, ``delayed [N]``."""
        return {} if self._randomizer is None else self._randomizer.values

    def close(self) -> None:
        """Release the batch; the env cannot be stepped afterwards."""
        self._frames.close()
        self._needs_reset = True
        self.batch = None
        self.qpos = self.qvel = self.ctrl = None

    # ------------------------------------------------------------------ internals

    def _reset_envs(self, ids: np.ndarray) -> None:
        self.batch.reset(ids, stage=mujoco.mjtStage.mjSTAGE_NONE)
        if self._randomizer is not None:
            self._randomizer.resample(ids, self._rng)
        self._reset_state(ids, self._rng)
        self.batch.forward(ids)
        self._elapsed[ids] = 0
        self._episodes.clear(ids)

    def _obs_float32(self) -> Obs:
        obs: Obs = {}
        for group, value in self._compute_obs().items():
            value = np.asarray(value, dtype=np.float32)
            # Tasks may hand the same array to two groups; callers get one array per group so
            # that normalising one group in place cannot change another.
            if any(value is other for other in obs.values()):
                value = value.copy()
            obs[group] = value
        if self._randomizer is not None:
            obs[POLICY] = self._randomizer.noise(obs[POLICY], self._rng)
        return obs

    def _nonfinite_rows(self, obs: Obs, reward: np.ndarray, terms: np.ndarray) -> np.ndarray:
        # A NaN or Inf anywhere in a row survives the row sum, so one isfinite covers them all
        # (finite values so large that the sum overflows mark a broken state as well).
        total = reward + terms.sum(axis=1) + self.qpos.sum(axis=1) + self.qvel.sum(axis=1)
        for value in obs.values():
            total += value.sum(axis=1, dtype=np.float64)
        return ~np.isfinite(total)
