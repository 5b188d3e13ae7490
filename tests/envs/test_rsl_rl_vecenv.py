"""RslRlVecEnv: rsl-rl-lib's VecEnv interface over a batched env, and OnPolicyRunner on top of it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from rsl_rl.env import VecEnv
from rsl_rl.runners import OnPolicyRunner
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensordict import TensorDict

from unilab_lit.envs import make_env
from unilab_lit.envs.rsl_rl_vecenv import RslRlVecEnv
from unilab_lit.envs.spec import CRITIC, POLICY
from unilab_lit.telemetry import metrics

NUM_ENVS = 4
SHORT_EPISODE = 5


def _adapter(seed: int = 0, **task_kwargs) -> RslRlVecEnv:
    return RslRlVecEnv(make_env("CartpoleSwingup", NUM_ENVS, seed=seed, **task_kwargs), seed=seed)


def _actions(rng: np.random.Generator, steps: int) -> list[np.ndarray]:
    return [rng.uniform(-1, 1, size=(NUM_ENVS, 1)).astype(np.float32) for _ in range(steps)]


def test_adapter_exposes_vecenv_attributes_and_observation_groups() -> None:
    env = _adapter()
    assert isinstance(env, VecEnv)
    assert (env.num_envs, env.num_actions, env.max_episode_length) == (NUM_ENVS, 1, 500)
    assert env.device == torch.device("cpu")
    assert env.cfg["task"] == "CartpoleSwingup"
    obs = env.get_observations()
    assert isinstance(obs, TensorDict)
    assert obs.batch_size == torch.Size([NUM_ENVS])
    assert obs[POLICY].shape == (NUM_ENVS, 5) and obs[CRITIC].shape == (NUM_ENVS, 5)
    assert obs[POLICY].dtype == torch.float32
    env.close()


def test_step_matches_the_wrapped_env_step_for_step() -> None:
    adapter = _adapter(seed=3)
    direct = make_env("CartpoleSwingup", NUM_ENVS, seed=3)
    direct_obs = direct.reset(seed=3)
    torch.testing.assert_close(
        adapter.get_observations()[POLICY], torch.from_numpy(direct_obs[POLICY])
    )
    for actions in _actions(np.random.default_rng(0), 20):
        obs, reward, dones, extras = adapter.step(torch.from_numpy(actions))
        direct_obs, direct_reward, terminated, truncated, _ = direct.step(actions)
        torch.testing.assert_close(obs[POLICY], torch.from_numpy(direct_obs[POLICY]))
        torch.testing.assert_close(obs[CRITIC], torch.from_numpy(direct_obs[CRITIC]))
        torch.testing.assert_close(reward, torch.from_numpy(direct_reward))
        assert torch.equal(dones, torch.from_numpy(terminated | truncated).long())
        assert torch.equal(extras["time_outs"], torch.from_numpy(truncated))
    adapter.close()
    direct.close()


def test_timeouts_set_dones_time_outs_and_reset_episode_length() -> None:
    env = _adapter(max_episode_steps=SHORT_EPISODE)
    seen_timeout = False
    for actions in _actions(np.random.default_rng(1), 2 * SHORT_EPISODE):
        before = env.episode_length_buf.clone()
        _, reward, dones, extras = env.step(torch.from_numpy(actions))
        assert reward.shape == (NUM_ENVS,) and dones.dtype == torch.long
        done = dones.bool()
        assert torch.equal(extras["time_outs"], done)  # the cart-pole never terminates
        assert torch.equal(env.episode_length_buf[done], torch.zeros_like(before[done]))
        assert torch.equal(env.episode_length_buf[~done], before[~done] + 1)
        finished = len(env.last_info["episode"]["return"])
        assert finished == int(done.sum())
        if finished:
            seen_timeout = True
            key = metrics.episode_reward_term("upright")
            assert extras["log"][key].shape == (finished,)
        else:
            assert extras["log"] == {}
    assert seen_timeout
    env.close()


def test_assigning_episode_length_buf_raises_naming_the_runner_flag() -> None:
    env = _adapter()
    with pytest.raises(AttributeError, match="init_at_random_ep_len=False"):
        env.episode_length_buf = torch.zeros(NUM_ENVS, dtype=torch.long)
    env.close()


def test_on_policy_runner_trains_saves_and_logs_episode_metrics_through_the_adapter(
    tmp_path,
) -> None:
    # A task with per-episode metrics (tracking errors) and episodes shorter than a rollout.
    env = RslRlVecEnv(make_env("QuadrupedJoystick", NUM_ENVS, seed=0, max_episode_steps=6), seed=0)
    train_cfg = {
        "num_steps_per_env": 8,
        "save_interval": 100,
        "obs_groups": {"actor": [POLICY], "critic": [CRITIC]},
        "algorithm": {"class_name": "PPO", "num_learning_epochs": 1, "num_mini_batches": 2},
        "actor": {
            "class_name": "MLPModel",
            "hidden_dims": [16],
            "obs_normalization": True,
            "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": 1.0},
        },
        "critic": {"class_name": "MLPModel", "hidden_dims": [16], "obs_normalization": True},
    }
    runner = OnPolicyRunner(env, train_cfg, log_dir=str(tmp_path), device="cpu")
    runner.learn(num_learning_iterations=2)
    assert runner.current_learning_iteration == 1
    assert (tmp_path / "model_1.pt").exists()
    env.close()
    # rsl_rl's own TensorBoard holds the task's tracking errors and reward terms under our keys.
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    for name in ("tracking_error_lin_vel", "tracking_error_ang_vel"):
        values = [event.value for event in events.Scalars(metrics.episode_metric(name))]
        assert len(values) == 2 and all(np.isfinite(values)) and min(values) > 0
    assert metrics.episode_reward_term("tracking_lin_vel") in tags
