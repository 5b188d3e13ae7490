"""Spawn-child entry points for the ipc tests (a module of its own so children import it cheaply)."""

from __future__ import annotations

import os
import time

import torch

from unilab_lit.ipc import NOT_PUBLISHED, RolloutRing, SharedObsStats, SharedWeights

# A reader that sees no new version for this long assumes the writer died.
_READER_PATIENCE_S = 60.0


def publish_weights(weights: SharedWeights, count: int, reader_ready) -> None:
    """Publish versions 1..count, each a block filled with its version number."""
    torch.set_num_threads(1)
    src = torch.empty(weights.num_floats)
    reader_ready.wait()
    for version in range(1, count + 1):
        src.fill_(float(version))
        weights.publish(src, version=version)


def read_weights(weights: SharedWeights, final_version: int, reader_ready, results) -> None:
    """Read until ``final_version``; report reads, mixed reads and non-monotone versions."""
    torch.set_num_threads(1)
    out = torch.empty(weights.num_floats)
    last, reads, mixed, backwards = NOT_PUBLISHED, 0, 0, 0
    reader_ready.set()
    deadline = time.monotonic() + _READER_PATIENCE_S
    while last < final_version and time.monotonic() < deadline:
        version = weights.read_if_newer(last, out)
        if version is None:
            os.sched_yield()  # leave the core to the writer on a busy machine
            continue
        reads += 1
        mixed += int(out.min() != version or out.max() != version)
        backwards += int(version <= last)
        last = version
        deadline = time.monotonic() + _READER_PATIENCE_S
    results.put(
        {
            "reads": reads,
            "mixed": mixed,
            "backwards": backwards,
            "last": last,
            "retries": weights.retries,
        }
    )


def publish_obs_stats(stats: SharedObsStats, count: int, reader_ready) -> None:
    """Publish versions 1..count with mean, var and count all equal to the version number."""
    torch.set_num_threads(1)
    src = torch.empty(stats.size)
    reader_ready.wait()
    for version in range(1, count + 1):
        src.fill_(float(version))
        stats.publish(src, src, float(version), version=version)


def read_obs_stats(stats: SharedObsStats, final_version: int, reader_ready, results) -> None:
    """Read until ``final_version``; report reads, mixed reads and non-monotone versions."""
    torch.set_num_threads(1)
    last, reads, mixed, backwards = NOT_PUBLISHED, 0, 0, 0
    reader_ready.set()
    deadline = time.monotonic() + _READER_PATIENCE_S
    while last < final_version and time.monotonic() < deadline:
        snapshot = stats.read_if_newer(last)
        if snapshot is None:
            os.sched_yield()  # leave the core to the writer on a busy machine
            continue
        v = snapshot.version
        reads += 1
        consistent = (
            snapshot.count == v
            and bool((snapshot.mean == v).all())
            and bool((snapshot.var == v).all())
        )
        mixed += int(not consistent)
        backwards += int(v <= last)
        last = v
        deadline = time.monotonic() + _READER_PATIENCE_S
    results.put(
        {
            "reads": reads,
            "mixed": mixed,
            "backwards": backwards,
            "last": last,
            "retries": stats.retries,
        }
    )


def write_rollouts(ring: RolloutRing, count: int, reader_ready) -> None:
    """Commit ``count`` rollouts whose every element equals the rollout's sequence number.

    Fills step by step, as the collector does, so a reader copying a slot being rewritten
    would see a mixture.
    """
    torch.set_num_threads(1)
    reader_ready.wait()
    for _ in range(count):
        sequence = ring.write_count
        views = ring.begin_write()
        for view in views.values():
            if view.dim() >= 1:
                for t in range(view.shape[0]):
                    view[t].fill_(sequence)
            else:
                view.fill_(sequence)
        ring.commit_write()


def wait_for_first_weights(weights: SharedWeights) -> None:
    """Block (no timeout that could end the wait by itself) until weights are published."""
    while weights.version == NOT_PUBLISHED:
        weights.wait_newer(NOT_PUBLISHED, 3600.0)
