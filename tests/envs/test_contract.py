"""The batched env beyond the task contract (``tests/envs/testing`` runs that on every registered
task): the registry, refusals, the non-finite guard on every task, the cartpole's own MDP."""

from __future__ import annotations

import numpy as np
import pytest

from unilab_lit.envs import make_env, registered_tasks, task_class
from unilab_lit.envs.base import BatchedMujocoEnv
from unilab_lit.envs.cartpole import CartpoleSwingup
from unilab_lit.envs.spec import POLICY
from unilab_lit.envs.testing.contract import random_actions

TASKS = registered_tasks()
NUM_ENVS = 6


def _make(task: str, num_envs: int = NUM_ENVS, seed: int = 0, **kwargs) -> BatchedMujocoEnv:
    return make_env(task, num_envs, seed=seed, **kwargs)


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
        _, reward, terminated, _, info = env.step(random_actions(env, rng))
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
