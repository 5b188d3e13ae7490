"""The batched env contract, checked on every registered task (new tasks are covered by name)."""

from __future__ import annotations

import numpy as np
import pytest

from unilab_lit.envs import make_env, registered_tasks, task_class
from unilab_lit.envs.base import BatchedMujocoEnv
from unilab_lit.envs.cartpole import CartpoleSwingup
from unilab_lit.envs.spec import CRITIC, POLICY

TASKS = registered_tasks()
NUM_ENVS = 6
SHORT_EPISODE = 12


def _make(task: str, num_envs: int = NUM_ENVS, seed: int = 0, **kwargs) -> BatchedMujocoEnv:
    return make_env(task, num_envs, seed=seed, **kwargs)


def _random_actions(env: BatchedMujocoEnv, rng: np.random.Generator) -> np.ndarray:
    low, high = env.spec.action_low, env.spec.action_high
    return rng.uniform(low, high, size=(env.num_envs, env.spec.action_size)).astype(np.float32)


def _assert_finite(tree: object) -> None:
    if isinstance(tree, dict):
        for value in tree.values():
            _assert_finite(value)
    elif isinstance(tree, np.ndarray) and tree.dtype.kind == "f":
        assert np.isfinite(tree).all()


def test_registry_lists_every_contract_task() -> None:
    expected = {"CartpoleSwingup", "HalfCheetah", "Hopper", "Ant", "Humanoid", "QuadrupedJoystick"}
    assert expected <= set(TASKS)


def test_make_env_unknown_name_lists_registered_tasks() -> None:
    with pytest.raises(ValueError) as error:
        make_env("NoSuchTask", 2)
    for name in TASKS:
        assert name in str(error.value)


def test_make_env_builds_a_task_class_by_its_class_path() -> None:
    env = make_env("unilab_lit.envs.cartpole.CartpoleSwingup", 2, max_episode_steps=5)
    assert type(env) is CartpoleSwingup and env.spec.max_episode_steps == 5
    assert task_class("CartpoleSwingup") is CartpoleSwingup


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("no_such_package.Robot", "cannot be imported .*No module named 'no_such_package'"),
        ("collections.OrderedDict", "is not a task: .* not a subclass of .*BatchedMujocoEnv"),
    ],
)
def test_make_env_refuses_a_class_path_that_is_no_task_in_one_line(name, reason) -> None:
    with pytest.raises(ValueError, match=reason) as error:
        make_env(name, 2)
    assert name in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("task", TASKS)
def test_reset_obs_shapes_and_dtypes_match_spec(task: str) -> None:
    env = _make(task)
    spec = env.spec
    obs = env.reset()
    assert spec.num_envs == NUM_ENVS
    assert {POLICY, CRITIC} <= set(spec.obs_sizes)
    assert set(obs) == set(spec.obs_sizes)
    for group, size in spec.obs_sizes.items():
        assert obs[group].shape == (NUM_ENVS, size)
        assert obs[group].dtype == np.float32
    # One array per group, even where a task's critic sees what the policy sees.
    assert not np.shares_memory(obs[POLICY], obs[CRITIC])
    assert spec.action_low.shape == spec.action_high.shape == (spec.action_size,)
    assert np.all(spec.action_low < spec.action_high)
    assert spec.control_dt > 0 and spec.max_episode_steps >= 1
    assert len(spec.reward_terms) == len(set(spec.reward_terms)) >= 1
    _assert_finite(obs)


@pytest.mark.parametrize("task", TASKS)
def test_step_outputs_follow_contract_types(task: str) -> None:
    env = _make(task, max_episode_steps=SHORT_EPISODE)
    env.reset()
    rng = np.random.default_rng(0)
    saw_episode = False
    for _ in range(SHORT_EPISODE + 1):
        obs, reward, terminated, truncated, info = env.step(_random_actions(env, rng))
        for group, size in env.spec.obs_sizes.items():
            assert obs[group].shape == (NUM_ENVS, size) and obs[group].dtype == np.float32
            final = info["final_obs"][group]
            assert final.shape == (NUM_ENVS, size) and final.dtype == np.float32
        assert reward.shape == (NUM_ENVS,) and reward.dtype == np.float32
        for flags in (terminated, truncated, info["done"]):
            assert flags.shape == (NUM_ENVS,) and flags.dtype == np.bool_
        assert not np.any(terminated & truncated)
        np.testing.assert_array_equal(info["done"], terminated | truncated)
        assert isinstance(info["nonfinite_resets"], int)
        episode = info["episode"]
        expected_keys = (
            {"return", "length", "env_ids"}
            | {f"reward/{term}" for term in env.spec.reward_terms}
            | {f"metric/{name}" for name in env.spec.episode_metrics}
        )
        assert set(episode) == expected_keys
        num_done = int(info["done"].sum())
        np.testing.assert_array_equal(episode["env_ids"], np.flatnonzero(info["done"]))
        assert episode["env_ids"].dtype == np.int64
        for key in expected_keys - {"env_ids"}:
            assert episode[key].shape == (num_done,) and episode[key].dtype == np.float32
        saw_episode |= num_done > 0
        _assert_finite(obs)
        _assert_finite(info)
    assert saw_episode


