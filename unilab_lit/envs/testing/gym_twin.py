"""A task against a gymnasium MuJoCo env that mirrors it, from the same states with the same
actions: the largest relative errors of observations and rewards."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import closing
from dataclasses import dataclass
from typing import Any

import numpy as np

from unilab_lit.envs.base import BatchedMujocoEnv
from unilab_lit.envs.spec import POLICY
from unilab_lit.envs.task_spec import TaskSpec
from unilab_lit.envs.testing.contract import TaskContractError, random_actions


@dataclass(frozen=True)
class TwinReport:
    """How far a task strayed from its gymnasium twin: each error is the largest relative error
    ``|ours - twin| / (1 + |twin|)`` (an absolute error near zero) over every env and step.

    Args:
        task: The task's class path.
        twin: The gymnasium env id.
        obs: Of the policy observation, after every step and after every re-synchronisation.
        reward: Of the reward, every step.
        terms: Of each episode's sum of a reward term, for the terms gymnasium reports as
            ``info["reward_<term>"]``.
        terminated_mismatches: Steps at which one of the two terminated and the other did not.
        resyncs: Episodes that ended in the task and whose reset state the twin was put into.
        steps: Steps compared, per env.
    """

    task: str
    twin: str
    obs: float
    reward: float
    terms: dict[str, float]
    terminated_mismatches: int
    resyncs: int
    steps: int

    def check(self, tolerance: float = 1e-6) -> None:
        """Raise unless every error is within ``tolerance`` and every termination agrees.

        Raises:
            TaskContractError: One line naming each quantity out of tolerance and its error.
        """
        errors = {"obs": self.obs, "reward": self.reward}
        errors.update({f"reward term {term!r}": error for term, error in self.terms.items()})
        off = [f"{name} {error:.3g}" for name, error in errors.items() if not error <= tolerance]
        if self.terminated_mismatches:
            off.append(f"termination disagrees at {self.terminated_mismatches} step(s)")
        if off:
            raise TaskContractError(
                f"{self.task} and {self.twin} differ beyond {tolerance:g}: {', '.join(off)}"
            )


def compare_with_gymnasium(
    task: TaskSpec | str | Mapping[str, Any],
    env_id: str,
    *,
    gym_kwargs: Mapping[str, Any] | None = None,
    num_envs: int = 2,
    steps: int = 250,
    seed: int = 0,
) -> TwinReport:
    """Step ``task`` and gymnasium's ``env_id`` from the same states with the same actions.

    Each of the task's envs has its own twin, put into the task's state after the first reset
    and after every auto-reset (``twin.set_state(env.qpos[row], env.qvel[row])`` once gymnasium's
    own reset has cleared its warm start), so the two are compared from identical states; the
    task's policy observation must be laid out as gymnasium's, its ``qpos``/``qvel`` as the
    twin model's. Actions are uniform within the task's bounds.

    Args:
        task: The task: a :class:`TaskSpec`, a name or ``{class_path, init_args}``.
        env_id: A gymnasium MuJoCo env (``"Reacher-v5"``).
        gym_kwargs: Passed to ``gymnasium.make`` (``xml_file``, reward weights), so that the
            twin runs the task's model and weights.
        num_envs: Envs (and twins) compared side by side.
        steps: Steps compared.
        seed: Seed of the task and of the actions.

    Raises:
        ValueError: If ``env_id`` is no gymnasium MuJoCo env (it has no ``set_state``), the
            task does not build (see :meth:`TaskSpec.from_config`), or the two observations
            differ in shape.
    """
    import gymnasium  # here: no other task imports it

    spec = TaskSpec.from_config(task)
    twins = [gymnasium.make(env_id, **(gym_kwargs or {})).unwrapped for _ in range(num_envs)]
    if not hasattr(twins[0], "set_state"):
        raise ValueError(f"compare_with_gymnasium: {env_id!r} is not a gymnasium MuJoCo env")
    with closing(spec.build(num_envs, seed=seed)) as env:
        try:
            errors = _compare(env, twins, steps, np.random.default_rng(seed))
        finally:
            for twin in twins:
                twin.close()
    return TwinReport(spec.class_path, env_id, **errors, steps=steps)


def _relative_error(ours: Any, twin: Any) -> float:
    twin = np.asarray(twin, dtype=np.float64)
    return float(np.max(np.abs(np.asarray(ours, dtype=np.float64) - twin) / (1.0 + np.abs(twin))))


def _sync(twin: Any, env: BatchedMujocoEnv, row: int) -> np.ndarray:
    """Put the twin into the env's state; its observation there."""
    twin.reset(seed=row)  # a fresh reset clears the warm start, as the env's reset does
    twin.set_state(env.qpos[row].copy(), env.qvel[row].copy())
    return twin._get_obs()


def _compare(
    env: BatchedMujocoEnv, twins: list[Any], steps: int, rng: np.random.Generator
) -> dict[str, Any]:
    """The report's errors and counts (its fields but task, twin and steps)."""
    obs = env.reset()
    synced = [_sync(twin, env, row) for row, twin in enumerate(twins)]
    if synced[0].shape != obs[POLICY][0].shape:
        raise ValueError(
            f"compare_with_gymnasium: the task's policy observation has shape "
            f"{obs[POLICY][0].shape}, its twin's {synced[0].shape}"
        )
    obs_error = max(_relative_error(obs[POLICY][row], s) for row, s in enumerate(synced))
    reward_error = 0.0
    mismatches = resyncs = 0
    terms = env.spec.reward_terms
    twin_sums = np.zeros((len(twins), len(terms)))
    reported: set[str] = set(terms)
    term_errors = dict.fromkeys(terms, 0.0)
    for _ in range(steps):
        actions = random_actions(env, rng)
        obs, reward, terminated, _, info = env.step(actions)
        for row, twin in enumerate(twins):
            twin_obs, twin_reward, twin_terminated, _, twin_info = twin.step(actions[row])
            reported &= {term for term in terms if f"reward_{term}" in twin_info}
            twin_sums[row] += [twin_info.get(f"reward_{term}", 0.0) for term in terms]
            mismatches += bool(terminated[row]) != bool(twin_terminated)
            reward_error = max(reward_error, _relative_error(reward[row], twin_reward))
            final = info["final_obs"][POLICY][row]
            obs_error = max(obs_error, _relative_error(final, twin_obs))
            if not info["done"][row]:
                continue
            k = int(np.flatnonzero(info["episode"]["env_ids"] == row)[0])
            for column, term in enumerate(terms):
                ours = info["episode"][f"reward/{term}"][k]
                error = _relative_error(ours, twin_sums[row, column])
                term_errors[term] = max(term_errors[term], error)
            twin_sums[row] = 0.0
            obs_error = max(obs_error, _relative_error(obs[POLICY][row], _sync(twin, env, row)))
            resyncs += 1
    return {
        "obs": obs_error,
        "reward": reward_error,
        "terms": {term: term_errors[term] for term in terms if term in reported},
        "terminated_mismatches": mismatches,
        "resyncs": resyncs,
    }
