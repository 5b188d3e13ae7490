"""The contract every task meets, run on a task as a config names it (the built-in tasks' tests
call it too, so a user's task is held to exactly what they are)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import closing
from typing import Any

import mujoco
import numpy as np

from unilab_lit.envs.base import BatchedMujocoEnv, Obs
from unilab_lit.envs.spec import CRITIC, POLICY
from unilab_lit.envs.task_spec import TaskSpec

# A step of a task: (obs, reward, terminated, truncated, info).
Step = tuple[Obs, np.ndarray, np.ndarray, np.ndarray, dict]
Build = Callable[..., BatchedMujocoEnv]

_SEED = 7
_LIMITED_JOINTS = (mujoco.mjtJoint.mjJNT_HINGE, mujoco.mjtJoint.mjJNT_SLIDE)
# Slack of a reset joint position against its range: MuJoCo itself lets a limit be passed a
# little before the constraint pushes back.
_RANGE_SLACK = 1e-6


class TaskContractError(AssertionError):
    """A task broke a contract; the message is one line: the task, the contract, the cause."""


class _Broken(Exception):
    """Raised inside a contract check with the cause; :func:`check_task` adds task and contract."""


def check_task(
    task: TaskSpec | str | Mapping[str, Any], *, num_envs: int = 6, episode_steps: int = 12
) -> None:
    """Run the contract every task meets on ``task``, built as a config names it.

    The contracts, in order: ``spec`` (observation groups, action bounds, timing, reward
    terms), ``reset`` (shapes, float32, finite, joints within their ranges, clocks at zero),
    ``step`` (shapes and dtypes of every output, disjoint flags, episode info), ``episode
    bookkeeping`` (auto-reset, final observations, episode returns and lengths, staggered
    first timeouts), ``determinism`` (one seed and one action sequence give one trajectory,
    whatever the thread count; another seed another start) and ``action bounds`` (actions
    beyond the bounds act as the bounds). A task whose constructor takes
    ``max_episode_steps`` runs ``episode_steps``-step episodes, so that episodes end.

    Args:
        task: The task: a :class:`TaskSpec`, a name or ``{class_path, init_args}``.
        num_envs: Simulations per env built (each check builds a few), >= 4: the first
            timeouts of so many are staggered over an episode.
        episode_steps: Episode length the checks run with, >= 2.

    Raises:
        ValueError: If ``task`` names no task or its arguments do not fit (see
            :meth:`TaskSpec.from_config`), or ``num_envs`` is below 4 or ``episode_steps`` below 2.
        TaskContractError: One line naming the task, the first broken contract and the cause.
    """
    if num_envs < 4 or episode_steps < 2:
        raise ValueError(
            "check_task: num_envs must be >= 4 and episode_steps >= 2, "
            f"got {num_envs}, {episode_steps}"
        )
    spec = TaskSpec.from_config(task)
    if "max_episode_steps" in spec.init_args:
        spec = TaskSpec(spec.class_path, {**spec.init_args, "max_episode_steps": episode_steps})

    def build(seed: int = 0, num_threads: int = 1) -> BatchedMujocoEnv:
        return spec.build(num_envs, seed=seed, num_threads=num_threads)

    for contract, check in _CONTRACTS:
        try:
            check(build)
        except Exception as err:  # the task's own errors are the contract's cause, too
            cause = str(err) if isinstance(err, _Broken) else f"{type(err).__name__}: {err}"
            cause = " ".join(cause.split())
            raise TaskContractError(f"{spec.class_path}: {contract}: {cause}") from err


def _expect(condition: object, cause: str) -> None:
    if not condition:
        raise _Broken(cause)


def random_actions(env: BatchedMujocoEnv, rng: np.random.Generator) -> np.ndarray:
    """Actions uniform within the env's bounds, ``[num_envs, action_size]`` float32."""
    low, high = env.spec.action_low, env.spec.action_high
    return rng.uniform(low, high, size=(env.num_envs, env.spec.action_size)).astype(np.float32)


def _expect_finite(tree: object, where: str) -> None:
    if isinstance(tree, Mapping):
        for key, value in tree.items():
            _expect_finite(value, f"{where}[{key!r}]")
    elif isinstance(tree, np.ndarray) and tree.dtype.kind == "f":
        _expect(np.isfinite(tree).all(), f"{where} has NaN or Inf")


def _expect_obs(env: BatchedMujocoEnv, obs: Obs, where: str) -> None:
    groups = env.spec.obs_sizes
    _expect(set(obs) == set(groups), f"{where} has groups {sorted(obs)}, the spec {sorted(groups)}")
    for group, size in groups.items():
        value = obs[group]
        shape = (env.num_envs, size)
        _expect(value.shape == shape, f"{where}[{group!r}] is {value.shape}, the spec {shape}")
        _expect(value.dtype == np.float32, f"{where}[{group!r}] is {value.dtype}, not float32")
    _expect_finite(obs, where)


