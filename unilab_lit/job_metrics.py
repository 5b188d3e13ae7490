"""Episode statistics and throughput of the whole job: each rank's figures reduced on rank 0."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from unilab_lit import distributed
from unilab_lit import metrics as keys

# Figures of the job = the sum of the ranks' (each rank collects and learns its own env steps).
_SUMMED = (
    keys.ENV_STEPS,
    keys.LEARNED_ENV_STEPS,
    keys.RING_DROPPED,
    keys.METRICS_DROPPED,
    keys.NONFINITE_RESETS,
    keys.COLLECTION_FPS,
    keys.LEARN_FPS,
    keys.TOTAL_FPS,
)


def job_values(
    values: Mapping[str, float], episodes: Mapping[str, Sequence[float]]
) -> dict[str, float]:
    """The figures to log: this rank's own outside DDP, the job's on rank 0 under DDP.

    Under DDP (a collective: every rank calls it at the same iteration) rank 0 receives every
    rank's figures: counters and rates are summed, and each episode mean is taken over the
    union of the ranks' episode windows. ``Perf/total_fps_per_rank`` keeps the mean per-rank
    rate. Other ranks get their own figures back (Lightning writes only rank 0's logs).

    Args:
        values: This rank's counters and rates by metric key.
        episodes: This rank's recent per-episode values by metric key (empty series allowed).

    Returns:
        Metric key to value, episode means included.
    """
    own = {**values, **{key: float(np.mean(s)) for key, s in episodes.items() if len(s)}}
    if not distributed.is_distributed():
        return own
    sums = {key: (float(np.sum(s)), len(s)) for key, s in episodes.items() if len(s)}
    ranks = distributed.gather_to_rank_zero((dict(values), sums))
    if ranks is None:
        return own
    out: dict[str, float] = {}
    for rank_values, _ in ranks:
        for key, value in rank_values.items():
            if key in _SUMMED:
                out[key] = out.get(key, 0.0) + value
    for key, value in values.items():
        out.setdefault(key, value)
    totals: dict[str, tuple[float, int]] = {}
    for _, rank_sums in ranks:
        for key, (total, count) in rank_sums.items():
            previous = totals.get(key, (0.0, 0))
            totals[key] = (previous[0] + total, previous[1] + count)
    out.update({key: total / count for key, (total, count) in totals.items()})
    if keys.TOTAL_FPS in out:
        out[keys.TOTAL_FPS_PER_RANK] = out[keys.TOTAL_FPS] / len(ranks)
    return out