@pytest.mark.parametrize("task", TASKS)
def test_same_seed_and_actions_give_identical_trajectories(task: str) -> None:
    envs = [_make(task, seed=7, max_episode_steps=SHORT_EPISODE) for _ in range(2)]
    first = [env.reset() for env in envs]
    np.testing.assert_array_equal(first[0][POLICY], first[1][POLICY])
    rng = np.random.default_rng(1)
    for _ in range(2 * SHORT_EPISODE):
        actions = _random_actions(envs[0], rng)
        a, b = (env.step(actions) for env in envs)
        for group in envs[0].spec.obs_sizes:
            np.testing.assert_array_equal(a[0][group], b[0][group])
            np.testing.assert_array_equal(a[4]["final_obs"][group], b[4]["final_obs"][group])
        for index in (1, 2, 3):
            np.testing.assert_array_equal(a[index], b[index])
    other = _make(task, seed=8).reset()
    assert not np.array_equal(other[POLICY], first[0][POLICY])


@pytest.mark.parametrize("task", TASKS)
def test_thread_count_does_not_change_the_trajectory(task: str) -> None:
    envs = [_make(task, seed=5, num_threads=threads) for threads in (1, 2)]
    for env in envs:
        env.reset()
    rng = np.random.default_rng(3)
    for _ in range(10):
        actions = _random_actions(envs[0], rng)
        a, b = (env.step(actions) for env in envs)
        np.testing.assert_array_equal(a[0][POLICY], b[0][POLICY])
        np.testing.assert_array_equal(a[1], b[1])


@pytest.mark.parametrize("task", TASKS)
def test_reset_with_seed_replays_the_same_start(task: str) -> None:
    env = _make(task)
    first = env.reset(seed=3)
    env.step(_random_actions(env, np.random.default_rng(0)))
    again = env.reset(seed=3)
    np.testing.assert_array_equal(first[POLICY], again[POLICY])
    np.testing.assert_array_equal(first[CRITIC], again[CRITIC])


@pytest.mark.parametrize("task", TASKS)
def test_auto_reset_returns_final_obs_and_restarts_done_envs(task: str) -> None:
    env = _make(task, max_episode_steps=SHORT_EPISODE)
    env.reset()
    time = env.batch.bind("time")
    rng = np.random.default_rng(2)
    returns = np.zeros(NUM_ENVS)
    lengths = np.zeros(NUM_ENVS, dtype=np.int64)
    checked = 0
    for _ in range(2 * SHORT_EPISODE):
        obs, reward, _, _, info = env.step(_random_actions(env, rng))
        done = info["done"]
        returns += reward
        lengths += 1
        for group in env.spec.obs_sizes:
            # Rows that did not finish carry the same observation in both.
            np.testing.assert_array_equal(info["final_obs"][group][~done], obs[group][~done])
        if not done.any():
            continue
        ids = np.flatnonzero(done)
        # The finished simulations were reset inside step: their clock restarted.
        assert np.all(time[ids] == 0.0)
        assert np.all(time[~done] > 0.0)
        for i in ids:
            assert not np.array_equal(info["final_obs"][POLICY][i], obs[POLICY][i])
        episode = info["episode"]
        np.testing.assert_allclose(episode["return"], returns[ids], rtol=1e-4, atol=1e-4)
        np.testing.assert_array_equal(episode["length"], lengths[ids])
        returns[ids] = 0.0
        lengths[ids] = 0
        checked += ids.size
    assert checked >= NUM_ENVS


@pytest.mark.parametrize("task", TASKS)
def test_timeouts_are_staggered_from_the_first_episode(task: str) -> None:
    num_envs = 16
    env = _make(task, num_envs=num_envs, max_episode_steps=SHORT_EPISODE)
    env.reset()
    zeros = np.zeros((num_envs, env.spec.action_size), dtype=np.float32)
    first_timeout = np.full(num_envs, -1)
    later_lengths = []
    seen_done = np.zeros(num_envs, dtype=bool)
    for t in range(3 * SHORT_EPISODE):
        _, _, terminated, truncated, info = env.step(zeros)
        first = ~seen_done & truncated
        first_timeout[first] = t
        # A timed-out episode that started at a reset (not at the stagger) runs the full length.
        later = seen_done[info["episode"]["env_ids"]] & truncated[info["episode"]["env_ids"]]
        later_lengths += info["episode"]["length"][later].tolist()
        seen_done |= terminated | truncated
    timed_out_first = first_timeout[first_timeout >= 0]
    assert timed_out_first.size >= num_envs // 2
    assert np.unique(timed_out_first).size > 1
    assert later_lengths and all(length == SHORT_EPISODE for length in later_lengths)