def _check_spec(build: Build) -> None:
    with closing(build()) as env:
        spec = env.spec
        _expect({POLICY, CRITIC} <= set(spec.obs_sizes), f"obs_sizes {spec.obs_sizes}")
        bounds = (spec.action_low.shape, spec.action_high.shape)
        _expect(bounds == ((spec.action_size,),) * 2, f"action bounds of shapes {bounds}")
        _expect(np.all(spec.action_low < spec.action_high), "an action's low is not below high")
        _expect(spec.control_dt > 0, f"control_dt is {spec.control_dt}")
        terms = spec.reward_terms
        _expect(len(terms) == len(set(terms)) >= 1, f"reward terms {terms} (unique, one or more)")


def _check_reset(build: Build) -> None:
    with closing(build()) as env:
        obs = env.reset()
        _expect_obs(env, obs, "reset's obs")
        _expect(not np.shares_memory(obs[POLICY], obs[CRITIC]), "policy and critic share one array")
        _expect_finite({"qpos": env.qpos, "qvel": env.qvel}, "the reset state")
        _expect(np.all(env.batch.bind("time") == 0.0), "the reset clocks are not at zero")
        model = env.model
        for joint in range(model.njnt):
            if not model.jnt_limited[joint] or model.jnt_type[joint] not in _LIMITED_JOINTS:
                continue
            low, high = model.jnt_range[joint]
            qpos = env.qpos[:, model.jnt_qposadr[joint]]
            outside = (qpos < low - _RANGE_SLACK) | (qpos > high + _RANGE_SLACK)
            _expect(
                not outside.any(),
                f"joint {model.joint(joint).name!r} resets to {qpos[outside].min():.6g}, "
                f"outside its range [{low:.6g}, {high:.6g}]",
            )


def _check_step(build: Build) -> None:
    with closing(build()) as env:
        env.reset()
        rng = np.random.default_rng(0)
        spec, n = env.spec, env.num_envs
        episode_keys = (
            {"return", "length", "env_ids"}
            | {f"reward/{term}" for term in spec.reward_terms}
            | {f"metric/{name}" for name in spec.episode_metrics}
        )
        saw_episode = False
        for _ in range(spec.max_episode_steps + 1):
            obs, reward, terminated, truncated, info = env.step(random_actions(env, rng))
            _expect_obs(env, obs, "step's obs")
            _expect_obs(env, info["final_obs"], "info['final_obs']")
            _expect(
                reward.shape == (n,) and reward.dtype == np.float32,
                f"reward is {reward.shape} {reward.dtype}, not [{n}] float32",
            )
            for name, flags in (("terminated", terminated), ("truncated", truncated)):
                _expect(flags.shape == (n,) and flags.dtype == np.bool_, f"{name} is not [N] bool")
            _expect(not np.any(terminated & truncated), "an env is terminated and truncated")
            _expect(
                np.array_equal(info["done"], terminated | truncated),
                "info['done'] is not terminated | truncated",
            )
            _expect(isinstance(info["nonfinite_resets"], int), "nonfinite_resets is not an int")
            episode = info["episode"]
            _expect(set(episode) == episode_keys, f"episode info {sorted(episode)}")
            ids = np.flatnonzero(info["done"])
            _expect(
                episode["env_ids"].dtype == np.int64 and np.array_equal(episode["env_ids"], ids),
                "episode env_ids are not the done envs (int64)",
            )
            for key in episode_keys - {"env_ids"}:
                value = episode[key]
                _expect(
                    value.shape == ids.shape and value.dtype == np.float32,
                    f"episode[{key!r}] is {value.shape} {value.dtype}, not [{ids.size}] float32",
                )
            _expect_finite(info, "info")
            _expect(np.isfinite(reward).all(), "reward has NaN or Inf")
            saw_episode |= ids.size > 0
        _expect(saw_episode, f"no episode ended in {spec.max_episode_steps + 1} steps")


def _check_action_bounds(build: Build) -> None:
    envs = [build(seed=4) for _ in range(2)]
    with closing(envs[0]), closing(envs[1]):
        spec = envs[0].spec
        signs = np.where(np.arange(spec.action_size) % 2 == 0, 1.0, -1.0)
        at_bounds = np.where(signs > 0, spec.action_high, spec.action_low)
        beyond = at_bounds + 10.0 * signs
        steps = []
        for env, actions in zip(envs, (at_bounds, beyond), strict=True):
            env.reset()
            steps.append(env.step(np.tile(actions, (env.num_envs, 1)).astype(np.float32)))
        _expect_same(steps[0], steps[1], "actions beyond the bounds act unlike the bounds")


