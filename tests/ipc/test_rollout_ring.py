"""RolloutRing: ordered reads, lapping and drop counting, and no torn rollouts under a real writer."""

from __future__ import annotations

import logging
import os
import pickle

import pytest
import torch
from ipc_workers import write_rollouts

from unilab_lit.ipc import RingRead, RolloutRing, rollout_fields

log = logging.getLogger(__name__)

FIELDS = {
    "obs": ((4, 3, 2), torch.float32),
    "reward": ((4, 3), torch.float32),
    "last_obs": ((3, 2), torch.float32),
    "policy_version": ((), torch.int64),
}


def _commit(ring: RolloutRing, value: float) -> int:
    views = ring.begin_write()
    for view in views.values():
        view.fill_(value)
    return ring.commit_write()


def _dest(ring: RolloutRing) -> dict[str, torch.Tensor]:
    return {name: torch.empty(shape, dtype=dtype) for name, (shape, dtype) in ring.fields.items()}


def test_committed_rollouts_are_read_oldest_first_with_their_data() -> None:
    ring = RolloutRing(3, FIELDS)
    assert ring.pop_into(_dest(ring)) is None
    assert [_commit(ring, v) for v in (10.0, 20.0)] == [0, 1]
    items = ring.read_available()
    assert [read for read, _ in items] == [RingRead(0, 0), RingRead(1, 0)]
    assert torch.all(items[0][1]["obs"] == 10.0) and int(items[1][1]["policy_version"]) == 20
    assert ring.read_available() == []
    assert (ring.write_count, ring.read_count, ring.dropped) == (2, 2, 0)


def test_writer_lapping_the_reader_drops_the_oldest_and_counts_them() -> None:
    ring = RolloutRing(3, FIELDS)
    for v in range(5):
        _commit(ring, float(v))
    assert ring.available() == 3
    items = ring.read_available()
    assert [read.sequence for read, _ in items] == [2, 3, 4]
    assert items[0][0].dropped == 2
    assert [float(d["reward"][0, 0]) for _, d in items] == [2.0, 3.0, 4.0]
    assert (ring.write_count, ring.read_count, ring.dropped) == (5, 5, 2)


def test_slot_being_rewritten_is_skipped_and_counted_as_dropped() -> None:
    ring = RolloutRing(3, FIELDS)
    for v in range(3):
        _commit(ring, float(v))
    views = ring.begin_write()  # claims the slot of rollout 0 while it is still unread
    views["obs"].fill_(99.0)
    read = ring.pop_into(dest := _dest(ring))
    assert read == RingRead(1, 1)
    assert torch.all(dest["obs"] == 1.0)
    assert ring.commit_write() == 3
    assert [r.sequence for r, _ in ring.read_available()] == [2, 3]
    assert ring.dropped == 1


def test_pop_into_validates_destination_fields_and_shapes() -> None:
    ring = RolloutRing(2, FIELDS)
    dest = _dest(ring)
    del dest["reward"]
    with pytest.raises(KeyError, match=r"missing \['reward'\].*ring fields"):
        ring.pop_into(dest)
    dest = _dest(ring)
    dest["obs"] = torch.empty(4, 3, 5)
    with pytest.raises(ValueError, match=r"dest\['obs'\] has shape \(4, 3, 5\).*\(4, 3, 2\)"):
        ring.pop_into(dest)


def test_pop_into_writes_into_strided_destination_views() -> None:
    ring = RolloutRing(2, FIELDS)
    _commit(ring, 5.0)
    staging = torch.zeros(4, 9, 2)  # e.g. a staging pool with room for three rollouts of 3 envs
    dest = _dest(ring)
    dest["obs"] = staging[:, 3:6]
    assert ring.pop_into(dest) == RingRead(0, 0)
    assert torch.all(staging[:, 3:6] == 5.0) and torch.all(staging[:, :3] == 0.0)


def test_commit_without_begin_and_too_few_slots_are_rejected() -> None:
    with pytest.raises(ValueError, match="num_slots must be >= 2, got 1"):
        RolloutRing(1, FIELDS)
    ring = RolloutRing(2, FIELDS)
    with pytest.raises(RuntimeError, match="commit_write"):
        ring.commit_write()


def test_appo_fields_are_time_major_with_per_slot_extras() -> None:
    fields = rollout_fields(num_steps=8, num_envs=4, policy_dim=3, critic_dim=5, action_dim=2)
    assert fields["obs"][0] == (8, 4, 3) and fields["final_critic_obs"][0] == (8, 4, 5)
    assert fields["last_critic_obs"][0] == (4, 5) and fields["policy_version"] == ((), torch.int64)
    ring = RolloutRing(2, fields)
    attached = pickle.loads(pickle.dumps(ring))
    attached.begin_write()["critic_obs"].fill_(2.0)
    attached.commit_write()
    ((read, data),) = ring.read_available()
    assert read.sequence == 0 and torch.all(data["critic_obs"] == 2.0)


def test_concurrent_writer_process_never_yields_torn_rollouts(spawn, record_property) -> None:
    rollouts = 2_000
    ring = RolloutRing(3, rollout_fields(4, 16, 12, 14, 4))
    ready = spawn.Event()
    writer = spawn.Process(target=write_rollouts, args=(ring, rollouts, ready))
    writer.start()
    dest = _dest(ring)
    reads, torn = 0, 0
    ready.set()
    while writer.is_alive() or ring.available():
        read = ring.pop_into(dest)
        if read is None:
            os.sched_yield()  # leave the core to the writer on a busy machine
            continue
        reads += 1
        torn += sum(int(not torch.all(t == read.sequence)) for t in dest.values())
    writer.join(timeout=30)
    assert writer.exitcode == 0
    outcome = {"reads": reads, "dropped": ring.dropped, "torn": torn}
    record_property("ring_stress", outcome)
    log.info("RolloutRing stress: %s", outcome)
    assert torn == 0
    assert reads > 0
    assert reads + ring.dropped == ring.write_count == ring.read_count == rollouts
