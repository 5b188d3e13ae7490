"""GymnasiumVectorAdapter: steps and auto-resets like the single gymnasium env it wraps."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from unilab_lit.envs import make_env
from unilab_lit.envs.gym_adapter import GymnasiumVectorAdapter
from unilab_lit.envs.spec import CRITIC, POLICY


class _BlowUpEnv(gymnasium.Env):
    """Counts steps in its observation; its reward (or observation) turns NaN at one step."""

    observation_space = spaces.Box(-np.inf, np.inf, (2,), np.float32)
    action_space = spaces.Box(-1.0, 1.0, (1,), np.float32)

    def __init__(self, nan_at: int, nan_in: str) -> None:
        self._nan_at = nan_at
        self._nan_in = nan_in
        self._t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        return np.zeros(2, dtype=np.float32), {}

    def step(self, action):
        self._t += 1
        obs = np.array([self._t, action[0]], dtype=np.float32)
        reward = 1.0
        if self._t == self._nan_at:
            if self._nan_in == "reward":
                reward = float("nan")
            else:
                obs[0] = np.inf
        return obs, reward, False, False, {}


def _f32(obs) -> np.ndarray:
    """A single env's observation as the adapter hands it out: flat float32."""
    return np.asarray(obs, dtype=np.float32).reshape(-1)


def _check_against_single_envs(adapter, env_id, seed, steps, make_kwargs):
    """Drive ``adapter`` and one plain gymnasium env per row with the same actions.

    Rows that did not finish must equal the single env's step; a finished row's final
    observation must equal the single env's terminal observation and its next observation
    the single env's next reset. Returns how many episodes ended.
    """
    n = adapter.num_envs
    singles = [gymnasium.make(env_id, **make_kwargs) for _ in range(n)]
    obs = adapter.reset(seed=seed)
    for i, single in enumerate(singles):
        np.testing.assert_array_equal(obs[POLICY][i], _f32(single.reset(seed=seed + i)[0]))
    rng = np.random.default_rng(0)
    low, high = adapter.spec.action_low, adapter.spec.action_high
    ends = 0
    for _ in range(steps):
        actions = rng.uniform(low, high, (n, adapter.spec.action_size)).astype(np.float32)
        obs, reward, terminated, truncated, info = adapter.step(actions)
        assert not np.any(terminated & truncated)
        for i, single in enumerate(singles):
            s_obs, s_reward, s_term, s_trunc, _ = single.step(actions[i])
            np.testing.assert_array_equal(info["final_obs"][POLICY][i], _f32(s_obs))
            assert reward[i] == np.float32(s_reward)
            assert terminated[i] == s_term
            assert truncated[i] == (s_trunc and not s_term)
            if s_term or s_trunc:
                ends += 1
                np.testing.assert_array_equal(obs[POLICY][i], _f32(single.reset()[0]))
            else:
                np.testing.assert_array_equal(obs[POLICY][i], _f32(s_obs))
        np.testing.assert_array_equal(obs[CRITIC], obs[POLICY])
        assert not np.shares_memory(obs[CRITIC], obs[POLICY])
    return ends


def test_make_env_builds_adapter_whose_spec_comes_from_gymnasium():
    env = make_env("gym:Pendulum-v1", num_envs=4)
    assert isinstance(env, GymnasiumVectorAdapter)
    assert env.spec.num_envs == 4
    assert env.spec.obs_sizes == {POLICY: 3, CRITIC: 3}
    assert env.spec.action_size == 1
    np.testing.assert_array_equal(env.spec.action_low, [-2.0])
    np.testing.assert_array_equal(env.spec.action_high, [2.0])
    assert env.spec.control_dt == pytest.approx(0.05)
    assert env.spec.max_episode_steps == 200
    assert env.spec.reward_terms == ()
    obs = env.reset()
    assert {g: (v.shape, v.dtype) for g, v in obs.items()} == {
        POLICY: ((4, 3), np.float32),
        CRITIC: ((4, 3), np.float32),
    }
    obs, reward, terminated, truncated, info = env.step(np.zeros((4, 1), np.float32))
    assert obs[POLICY].dtype == np.float32 and reward.dtype == np.float32
    assert reward.shape == terminated.shape == truncated.shape == (4,)
    assert terminated.dtype == bool and truncated.dtype == bool
    assert info["episode"]["return"].shape == (0,) and info["nonfinite_resets"] == 0
    env.close()


def test_final_obs_is_the_terminal_step_and_next_obs_a_fresh_reset_when_episodes_time_out():
    adapter = make_env("gym:Pendulum-v1", num_envs=2, max_episode_steps=7)
    assert adapter.spec.max_episode_steps == 7
    ends = _check_against_single_envs(
        adapter, "Pendulum-v1", seed=3, steps=16, make_kwargs={"max_episode_steps": 7}
    )
    assert ends == 4  # both envs timed out at steps 7 and 14


