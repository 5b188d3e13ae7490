from __future__ import annotations

import pytest
import torch

from unilab_lit.data.staging import StagingPool

T, N = 3, 2


def _pool(capacity: int) -> StagingPool:
    return StagingPool(
        capacity,
        T,
        N,
        step_fields={"reward": ((), torch.float32), "obs": ((4,), torch.float32)},
        env_fields={"last_critic_obs": ((5,), torch.float32)},
    )


def _stage(pool: StagingPool, value: float, version: int) -> None:
    pool.stage(
        {"reward": torch.full((T, N), value), "obs": torch.full((T, N, 4), value)},
        {"last_critic_obs": torch.full((N, 5), value)},
        policy_version=version,
    )


def test_batch_is_time_major_union_of_staged_rollouts():
    pool = _pool(3)
    _stage(pool, 1.0, 10)
    _stage(pool, 2.0, 11)
    batch = pool.batch()
    assert batch["obs"].shape == (T, 2 * N, 4)
    assert batch["last_critic_obs"].shape == (2 * N, 5)
    assert batch["reward"][:, :N].eq(1.0).all() and batch["reward"][:, N:].eq(2.0).all()
    assert batch["policy_version"].tolist() == [10, 10, 11, 11]


def test_full_pool_evicts_oldest_rollout():
    pool = _pool(2)
    for i in range(3):
        _stage(pool, float(i), i)
    batch = pool.batch()
    assert sorted(set(batch["policy_version"].tolist())) == [1, 2]
    assert pool.active == 2 and pool.staged_total == 3


def test_fresh_marks_only_rollouts_staged_since_last_batch():
    pool = _pool(3)
    _stage(pool, 1.0, 0)
    assert pool.batch()["fresh"].all()
    _stage(pool, 2.0, 1)
    fresh = pool.batch()["fresh"]
    assert fresh.tolist() == [False, False, True, True]


def test_batch_before_any_rollout_raises():
    with pytest.raises(RuntimeError, match="before any rollout"):
        _pool(1).batch()


def test_capacity_below_one_is_rejected():
    with pytest.raises(ValueError, match="staging_capacity"):
        _pool(0)
