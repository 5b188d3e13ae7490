"""Shared-memory transport between the learner and the collector process."""

from __future__ import annotations

from unilab_lit.ipc.block import SHM_PREFIX, ShmBlock, ShmHandle, list_segments
from unilab_lit.ipc.budget import BudgetReport, MemoryBudgetError, check_allocation_budget
from unilab_lit.ipc.obs_stats import ObsStatsSnapshot, SharedObsStats, SharedObsStatsHandle
from unilab_lit.ipc.ownership import owned_names, unlink_all_owned
from unilab_lit.ipc.replay_storage import ReplayStorage, ReplayStorageHandle, replay_columns
from unilab_lit.ipc.rollout_ring import RingRead, RolloutRing, RolloutRingHandle, rollout_fields
from unilab_lit.ipc.versioned import NOT_PUBLISHED
from unilab_lit.ipc.weights import SharedWeights, SharedWeightsHandle, flat_size

__all__ = [
    "NOT_PUBLISHED",
    "SHM_PREFIX",
    "BudgetReport",
    "MemoryBudgetError",
    "ObsStatsSnapshot",
    "ReplayStorage",
    "ReplayStorageHandle",
    "RingRead",
    "RolloutRing",
    "RolloutRingHandle",
    "SharedObsStats",
    "SharedObsStatsHandle",
    "SharedWeights",
    "SharedWeightsHandle",
    "ShmBlock",
    "ShmHandle",
    "check_allocation_budget",
    "flat_size",
    "list_segments",
    "owned_names",
    "replay_columns",
    "rollout_fields",
    "unlink_all_owned",
]
