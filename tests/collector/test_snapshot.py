"""The collector's resumable state: capture, file round trip, restore."""

from __future__ import annotations

import logging

import numpy as np
import torch

from unilab_lit.collector import snapshot
from unilab_lit.envs import make_env
from unilab_lit.nn.policies import GaussianActor

NUM_ENVS = 3


def _policy() -> GaussianActor:
    policy = GaussianActor(obs_size=5, action_size=1, hidden_dims=[8], activation="elu")
    policy.noise_scales = torch.rand(NUM_ENVS, 1)  # collector-side state outside state_dict
    return policy


def _run(env, policy, obs, steps: int) -> tuple[dict, list[np.ndarray]]:
    rewards = []
    for _ in range(steps):
        with torch.inference_mode():
            actions = policy.act(torch.from_numpy(obs["policy"]))["actions"].numpy()
        obs, reward, *_ = env.step(actions)
        rewards.append(reward)
    return obs, rewards


def test_restored_collector_continues_episodes_actions_and_exploration_state(tmp_path):
    env, policy = make_env("CartpoleSwingup", NUM_ENVS, seed=2), _policy()
    obs = env.reset(seed=2)
    torch.manual_seed(0)
    obs, _ = _run(env, policy, obs, 5)
    snapshot.write(tmp_path / "state.pt", snapshot.capture(env, obs, policy, env_steps=15))
    _, expected = _run(env, policy, obs, 20)

    other_env, other_policy = make_env("CartpoleSwingup", NUM_ENVS, seed=9), _policy()
    other_policy.load_state_dict(policy.state_dict())  # weights come from the learner
    torch.manual_seed(123)
    state = snapshot.read(tmp_path / "state.pt")
    restored_obs = snapshot.restore(state, other_env, other_policy)
    assert state["env_steps"] == 15
    assert torch.equal(other_policy.noise_scales, policy.noise_scales)
    _, actual = _run(other_env, other_policy, restored_obs, 20)
    assert all(np.array_equal(a, b) for a, b in zip(actual, expected, strict=True))


def test_capture_before_the_first_reset_is_none():
    env = make_env("CartpoleSwingup", NUM_ENVS)
    assert snapshot.capture(env, None, _policy(), env_steps=0) is None


class _StatelessEnv:
    """An env without ``state_dict`` (a gymnasium env behind the adapter, say)."""


def test_env_without_state_resumes_from_a_reset_with_a_warning(caplog):
    obs = {"policy": np.zeros((NUM_ENVS, 5), np.float32)}
    state = snapshot.capture(_StatelessEnv(), obs, _policy(), env_steps=4)
    assert state["env"] is None
    with caplog.at_level(logging.WARNING):
        assert snapshot.restore(state, _StatelessEnv(), _policy()) is None
    assert "starts from a reset" in caplog.text
