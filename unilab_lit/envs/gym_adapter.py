"""Bring your own env: any gymnasium environment behind the batched env contract."""

from __future__ import annotations

import importlib
import logging
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorEnv
from gymnasium.vector.utils import iterate

from unilab_lit.envs.base import Obs
from unilab_lit.envs.episodes import EpisodeTotals
from unilab_lit.envs.spec import CRITIC, POLICY, EnvSpec
from unilab_lit.telemetry.log_limits import RateLimitFilter
from unilab_lit.validation import check_arg

log = logging.getLogger(__name__)
# An env (or a learner) that keeps failing would print one line per step; counters keep the total.
log.addFilter(RateLimitFilter())


def check_env_id(env_id: str) -> None:
    """Check that gymnasium can make ``env_id`` (``EnvId`` or ``module:EnvId``) without making it.

    Raises:
        ValueError: One line naming the id and the ``gym:<module>:<EnvId>`` form, which imports
            the module that registers it.
    """
    module, _, name = env_id.rpartition(":")
    try:
        # gymnasium.make imports a "module:EnvId"'s module; gymnasium.spec does not.
        if module:
            importlib.import_module(module)
        gymnasium.spec(name)
    except (gymnasium.error.Error, ImportError) as err:
        reason = str(err).splitlines()[0]
        raise ValueError(
            f"gymnasium has no env {env_id!r} ({reason}); an env that a module of yours "
            f"registers is named with that module: gym:<module>:{name}"
        ) from None


def _groups(obs: np.ndarray) -> Obs:
    """Both groups see the flat observation, each in its own array so that normalising one in
    place cannot change the other."""
    return {POLICY: obs, CRITIC: obs.copy()}


