"""Fixtures: real collector subprocesses on a small CartpoleSwingup."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from typing import Any

import pytest
from collector_rig import ACT, OBS, Rig

from unilab_lit.collector.options import CollectorConfig, CollectorOptions
from unilab_lit.collector.process import CollectorProcess
from unilab_lit.collector.writers import AppoWriterSpec
from unilab_lit.envs.task_spec import TaskSpec
from unilab_lit.ipc import RolloutRing, SharedObsStats, SharedWeights, list_segments, rollout_fields

_OPTION_FIELDS = {field.name for field in dataclasses.fields(CollectorOptions)}


@pytest.fixture
def segments_before() -> set[str]:
    return set(list_segments(os.getpid()))


@pytest.fixture
def make_rig() -> Iterator:
    """``make_rig(policy_spec, num_envs=, num_steps=, ring_slots=, weights_of=, obs_stats=, **config)``.

    ``weights_of`` is a module whose layout the ``SharedWeights`` gets; ``config`` goes to
    ``CollectorOptions`` (its fields) and ``CollectorConfig`` (the rest); ``start=False``
    leaves the start to the test.

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
        options = {key: config.pop(key) for key in _OPTION_FIELDS & config.keys()}
        collector = CollectorProcess(
            CollectorConfig(
                CollectorOptions(
                    TaskSpec("CartpoleSwingup", config.pop("task_args", None)), num_envs, **options
                ),
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
