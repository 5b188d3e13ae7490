"""Off-policy writer end to end: lock-step ticks, replay transitions, pack requests in a real collector."""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import pytest
import torch
from collector_rig import ACT, OBS
from collector_workers import ConstantGaussian, spec

from unilab_lit.collector.options import CollectorConfig, CollectorOptions
from unilab_lit.collector.process import CollectorError, CollectorProcess
from unilab_lit.collector.writers import OffPolicyWriterSpec
from unilab_lit.envs.cartpole import CartpoleSwingup
from unilab_lit.envs.spec import CRITIC, POLICY
from unilab_lit.envs.task_spec import TaskSpec
from unilab_lit.ipc import ReplayStorage, SharedWeights, flat_size, replay_columns
from unilab_lit.ipc.lockstep import LockstepLink

N = 4
STEPS_PER_SYNC = 2
CAPACITY = 64
SAMPLES = 32
SEED = 5
MAX_EPISODE_STEPS = 5
# Long enough for a collector that ignored the lock-step protocol to have written something.
QUIET_S = 0.3


@pytest.fixture
def offpolicy() -> Iterator:
    """A started collector with an OffPolicyWriter; yields (collector, replay, link)."""
    policy = ConstantGaussian(OBS, ACT)
    replay = ReplayStorage(CAPACITY, replay_columns(OBS, OBS, ACT))
    link = LockstepLink(SAMPLES, replay.width)
    weights = SharedWeights(flat_size(policy))
    collector = CollectorProcess(
        CollectorConfig(
            CollectorOptions(
                TaskSpec("CartpoleSwingup", {"max_episode_steps": MAX_EPISODE_STEPS}), N, seed=SEED
            ),
            policy=spec("ConstantGaussian", OBS, ACT),
            writer=OffPolicyWriterSpec(replay.handle(), link.handle(), STEPS_PER_SYNC),
            weights=weights.handle(),
        )
    )
    try:
        collector.start(timeout=120)
        weights.publish_module(policy, version=0)
        yield collector, replay, link
    finally:
        collector.stop()
        for block in (replay, link, weights):
            block.unlink()


def _run_ticks(collector, replay, link, first: int, last: int) -> None:
    for tick in range(first, last + 1):
        link.release_steps(tick)
        collector.wait_for(lambda tick=tick: link.steps_done >= tick, timeout=60)
        assert link.steps_done == tick
        assert replay.write_ptr == tick * N * STEPS_PER_SYNC


def test_collector_steps_only_released_ticks_and_stores_true_final_obs(offpolicy):
    collector, replay, link = offpolicy
    time.sleep(QUIET_S)
    assert replay.write_ptr == 0
    _run_ticks(collector, replay, link, 1, 6)
    time.sleep(QUIET_S)
    assert replay.write_ptr == 6 * N * STEPS_PER_SYNC  # never runs ahead of the learner

    env = CartpoleSwingup(N, seed=SEED, max_episode_steps=MAX_EPISODE_STEPS)
    obs = env.reset(seed=SEED)
    patched = 0
    for step in range(6 * STEPS_PER_SYNC):
        cols = {
            k: v.numpy() for k, v in replay.split(replay.rows[step * N : (step + 1) * N]).items()
        }
        np.testing.assert_array_equal(cols["obs"], obs[POLICY])
        np.testing.assert_array_equal(cols["critic"], obs[CRITIC])
        obs, reward, terminated, truncated, info = env.step(cols["actions"])
        np.testing.assert_array_equal(cols["reward"][:, 0], reward)
        np.testing.assert_array_equal(cols["done"][:, 0], info["done"])
        np.testing.assert_array_equal(cols["truncated"][:, 0], truncated)
        np.testing.assert_array_equal(cols["next_obs"], info["final_obs"][POLICY])
        np.testing.assert_array_equal(cols["next_critic"], info["final_obs"][CRITIC])
        patched += int((cols["next_obs"] != obs[POLICY]).any(axis=1).sum())
    env.close()
    assert patched > 0  # some episodes ended, and their next_obs is the pre-reset state


def test_pack_requests_fill_slots_in_tick_order(offpolicy):
    collector, replay, link = offpolicy
    _run_ticks(collector, replay, link, 1, 3)

    link.request_pack(1, 0, seed=11)
    collector.wait_for(lambda: link.pack_done(1), timeout=60)
    indices = replay.sample_indices(SAMPLES, torch.Generator().manual_seed(11))
    torch.testing.assert_close(link.slot(0), replay.rows[indices], rtol=0, atol=0)
    with pytest.raises(RuntimeError, match="tick mismatch: waiting for tick 2, packed tick 1"):
        link.pack_done(2)

    # A pack that must include the rows of tick 4 waits until that tick is released and written.
    ptr = replay.write_ptr
    new_rows = torch.arange(ptr, ptr + N * STEPS_PER_SYNC).repeat(SAMPLES // (N * STEPS_PER_SYNC))
    link.request_pack(2, 1, indices=new_rows, min_write_ptr=ptr + N * STEPS_PER_SYNC)
    with pytest.raises(RuntimeError, match="still pending"):
        link.request_pack(3, 0, seed=1)
    time.sleep(QUIET_S)
    assert not link.pack_done(2)
    _run_ticks(collector, replay, link, 4, 4)
    collector.wait_for(lambda: link.pack_done(2), timeout=60)
    torch.testing.assert_close(link.slot(1), replay.rows[new_rows], rtol=0, atol=0)
    assert link.slot(1)[:, replay.column_slice("obs")].abs().sum() > 0

    # A bad request fails in the collector's pack thread and reaches the learner as an error.
    link.request_pack(3, 0, indices=torch.full((SAMPLES,), CAPACITY + 5))
    with pytest.raises(CollectorError, match=r"pack indices for tick 3 must lie in \[0, 32\)"):
        collector.wait_for(lambda: link.pack_done(3), timeout=5)


def test_link_rejects_out_of_order_releases_and_malformed_requests():
    link = LockstepLink(8, 3)
    try:
        with pytest.raises(ValueError, match="expected tick 1, got 2"):
            link.release_steps(2)
        link.release_steps(1)
        with pytest.raises(RuntimeError, match="before any request_pack"):
            link.pack_done(1)
        with pytest.raises(ValueError, match="slot must be 0 or 1"):
            link.request_pack(1, 2, seed=0)
        with pytest.raises(ValueError, match="exactly one of seed= and indices="):
            link.request_pack(1, 0)
        with pytest.raises(ValueError, match=r"indices must have shape \(8,\)"):
            link.request_pack(1, 0, indices=torch.zeros(4, dtype=torch.int64))
    finally:
        link.unlink()