class GymnasiumVectorAdapter:
    """A gymnasium vector env seen through the batched contract of ``BatchedMujocoEnv``.

    ``reset``, ``step``, ``spec`` and ``close`` behave as the contract says: float32 observation
    groups (``policy`` and ``critic`` are copies of the flattened gymnasium observation), float32
    reward, ``terminated``/``truncated`` never both set, auto-reset within ``step`` with the
    pre-reset observation in ``info["final_obs"]``, per-env ``episode`` return and length, and
    the non-finite guard. There are no reward terms.

    Given an env id, the adapter builds a ``SyncVectorEnv`` in ``SAME_STEP`` autoreset mode:
    it hands back the terminal observation and the fresh reset observation in the same call,
    which is the contract. ``NEXT_STEP`` (gymnasium's default) would spend the call after an
    episode end on a reset that ignores the action and reports reward 0, a transition that is
    not one. A user's vector env in ``NEXT_STEP`` or ``DISABLED`` mode is made to behave the
    same way: the adapter resets the finished envs at once with ``reset(options=
    {"reset_mask": done})``, so their terminal observation is the one ``step`` returned.

    This is a compatibility path: gymnasium envs step one by one in this process (the per-env
    loop lives inside gymnasium), and the wrapped env's own time limit decides truncation, so
    episode starts are not staggered.

    Args:
        env: A gymnasium env id (``"Pendulum-v1"``) or a ready ``gymnasium.vector.VectorEnv``.
        num_envs: Copies to build from an env id, >= 1; for a vector env, ``None`` or its own
            ``num_envs``.
        seed: Seed of the first ``reset()`` (env ``i`` gets ``seed + i``, as gymnasium does).
        num_threads: Accepted so that ``make_env`` builds every env alike, >= 1; gymnasium envs
            step on the calling thread whatever its value.
        max_episode_steps: For an env id, the time limit passed to ``gymnasium.make`` (default:
            the registered one). For a vector env, the time limit when the env declares none;
            it must agree with a declared one.
        control_dt: Seconds per step for the spec; default: the env's ``dt``, else
            ``1 / metadata["render_fps"]``.
        env_kwargs: Keyword arguments of ``gymnasium.make`` for an env id.

    Raises:
        ValueError: If the action space is not a ``Box``, a count is out of range, ``num_envs``
            disagrees with the vector env, or the time limit or control dt cannot be found.
    """

    def __init__(
        self,
        env: str | VectorEnv,
        num_envs: int | None = None,
        *,
        seed: int = 0,
        num_threads: int = 1,
        max_episode_steps: int | None = None,
        control_dt: float | None = None,
        env_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        name = type(self).__name__
        check_arg(num_threads >= 1, f"{name}: num_threads", num_threads, ">= 1")
        check_arg(
            max_episode_steps is None or max_episode_steps >= 1,
            f"{name}: max_episode_steps",
            max_episode_steps,
            ">= 1",
        )
        check_arg(control_dt is None or control_dt > 0, f"{name}: control_dt", control_dt, "> 0")
        if isinstance(env, str):
            check_arg(num_envs is not None and num_envs >= 1, f"{name}: num_envs", num_envs, ">= 1")
            make = partial(
                gymnasium.make, env, max_episode_steps=max_episode_steps, **(env_kwargs or {})
            )
            env = SyncVectorEnv([make] * num_envs, autoreset_mode=AutoresetMode.SAME_STEP)
        else:
            if num_envs is not None and num_envs != env.num_envs:
                raise ValueError(
                    f"{name}: num_envs={num_envs} disagrees with the vector env's "
                    f"num_envs={env.num_envs}; pass None"
                )
            if env_kwargs:
                raise ValueError(f"{name}: env_kwargs apply to an env id, not to a vector env")
        self._env = env
        self._autoreset = AutoresetMode(env.metadata.get("autoreset_mode", "NextStep"))

        action_space = env.single_action_space
        check_arg(
            isinstance(action_space, spaces.Box),
            f"{name}: the action space",
            action_space,
            "a gymnasium.spaces.Box (continuous actions)",
        )
        self._action_shape = (env.num_envs, *action_space.shape)
        self._action_dtype = action_space.dtype
        self._obs_space = env.single_observation_space
        obs_size = spaces.flatdim(self._obs_space)
        self.spec = EnvSpec(
            num_envs=env.num_envs,
            obs_sizes={POLICY: obs_size, CRITIC: obs_size},
            action_size=int(np.prod(action_space.shape)),
            action_low=action_space.low.astype(np.float32).reshape(-1),
            action_high=action_space.high.astype(np.float32).reshape(-1),
            control_dt=control_dt if control_dt is not None else self._find_control_dt(),
            max_episode_steps=self._find_max_episode_steps(max_episode_steps),
            reward_terms=(),
        )

        self._seed: int | None = seed
        self._episodes = EpisodeTotals(env.num_envs)
        self._needs_reset = True

    @property
    def num_envs(self) -> int:
        return self.spec.num_envs

    def reset(self, seed: int | None = None, *, stagger: bool = True) -> Obs:
        """Reset every env; returns the observation groups.

        Args:
            seed: Reseeds env ``i`` with ``seed + i`` when given; otherwise the envs continue
                their random streams (from the constructor's ``seed`` on the first reset).
            stagger: Accepted for the batched contract; gymnasium envs start every episode
                in full whatever its value.
        """
        if seed is None:
            seed = self._seed
        self._seed = None
        raw, _ = self._env.reset(seed=seed)
        self._episodes.clear(slice(None))
        self._needs_reset = False
        obs = self._flatten_batch(raw)
        if not np.isfinite(obs).all():
            raise RuntimeError(f"{type(self).__name__}: reset returned a non-finite observation")
        return _groups(obs)

    def step(self, actions: np.ndarray) -> tuple[Obs, np.ndarray, np.ndarray, np.ndarray, dict]:
        """Step every env with ``actions``, auto-resetting finished ones (see the class doc).

        Args:
            actions: ``[num_envs, action_size]``; clipped to the action bounds.

        Raises:
            RuntimeError: If ``reset`` was not called first, or an env resets to a non-finite
                observation.
            ValueError: If ``actions`` has the wrong shape.
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
        actions = np.clip(actions, self.spec.action_low, self.spec.action_high)
        raw, reward, terminated, truncated, info = self._env.step(
            actions.reshape(self._action_shape).astype(self._action_dtype)
        )
        obs = self._flatten_batch(raw)
        reward = np.asarray(reward, dtype=np.float64)
        terminated = np.asarray(terminated, dtype=bool)
        truncated = np.asarray(truncated, dtype=bool) & ~terminated
        done_by_env = terminated | truncated

        final_obs = obs.copy()
        if self._autoreset is AutoresetMode.SAME_STEP and done_by_env.any():
            # obs already holds the reset rows; the terminal ones are in info.
            for i in np.flatnonzero(done_by_env):
                final_obs[i] = self._flatten_one(info["final_obs"][i])

        bad = ~np.isfinite(reward) | ~np.isfinite(final_obs).all(axis=1)
        num_bad = int(np.count_nonzero(bad))
        if num_bad:
            log.warning(
                "%s: %d env(s) went non-finite; resetting them (counted in Train/nonfinite_resets)",
                type(self).__name__,
                num_bad,
            )
            reward[bad] = 0.0
            final_obs[bad] = 0.0
            terminated |= bad
            truncated &= ~bad

        reset_now = bad & ~done_by_env
        if self._autoreset is not AutoresetMode.SAME_STEP:
            reset_now |= done_by_env
        if reset_now.any():
            fresh, _ = self._env.reset(options={"reset_mask": reset_now})
            obs[reset_now] = self._flatten_batch(fresh)[reset_now]
        if not np.isfinite(obs).all():
            raise RuntimeError(f"{type(self).__name__}: reset returned a non-finite observation")

        self._episodes.add(reward)
        done = terminated | truncated
        ids = np.flatnonzero(done)
        episode = self._episodes.finished(ids)
        self._episodes.clear(ids)

        info = {
            "final_obs": _groups(final_obs),
            "done": done,
            "episode": episode,
            "nonfinite_resets": num_bad,
        }
        return _groups(obs), reward.astype(np.float32), terminated, truncated, info

    def render(
        self, env_ids: Sequence[int], width: int = 640, height: int = 480, camera: str | None = None
    ) -> np.ndarray:
        """RGB frames ``[len(env_ids), H, W, 3]`` (uint8) from the envs' own ``render()``.

        The envs must have been made with ``render_mode="rgb_array"`` (``env_kwargs``). A
        gymnasium env fixes its frame size and camera when it is made (MuJoCo envs take
        ``width``/``height``/``camera_name`` in ``env_kwargs``), so ``width``, ``height`` and
        ``camera`` are accepted for the batched contract and not applied.

        Raises:
            ValueError: If the envs do not render ``rgb_array`` frames.
        """
        if self._env.render_mode != "rgb_array":
            raise ValueError(
                f"{type(self).__name__}: the env renders with render_mode="
                f"{self._env.render_mode!r}; make it with env_kwargs={{'render_mode': 'rgb_array'}}"
            )
        frames = self._env.call("render")
        return np.stack([np.asarray(frames[int(i)], dtype=np.uint8) for i in env_ids])

    def deployment_metadata(self) -> dict[str, Any]:
        """Nothing beyond sizes and bounds: a gymnasium env's model and actuators are its own."""
        return {}

    def close(self) -> None:
        """Close the wrapped vector env."""
        self._needs_reset = True
        self._env.close()

    # ------------------------------------------------------------------ internals

    def _flatten_batch(self, raw: Any) -> np.ndarray:
        if isinstance(self._obs_space, spaces.Box):
            # A copy: a vector env built with copy=False reuses its observation buffer.
            return np.array(raw, dtype=np.float32).reshape(self.num_envs, -1)
        # Dict / Tuple observations: gymnasium's own flattening, env by env.
        return np.stack([self._flatten_one(o) for o in iterate(self._env.observation_space, raw)])

    def _flatten_one(self, raw: Any) -> np.ndarray:
        return np.asarray(spaces.flatten(self._obs_space, raw), dtype=np.float32).reshape(-1)

    def _find_control_dt(self) -> float:
        try:
            return float(self._env.get_attr("dt")[0])
        except AttributeError:
            pass
        fps = self._env.metadata.get("render_fps")
        if fps:
            return 1.0 / float(fps)
        raise ValueError(
            f"{type(self).__name__}: the env has no 'dt' and no metadata['render_fps']; "
            "pass control_dt"
        )

    def _find_max_episode_steps(self, requested: int | None) -> int:
        # The sub-envs' spec carries the TimeLimit actually applied (a vector env's own spec
        # keeps the registered default even when make_vec was given another limit).
        specs = self._env.get_attr("spec")
        declared = specs[0].max_episode_steps if specs and specs[0] is not None else None
        if declared is None and self._env.spec is not None:
            declared = self._env.spec.max_episode_steps
        if declared is not None and requested is not None and declared != requested:
            raise ValueError(
                f"{type(self).__name__}: max_episode_steps={requested} disagrees with the env's "
                f"time limit {declared}"
            )
        steps = declared if declared is not None else requested
        if steps is None:
            raise ValueError(
                f"{type(self).__name__}: the env declares no time limit; pass max_episode_steps"
            )
        return int(steps)
