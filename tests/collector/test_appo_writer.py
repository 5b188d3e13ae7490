"""APPO writer end to end: real collector process, real CartpoleSwingup, real RolloutRing."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from collector_rig import ACT, OBS
from collector_workers import ConstantGaussian, EchoPolicy, spec

from unilab_lit.envs.cartpole import CartpoleSwingup
from unilab_lit.envs.spec import CRITIC, POLICY
from unilab_lit.ipc.channel import EPISODES, TIMING
from unilab_lit.nn.normalization import normalize

N, T = 4, 8
SEED = 3
MAX_EPISODE_STEPS = 10


def _read(rig, count: int) -> list:
    """The next ``count`` rollouts, oldest first."""
    items = []
    while len(items) < count:
        rig.collector.wait_for(lambda: rig.ring.available() > 0, timeout=60)
        items.extend(rig.ring.read_available(count - len(items)))
    return items


def test_rollouts_replay_exactly_and_pick_up_published_weights(make_rig):
    policy = ConstantGaussian(OBS, ACT)
    rig = make_rig(
        # The delay keeps the collector from lapping this reader in a 32-slot ring.
        spec("ConstantGaussian", OBS, ACT, delay_s=0.004),
        num_envs=N,
        num_steps=T,
        ring_slots=32,
        weights_of=policy,
        seed=SEED,
        task_args={"max_episode_steps": MAX_EPISODE_STEPS},
        report_interval_s=0.1,
        max_episodes_per_report=2,
    )
    rig.weights.publish_module(policy, version=0)
    items = _read(rig, 3)
    assert [read.sequence for read, _ in items] == [0, 1, 2]
    assert all(read.dropped == 0 for read, _ in items)
    for _, rollout in items:
        for name, (shape, dtype) in rig.ring.fields.items():
            assert rollout[name].shape == shape and rollout[name].dtype == dtype
        assert int(rollout["policy_version"]) == 0

    # Replaying the recorded actions in a fresh env with the same seed must reproduce every
    # stored field (the env is deterministic), which ties done / truncated / final_critic_obs
    # to what the env reported.
    env = CartpoleSwingup(N, seed=SEED, max_episode_steps=MAX_EPISODE_STEPS)
    obs = env.reset(seed=SEED)
    truncations = 0
    for _, rollout in items:
        for t in range(T):
            np.testing.assert_array_equal(rollout["obs"][t].numpy(), obs[POLICY])
            np.testing.assert_array_equal(rollout["critic_obs"][t].numpy(), obs[CRITIC])
            obs, reward, terminated, truncated, info = env.step(rollout["actions"][t].numpy())
            np.testing.assert_array_equal(rollout["reward"][t].numpy(), reward)
            np.testing.assert_array_equal(rollout["done"][t].numpy(), info["done"])
            np.testing.assert_array_equal(rollout["truncated"][t].numpy(), truncated)
            rows = truncated.nonzero()[0]
            np.testing.assert_array_equal(
                rollout["final_critic_obs"][t][rows].numpy(), info["final_obs"][CRITIC][rows]
            )
            truncations += len(rows)
        np.testing.assert_array_equal(rollout["last_critic_obs"].numpy(), obs[CRITIC])
    env.close()
    assert truncations >= N  # every env timed out at least once in 3 * T > MAX_EPISODE_STEPS steps

    # The behaviour log-prob is the density of exactly the stored (unclipped) action.
    actions = torch.cat([r["actions"] for _, r in items])
    log_prob = torch.cat([r["log_prob"] for _, r in items])
    expected = torch.distributions.Normal(0.0, policy.std).log_prob(actions).sum(-1)
    torch.testing.assert_close(log_prob, expected, rtol=0, atol=1e-5)

    with torch.no_grad():
        policy.mean.fill_(4.0)
    rig.weights.publish_module(policy, version=9)
    versions = []
    while not versions or versions[-1] != 9:
        (_, rollout), *_ = _read(rig, 1)
        versions.append(int(rollout["policy_version"]))
    assert versions == sorted(versions) and set(versions) <= {0, 9}
    # 4 sigma below the new mean: every action of the rollout came from the new weights.
    assert rollout["actions"].min() > 4.0 - 4 * policy.std

    messages = rig.collector.drain_metrics()
    kinds = {m["kind"] for m in messages}
    assert kinds == {EPISODES, TIMING}
    episodes = [m for m in messages if m["kind"] == EPISODES]
    assert sum(m["count"] for m in episodes) >= N
    assert all(len(m["return"]) == min(m["count"], 2) for m in episodes)
    assert {"return", "length", "reward/upright", "reward/centered"} <= set(episodes[0])
    timing = [m for m in messages if m["kind"] == TIMING][-1]
    assert timing["env_steps_per_s"] > 0 and timing["weights_version"] in (0, 9)


def test_policy_waits_for_stats_published_after_the_weights_and_ring_keeps_raw_obs(make_rig):
    eps, clip = 1e-8, 2.0
    policy = EchoPolicy(OBS, ACT)
    rig = make_rig(
        spec("EchoPolicy", OBS, ACT),
        num_envs=N,
        num_steps=T,
        weights_of=policy,
        obs_stats=True,
        obs_norm_eps=eps,
        obs_norm_clip=clip,
    )
    mean = torch.tensor([0.1, -0.5, 0.2, 0.0, 0.3], dtype=torch.float64)
    var = torch.tensor([0.01, 0.04, 0.25, 1.0, 4.0], dtype=torch.float64)
    # Weights first, as the learner's WeightSync publishes before its ObsNormSync: the collector
    # waits for the statistics too, so no rollout is acted with a fresh normaliser's.
    rig.weights.publish_module(policy, version=0)
    with pytest.raises(TimeoutError, match="first publish of weights and statistics"):
        rig.collector.wait_for(lambda: rig.ring.available() > 0, timeout=0.5)
    rig.obs_stats.publish(mean, var, 100.0)
    (_, rollout), *_ = _read(rig, 1)
    expected = normalize(rollout["obs"], mean.float(), var.float(), eps, clip)[..., :ACT]
    torch.testing.assert_close(rollout["actions"], expected, rtol=0, atol=0)
    assert not torch.equal(rollout["obs"][..., :ACT], rollout["actions"])
    assert rollout["actions"].abs().max() <= clip


def test_loop_tells_the_policy_which_episodes_ended(make_rig):
    rig = make_rig(
        spec("EpisodeCountingPolicy", OBS, ACT),
        num_envs=N,
        num_steps=T,
        ring_slots=32,
        seed=SEED,
        task_args={"max_episode_steps": 3},
    )
    (_, first), (_, second) = _read(rig, 2)
    actions = torch.cat([first["actions"], second["actions"]])[..., 0]  # [2T, N]
    done = torch.cat([first["done"], second["done"]]).bool()
    # The action at step t+1 counts the episodes that ended up to step t, env by env.
    expected = torch.cumsum(done.float(), dim=0)[:-1]
    assert torch.equal(actions[1:], expected)
    assert expected[-1].min() >= 1  # every env finished at least one 3-step episode
    rig.release()
