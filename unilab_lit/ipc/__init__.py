"""Shared-memory transport between the learner and the collector process.

The names below load their module on first use (PEP 562), so that importing one light module of
this package (``control``, ``channel``, ``futex``: what a collector child unpickles before its
first line) does not import torch through ``block``.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    "BudgetReport": "unilab_lit.ipc.budget",
    "check_allocation_budget": "unilab_lit.ipc.budget",
    "flat_size": "unilab_lit.ipc.weights",
    "list_segments": "unilab_lit.ipc.block",
    "MemoryBudgetError": "unilab_lit.ipc.budget",
    "NOT_PUBLISHED": "unilab_lit.ipc.versioned",
    "ObsStatsSnapshot": "unilab_lit.ipc.obs_stats",
    "owned_names": "unilab_lit.ipc.ownership",
    "replay_columns": "unilab_lit.ipc.replay_storage",
    "ReplayStorage": "unilab_lit.ipc.replay_storage",
    "ReplayStorageHandle": "unilab_lit.ipc.replay_storage",
    "RingRead": "unilab_lit.ipc.rollout_ring",
    "rollout_fields": "unilab_lit.ipc.rollout_ring",
    "RolloutRing": "unilab_lit.ipc.rollout_ring",
    "RolloutRingHandle": "unilab_lit.ipc.rollout_ring",
    "SharedObsStats": "unilab_lit.ipc.obs_stats",
    "SharedObsStatsHandle": "unilab_lit.ipc.obs_stats",
    "SharedWeights": "unilab_lit.ipc.weights",
    "SharedWeightsHandle": "unilab_lit.ipc.weights",
    "SHM_PREFIX": "unilab_lit.ipc.block",
    "ShmBlock": "unilab_lit.ipc.block",
    "ShmHandle": "unilab_lit.ipc.block",
    "unlink_all_owned": "unilab_lit.ipc.ownership",
}
__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value
    return value
