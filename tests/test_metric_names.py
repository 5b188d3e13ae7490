"""Metric keys follow rsl-rl-lib's where the meaning is the same, and each key is defined once."""

from __future__ import annotations

import inspect
import re

import rsl_rl.algorithms.ppo
import rsl_rl.utils.logger

from unilab_lit.telemetry import metrics

# Ours -> the same quantity in rsl-rl-lib's logger.
SHARED = {
    metrics.MEAN_REWARD: "Train/mean_reward",
    metrics.MEAN_EPISODE_LENGTH: "Train/mean_episode_length",
    metrics.LOSS_VALUE: "Loss/value",
    metrics.LOSS_SURROGATE: "Loss/surrogate",
    metrics.LOSS_ENTROPY: "Loss/entropy",
    metrics.LEARNING_RATE: "Loss/learning_rate",
    metrics.ACTION_STD: "Policy/mean_std",
    metrics.TOTAL_FPS: "Perf/total_fps",
}


def _rsl_rl_keys() -> set[str]:
    logger = inspect.getsource(rsl_rl.utils.logger)
    keys = set(re.findall(r'add_scalar\(\s*"([A-Za-z]+/[a-z_]+)"', logger))
    # PPO's loss dict, logged as f"Loss/{key}".
    assert 'f"Loss/{key}"' in logger
    loss_dict = re.search(r"loss_dict = \{(.*?)\}", inspect.getsource(rsl_rl.algorithms.ppo), re.S)
    keys.update(f"Loss/{key}" for key in re.findall(r'"([a-z_]+)":', loss_dict.group(1)))
    return keys


def test_shared_metrics_carry_rsl_rl_names():
    rsl_rl_keys = _rsl_rl_keys()
    assert {ours: ours in rsl_rl_keys for ours in SHARED} == dict.fromkeys(SHARED, True)
    assert list(SHARED) == list(SHARED.values())


def test_every_key_is_defined_once():
    keys = [v for k, v in vars(metrics).items() if k.isupper() and isinstance(v, str)]
    assert len(keys) > 30
    assert sorted(k for k in set(keys) if keys.count(k) > 1) == []
