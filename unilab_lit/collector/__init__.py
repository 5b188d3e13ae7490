"""The collector subprocess: steps the batched env with a CPU actor and writes into shared memory.

Only light modules are imported here; a spawn child imports this package before its first line.
"""

from __future__ import annotations

from unilab_lit.collector.options import CollectorConfig
from unilab_lit.collector.process import CollectorError, CollectorProcess
from unilab_lit.ipc.channel import EPISODES, TIMING, MetricsChannel

__all__ = [
    "EPISODES",
    "TIMING",
    "CollectorConfig",
    "CollectorError",
    "CollectorProcess",
    "MetricsChannel",
]
