"""What a data set has delivered to the learner: env steps behind its batches and its latest wait."""

from __future__ import annotations

from dataclasses import dataclass

from torch.utils.data import IterableDataset


@dataclass
class FeedStats:
    """Statistics a data set keeps about its own items; the data module reads them.

    Attributes:
        env_steps: Collector env steps behind every batch delivered so far, earlier runs of a
            resumed fit included.
        learned_env_steps: Of those, the env steps of rollouts a batch contained: APPO's staging
            pool keeps only the newest ``staging_capacity`` of the rollouts it drains at once;
            off-policy data sets count every step they deliver.
        last_wait_s: Seconds the learner waited for its latest batch (the ``wait_for_data``
            span of the trace, measured once for both).
    """

    env_steps: int = 0
    learned_env_steps: int = 0
    last_wait_s: float = 0.0


class FeedingDataset(IterableDataset):
    """A data set of whole batches that keeps :class:`FeedStats` about what it delivered."""

    stats: FeedStats