@pytest.mark.parametrize("task", TASKS)
def test_nonfinite_state_is_reset_counted_and_never_returned(
    task: str, monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    monkeypatch.chdir(tmp_path)  # MuJoCo's warning handler may write MUJOCO_LOG.TXT here
    env = _make(task)
    env.reset()
    zeros = np.zeros((NUM_ENVS, env.spec.action_size), dtype=np.float32)
    env.step(zeros)
    env.qvel[1, :] = np.nan
    obs, reward, terminated, truncated, info = env.step(zeros)
    assert info["nonfinite_resets"] == 1
    assert terminated[1] and not truncated[1]
    assert reward[1] == 0.0
    assert 1 in info["episode"]["env_ids"]
    _assert_finite(obs)
    _assert_finite(info)
    assert np.isfinite(reward).all()
    assert np.isfinite(env.qpos).all() and np.isfinite(env.qvel).all()
    _, reward, _, _, info = env.step(zeros)
    assert info["nonfinite_resets"] == 0
    assert np.isfinite(reward).all()


@pytest.mark.parametrize("task", TASKS)
def test_actions_are_clipped_to_bounds(task: str) -> None:
    envs = [_make(task, seed=4) for _ in range(2)]
    for env in envs:
        env.reset()
    spec = envs[0].spec
    signs = np.where(np.arange(spec.action_size) % 2 == 0, 1.0, -1.0)
    at_bounds = np.where(signs > 0, spec.action_high, spec.action_low)
    beyond = at_bounds + 10.0 * signs
    a = envs[0].step(np.tile(at_bounds, (NUM_ENVS, 1)).astype(np.float32))
    b = envs[1].step(np.tile(beyond, (NUM_ENVS, 1)).astype(np.float32))
    np.testing.assert_array_equal(a[0][POLICY], b[0][POLICY])
    np.testing.assert_array_equal(a[1], b[1])


def test_step_before_reset_raises() -> None:
    env = make_env("CartpoleSwingup", 2)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(np.zeros((2, 1), dtype=np.float32))


def test_step_with_wrong_action_shape_raises() -> None:
    env = make_env("CartpoleSwingup", 2)
    env.reset()
    with pytest.raises(ValueError, match=r"\(2, 1\)"):
        env.step(np.zeros((2, 3), dtype=np.float32))


def test_step_with_nonfinite_actions_raises_naming_the_envs() -> None:
    env = make_env("CartpoleSwingup", 3)
    env.reset()
    actions = np.zeros((3, 1), dtype=np.float32)
    actions[2, 0] = np.nan
    with pytest.raises(ValueError, match=r"envs \[2\]"):
        env.step(actions)


def test_invalid_constructor_arguments_name_the_argument() -> None:
    with pytest.raises(ValueError, match="num_envs"):
        make_env("CartpoleSwingup", 0)
    with pytest.raises(ValueError, match="num_threads"):
        make_env("CartpoleSwingup", 2, num_threads=0)
    with pytest.raises(ValueError, match="max_episode_steps"):
        make_env("CartpoleSwingup", 2, max_episode_steps=0)


def test_cartpole_starts_hanging_and_rewards_stay_in_unit_interval() -> None:
    env = make_env("CartpoleSwingup", 8)
    obs = env.reset()
    # Observation: cart position, cos(angle), sin(angle), velocities; hanging down is cos = -1.
    assert np.all(obs[POLICY][:, 1] < -0.99)
    rng = np.random.default_rng(0)
    for _ in range(50):
        _, reward, terminated, _, info = env.step(_random_actions(env, rng))
        assert np.all((reward >= 0.0) & (reward <= 1.0))
        assert not terminated.any()
    env.qpos[:, 1] = 0.0  # upright, centred, at rest
    env.qpos[:, 0] = 0.0
    env.qvel[:] = 0.0
    _, reward, _, _, _ = env.step(np.zeros((8, 1), dtype=np.float32))
    assert np.all(reward > 0.95)


def test_close_releases_the_batch() -> None:
    env = make_env("CartpoleSwingup", 2)
    env.reset()
    env.close()
    with pytest.raises(RuntimeError, match="reset"):
        env.step(np.zeros((2, 1), dtype=np.float32))


def test_a_reward_hook_that_drops_a_declared_term_is_named_in_the_error() -> None:
    class TermlessCartpole(CartpoleSwingup):
        def _compute_reward(self, actions):
            reward, terms = super()._compute_reward(actions)
            return reward, {}

    env = TermlessCartpole(2, seed=0)
    env.reset(seed=0)
    missing = env.spec.reward_terms[0]
    with pytest.raises(
        KeyError, match=f"TermlessCartpole._compute_reward did not return '{missing}'"
    ):
        env.step(np.zeros((2, env.spec.action_size), dtype=np.float32))
    env.close()
