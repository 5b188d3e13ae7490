from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from unilab_lit.data.staging import VERSION_FIELD, StagingPool
from unilab_lit.ipc.rollout_ring import RolloutRing

T, N = 3, 2
FIELDS = {
    "reward": ((T, N), torch.float32),
    "obs": ((T, N, 4), torch.float32),
    "last_critic_obs": ((N, 5), torch.float32),
    VERSION_FIELD: ((), torch.int64),
}


@pytest.fixture
def ring():
    ring = RolloutRing(4, FIELDS)
    yield ring
    ring.unlink()


def _pool(capacity: int) -> StagingPool:
    return StagingPool(
        capacity,
        T,
        N,
        step_fields={"reward": ((), torch.float32), "obs": ((4,), torch.float32)},
        env_fields={"last_critic_obs": ((5,), torch.float32)},
    )


def _write(ring: RolloutRing, value: float, version: int) -> None:
    slot = ring.begin_write()
    for name, view in slot.items():
        view.fill_(version if name == VERSION_FIELD else value)
    ring.commit_write()


def _stage_all(pool: StagingPool, ring: RolloutRing) -> int:
    staged = 0
    while pool.stage_from(ring):
        staged += 1
    return staged


def test_batch_is_a_time_major_tensordict_of_the_staged_rollouts(ring):
    pool = _pool(3)
    _write(ring, 1.0, 10)
    _write(ring, 2.0, 11)
    assert _stage_all(pool, ring) == 2
    batch = pool.batch()
    assert isinstance(batch, TensorDict) and batch.batch_size == (T, 2 * N)
    assert set(batch.keys()) == {"reward", "obs", "last_critic_obs", VERSION_FIELD, "fresh"}
    assert batch["obs"].shape == (T, 2 * N, 4)
    assert batch["reward"][:, :N].eq(1.0).all() and batch["reward"][:, N:].eq(2.0).all()
    assert batch[VERSION_FIELD][0].tolist() == [10, 10, 11, 11]


def test_per_column_entries_are_the_same_at_every_step_without_a_copy(ring):
    pool = _pool(2)
    _write(ring, 1.0, 10)
    _stage_all(pool, ring)
    batch = pool.batch()
    for key, trailing in (("last_critic_obs", (5,)), (VERSION_FIELD, ()), ("fresh", ())):
        entry = batch[key]
        assert entry.shape == (T, N, *trailing), key
        assert entry.stride(0) == 0, key  # a broadcast view over time
        assert bool((entry == entry[:1]).all()), key
    # Indexing the batch keeps each column's entries with its steps.
    column = batch[:, 1]
    assert column["last_critic_obs"].shape == (T, 5) and column[VERSION_FIELD].tolist() == [10] * T


def test_full_pool_evicts_oldest_rollout(ring):
    pool = _pool(2)
    for i in range(3):
        _write(ring, float(i), i)
    _stage_all(pool, ring)
    batch = pool.batch()
    assert sorted(set(batch[VERSION_FIELD][0].tolist())) == [1, 2]
    assert pool.active == 2 and pool.staged_total == 3


def test_fresh_marks_only_rollouts_staged_since_last_batch(ring):
    pool = _pool(3)
    _write(ring, 1.0, 0)
    _stage_all(pool, ring)
    assert pool.batch()["fresh"].all()
    _write(ring, 2.0, 1)
    _stage_all(pool, ring)
    assert pool.batch()["fresh"][0].tolist() == [False, False, True, True]


def test_stage_from_empty_ring_leaves_pool_unchanged(ring):
    pool = _pool(2)
    assert not pool.stage_from(ring)
    assert pool.active == 0


def test_batch_before_any_rollout_raises():
    with pytest.raises(RuntimeError, match="before any rollout"):
        _pool(1).batch()


def test_capacity_below_one_is_rejected():
    with pytest.raises(ValueError, match="staging_capacity"):
        _pool(0)


def test_restored_pool_continues_with_the_same_rollouts_and_eviction_order(ring):
    pool = _pool(2)
    for i in range(3):
        _write(ring, float(i), i)
    _stage_all(pool, ring)
    pool.batch()
    restored = _pool(2)
    restored.load_state_dict(pool.state_dict())
    _write(ring, 3.0, 3)
    _stage_all(pool, ring)
    _write(ring, 3.0, 3)
    _stage_all(restored, ring)
    expected, actual = pool.batch(), restored.batch()
    assert actual[VERSION_FIELD][0].tolist() == expected[VERSION_FIELD][0].tolist() == [2, 2, 3, 3]
    for key in ("obs", "reward", "last_critic_obs", "fresh"):
        assert torch.equal(actual[key], expected[key]), key
    assert restored.staged_total == pool.staged_total == 4


def test_load_state_dict_rejects_a_pool_of_another_capacity():
    with pytest.raises(ValueError, match="staging_capacity, num_steps, num_envs"):
        _pool(3).load_state_dict(_pool(2).state_dict())