def test_final_obs_is_the_terminal_step_and_next_obs_a_fresh_reset_when_episodes_terminate():
    adapter = make_env("gym:InvertedPendulum-v5", num_envs=2, seed=1)
    ends = _check_against_single_envs(
        adapter, "InvertedPendulum-v5", seed=1, steps=40, make_kwargs={}
    )
    assert ends >= 2  # random actions drop the pole within a few dozen steps


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.DISABLED])
def test_user_vector_env_resets_finished_envs_in_the_same_step_when_not_in_same_step_mode(mode):
    vector_env = SyncVectorEnv(
        [lambda: gymnasium.make("Pendulum-v1", max_episode_steps=5)] * 2, autoreset_mode=mode
    )
    adapter = GymnasiumVectorAdapter(vector_env)
    assert adapter.spec.max_episode_steps == 5
    ends = _check_against_single_envs(
        adapter, "Pendulum-v1", seed=0, steps=11, make_kwargs={"max_episode_steps": 5}
    )
    assert ends == 4


def test_episode_info_reports_return_and_length_of_finished_episodes():
    adapter = make_env("gym:Pendulum-v1", num_envs=3, max_episode_steps=4)
    adapter.reset(seed=0)
    rewards = []
    for _ in range(4):
        _, reward, _, truncated, info = adapter.step(np.ones((3, 1), np.float32))
        rewards.append(reward)
    assert truncated.all() and info["done"].all()
    episode = info["episode"]
    np.testing.assert_array_equal(episode["env_ids"], [0, 1, 2])
    np.testing.assert_array_equal(episode["length"], [4, 4, 4])
    np.testing.assert_allclose(episode["return"], np.sum(rewards, axis=0), rtol=1e-6)


def test_same_seed_and_actions_give_identical_trajectories():
    actions = np.random.default_rng(1).uniform(-2, 2, (12, 2, 1)).astype(np.float32)

    def rollout():
        env = make_env("gym:Pendulum-v1", num_envs=2, seed=4, max_episode_steps=5)
        out = [env.reset()[POLICY]]
        for a in actions:
            obs, reward, *_ = env.step(a)
            out += [obs[POLICY], reward]
        return out

    for first, second in zip(rollout(), rollout(), strict=True):
        np.testing.assert_array_equal(first, second)


@pytest.mark.parametrize("nan_in", ["reward", "obs"])
def test_nonfinite_step_resets_the_env_and_reports_it_when_the_env_returns_nan(nan_in):
    vector_env = SyncVectorEnv(
        [lambda: _BlowUpEnv(nan_at=3, nan_in=nan_in), lambda: _BlowUpEnv(nan_at=0, nan_in=nan_in)],
        autoreset_mode=AutoresetMode.SAME_STEP,
    )
    adapter = GymnasiumVectorAdapter(vector_env, max_episode_steps=100, control_dt=0.1)
    adapter.reset()
    for step in range(1, 5):
        obs, reward, terminated, truncated, info = adapter.step(np.zeros((2, 1), np.float32))
        for value in (obs[POLICY], info["final_obs"][POLICY], reward):
            assert np.isfinite(value).all()
        if step == 3:
            assert info["nonfinite_resets"] == 1
            np.testing.assert_array_equal(terminated, [True, False])
            assert reward[0] == 0.0 and not truncated.any()
            np.testing.assert_array_equal(obs[POLICY][0], [0.0, 0.0])  # freshly reset
            np.testing.assert_array_equal(info["episode"]["env_ids"], [0])
        else:
            assert info["nonfinite_resets"] == 0 and not terminated.any()
    # Env 0 restarted its count at step 3; env 1 ran on.
    np.testing.assert_array_equal(obs[POLICY][:, 0], [1.0, 4.0])


def test_rejects_discrete_action_spaces_with_a_message_naming_the_space():
    with pytest.raises(ValueError, match="Box"):
        make_env("gym:CartPole-v1", num_envs=2)


def test_rejects_num_envs_that_disagrees_with_a_vector_env():
    vector_env = SyncVectorEnv([lambda: gymnasium.make("Pendulum-v1")] * 2)
    with pytest.raises(ValueError, match="num_envs=3"):
        GymnasiumVectorAdapter(vector_env, num_envs=3)


def test_rejects_a_time_limit_that_disagrees_with_the_vector_env():
    vector_env = SyncVectorEnv([lambda: gymnasium.make("Pendulum-v1")] * 2)
    with pytest.raises(ValueError, match="max_episode_steps=50"):
        GymnasiumVectorAdapter(vector_env, max_episode_steps=50)
