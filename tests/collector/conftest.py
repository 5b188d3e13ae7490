"""A factory for real collector subprocesses on a small CartpoleSwingup, and leak checks."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from unilab_lit.collector.appo_writer import AppoWriterSpec
from unilab_lit.collector.config import CollectorConfig
from unilab_lit.collector.process import CollectorProcess
from unilab_lit.envs.cartpole import CartpoleSwingup
from unilab_lit.ipc import RolloutRing, SharedObsStats, SharedWeights, list_segments, rollout_fields

OBS = CartpoleSwingup.OBS_SIZE
ACT = 1


@dataclass
class Rig:
    """One collector with the shared blocks a test reads and publishes through."""

    collector: CollectorProcess
    ring: RolloutRing
    weights: SharedWeights | None = None
    obs_stats: SharedObsStats | None = None
    blocks: list[Any] = field(default_factory=list)

    def release(self) -> None:
        """What a data module does on every exit path: stop the collector, unlink the blocks."""
        self.collector.stop()
        for block in self.blocks:
            block.unlink()


def process_exists(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie awaiting its reaper does not count)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def assert_no_leftovers(rig: Rig, segments_before: set[str]) -> None:
    """After ``rig.release()``: the child is gone and nothing of ours is left in /dev/shm."""
    pid = rig.collector.pid
    assert pid is not None
    assert all(child.pid != pid for child in multiprocessing.active_children())
    assert not process_exists(pid), f"collector pid {pid} still exists"
    assert set(list_segments(os.getpid())) == segments_before
    assert list_segments(pid) == []


@pytest.fixture
def segments_before() -> set[str]:
    return set(list_segments(os.getpid()))


@pytest.fixture
def make_rig() -> Iterator:
    """``make_rig(policy_spec, num_envs=, num_steps=, ring_slots=, weights_of=, obs_stats=, **config)``.

    ``weights_of`` is a module whose layout the ``SharedWeights`` gets; ``config`` goes to
    ``CollectorConfig``; ``start=False`` leaves the start to the test.

    Starts the collector; every rig is released at teardown even if the test failed.
    """
    rigs: list[Rig] = []

    def make(
        policy,
        *,
        num_envs: int = 4,
        num_steps: int = 8,
        ring_slots: int = 4,
        weights_of=None,
        obs_stats: bool = False,
        join_timeout_s: float = 5.0,
        start: bool = True,
        **config: Any,
    ) -> Rig:
        ring = RolloutRing(ring_slots, rollout_fields(num_steps, num_envs, OBS, OBS, ACT))
        blocks: list[Any] = [ring]
        weights = stats = None
        if weights_of is not None:
            from unilab_lit.ipc import flat_size

            weights = SharedWeights(flat_size(weights_of))
            blocks.append(weights)
        if obs_stats:
            stats = SharedObsStats(OBS)
            blocks.append(stats)
        collector = CollectorProcess(
            CollectorConfig(
                task="CartpoleSwingup",
                num_envs=num_envs,
                policy=policy,
                writer=AppoWriterSpec(ring.handle(), num_steps),
                weights=None if weights is None else weights.handle(),
                obs_stats=None if stats is None else stats.handle(),
                **config,
            ),
            join_timeout_s=join_timeout_s,
        )
        rig = Rig(collector, ring, weights, stats, blocks)
        rigs.append(rig)
        if start:
            collector.start(timeout=120)
        return rig

    yield make
    for rig in rigs:
        rig.release()
