"""Shared pieces of the collector tests: the rig a test drives, and leak checks."""

from __future__ import annotations

import multiprocessing
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from unilab_lit.collector.process import CollectorProcess
from unilab_lit.envs.cartpole import CartpoleSwingup
from unilab_lit.ipc import RolloutRing, SharedObsStats, SharedWeights, list_segments

OBS = CartpoleSwingup.OBS_SIZE
ACT = 1


@dataclass
class Rig:
    """One collector with the shared blocks a test reads and publishes through."""

    collector: CollectorProcess | None
    ring: RolloutRing
    weights: SharedWeights | None = None
    obs_stats: SharedObsStats | None = None
    blocks: list[Any] = field(default_factory=list)

    def release(self) -> None:
        """What a data module does on every exit path: stop the collector, unlink the blocks."""
        if self.collector is not None:
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
