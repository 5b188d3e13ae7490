"""The start-up check that a collector's shared blocks and the learner's batch slots fit."""

from __future__ import annotations

import logging

import torch

from unilab_lit.collector.transport import Transport
from unilab_lit.ipc.budget import check_allocation_budget
from unilab_lit.ipc.obs_stats import SharedObsStats
from unilab_lit.ipc.weights import SharedWeights

log = logging.getLogger(__name__)


def check_memory_plan(
    weights_floats: int, obs_size: int, transport: Transport, device: torch.device
) -> None:
    """Refuse, naming both numbers and ``transport.shrink_keys``, a plan that will not fit.

    Args:
        weights_floats: Parameters of the collector policy (the ``SharedWeights`` block).
        obs_size: Policy observation size (the ``SharedObsStats`` block).
        transport: The data blocks and device slots the data module will allocate.
        device: The learner's device, where the device slots live.

    Raises:
        MemoryBudgetError: the plan does not fit.
    """
    blocks = {
        "weights": SharedWeights.required_bytes(weights_floats),
        "obs_stats": SharedObsStats.required_bytes(obs_size),
        **transport.host_blocks(),
    }
    report = check_allocation_budget(
        list(blocks.items()),
        transport.shrink_keys,
        device_blocks=list(transport.device_blocks().items()),
        device=device,
    )
    log.info("shared-memory plan fits: %s", report)
