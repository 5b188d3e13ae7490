"""The learner's share of the cores: what the collector's threads leave over."""

from __future__ import annotations

import logging
import os

import torch

from unilab_lit.collector.options import CollectorOptions

log = logging.getLogger(__name__)


def limit_learner_threads(options: CollectorOptions, ranks_on_node: int = 1) -> int:
    """Set this process's torch intra-op threads from ``options``; returns the number set.

    ``learner_torch_threads`` wins; ``None`` takes this rank's share of the cores this process
    may run on (taskset / cgroup cpusets, not the machine's) minus the collector's, at least one.

    Args:
        options: The collector's thread settings.
        ranks_on_node: DDP learner processes sharing this machine's cores, each with its own
            collector (1 without DDP).
    """
    threads = options.learner_torch_threads
    if threads is None:
        collector_cores = max(options.physics_threads, options.collector_torch_threads)
        cores = len(os.sched_getaffinity(0)) // max(1, ranks_on_node)
        threads = max(1, cores - collector_cores)
    torch.set_num_threads(threads)
    log.info("learner uses %d torch thread(s)", threads)
    return threads