def _check_episode_bookkeeping(build: Build) -> None:
    with closing(build()) as env:
        env.reset()
        time = env.batch.bind("time")
        rng = np.random.default_rng(2)
        n = env.num_envs
        returns = np.zeros(n)
        lengths = np.zeros(n, dtype=np.int64)
        first_timeout = np.full(n, -1)
        restarted = np.zeros(n, dtype=bool)
        for t in range(2 * env.spec.max_episode_steps):
            obs, reward, _, truncated, info = env.step(random_actions(env, rng))
            done = info["done"]
            returns += reward
            lengths += 1
            first_timeout[(first_timeout < 0) & truncated & (lengths == t + 1)] = t
            for group in env.spec.obs_sizes:
                _expect(
                    np.array_equal(info["final_obs"][group][~done], obs[group][~done]),
                    f"final_obs[{group!r}] differs from obs in envs that did not finish",
                )
            ids = np.flatnonzero(done)
            _expect(np.all(time[ids] == 0.0), "a finished env's clock did not restart")
            _expect(np.all(time[~done] > 0.0), "an unfinished env's clock is at zero")
            for i in ids:
                _expect(
                    not np.array_equal(info["final_obs"][POLICY][i], obs[POLICY][i]),
                    f"env {i} finished, but its obs is its final obs (no reset)",
                )
            episode = info["episode"]
            _expect(
                np.allclose(episode["return"], returns[ids], rtol=1e-4, atol=1e-4),
                f"episode returns {episode['return']} are not the summed rewards {returns[ids]}",
            )
            _expect(
                np.array_equal(episode["length"], lengths[ids]),
                f"episode lengths {episode['length']} are not the step counts {lengths[ids]}",
            )
            full = lengths[ids][restarted[ids] & truncated[ids]]
            _expect(
                np.all(full == env.spec.max_episode_steps),
                f"episodes that started at a reset time out after {full} steps, "
                f"not max_episode_steps={env.spec.max_episode_steps}",
            )
            restarted[ids] = True
            returns[ids] = 0.0
            lengths[ids] = 0
        timed_out = first_timeout[first_timeout >= 0]
        _expect(
            np.unique(timed_out).size > 1 or timed_out.size < 2,
            f"the first timeouts all come at step {timed_out[:1]}: they are not staggered",
        )


def _expect_same(a: Step, b: Step, cause: str) -> None:
    for group in a[0]:
        _expect(np.array_equal(a[0][group], b[0][group]), f"{cause}: obs[{group!r}]")
        final_a, final_b = a[4]["final_obs"][group], b[4]["final_obs"][group]
        _expect(np.array_equal(final_a, final_b), f"{cause}: final_obs[{group!r}]")
    for index, name in ((1, "reward"), (2, "terminated"), (3, "truncated")):
        _expect(np.array_equal(a[index], b[index]), f"{cause}: {name}")


def _check_determinism(build: Build) -> None:
    pairs = [
        ("two envs built with one seed", {"seed": _SEED}, {"seed": _SEED}),
        ("1 and 2 physics threads", {"seed": _SEED}, {"seed": _SEED, "num_threads": 2}),
    ]
    for what, left, right in pairs:
        envs = [build(**left), build(**right)]
        with closing(envs[0]), closing(envs[1]):
            first = [env.reset() for env in envs]
            seeded = first[0][POLICY]
            _expect(np.array_equal(first[0][POLICY], first[1][POLICY]), f"{what}: resets differ")
            rng = np.random.default_rng(1)
            for _ in range(2 * envs[0].spec.max_episode_steps):
                actions = random_actions(envs[0], rng)
                _expect_same(*(env.step(actions) for env in envs), f"{what}: steps differ")
    with closing(build(seed=_SEED + 1)) as env:
        other = env.reset()
        _expect(
            not np.array_equal(other[POLICY], seeded),
            f"seeds {_SEED} and {_SEED + 1} give the same reset",
        )
        start = env.reset(seed=_SEED)
        env.step(random_actions(env, np.random.default_rng(0)))
        replay = env.reset(seed=_SEED)
        for group, value in start.items():
            _expect(
                np.array_equal(value, replay[group]),
                f"reset(seed={_SEED}) after a step does not replay obs[{group!r}]",
            )


_CONTRACTS: tuple[tuple[str, Callable[[Build], None]], ...] = (
    ("spec", _check_spec),
    ("reset", _check_reset),
    ("step", _check_step),
    ("episode bookkeeping", _check_episode_bookkeeping),
    ("determinism", _check_determinism),
    # Compares two envs of one seed, so it runs once determinism holds.
    ("action bounds", _check_action_bounds),
)
