"""Picklable description of everything the collector subprocess builds."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from unilab_lit.validation import check_arg

if TYPE_CHECKING:
    from torch import nn

    from unilab_lit.collector.options import CollectorOptions
    from unilab_lit.collector.writer import Writer
    from unilab_lit.envs.spec import EnvSpec
    from unilab_lit.ipc.obs_stats import SharedObsStatsHandle
    from unilab_lit.ipc.weights import SharedWeightsHandle


class PolicyBuilder(Protocol):
    """What the collector needs of a policy spec (``unilab_lit.nn.policies.PolicySpec`` fits)."""

    def build(self) -> nn.Module: ...


class WriterSpec(Protocol):
    """A picklable recipe for the writer that puts collected steps into shared memory."""

    def build(self, env_spec: EnvSpec) -> Writer: ...


@dataclass(frozen=True)
class CollectorConfig:
    """Everything the collector child needs; it is pickled into the child at spawn time.

    The user's :class:`~unilab_lit.collector.options.CollectorOptions` travel inside it
    unchanged (validated once, where they were built); the rest are the run-time handles and
    the learner's normaliser settings.

    Args:
        options: The user's collector options: task, ``num_envs``, seed, threads, timeouts.
        policy: Recipe for the CPU actor; its ``act(obs)`` gets the normalised policy observation.
        writer: Recipe for the writer (``AppoWriterSpec`` or ``OffPolicyWriterSpec``).
        rank: Global rank of the learner that owns the collector; each rank's collector steps
            its own envs with its own noise (:attr:`seed`).
        weights: Handle of the learner's ``SharedWeights``; ``None`` keeps the policy's own
            initial weights (tests, scripted policies).
        obs_stats: Handle of the learner's ``SharedObsStats``; ``None`` disables normalisation.
        obs_norm_eps: ``eps`` of the learner's normaliser (the collector must use the same one).
        obs_norm_clip: ``clip`` of the learner's normaliser (``None``: unclipped).
        report_interval_s: Seconds between metrics messages (> 0).
        max_episodes_per_report: Most recent finished episodes whose per-episode values one
            metrics message carries (>= 1); counts always cover every episode.
        state_dir: Private directory where the collector writes its state on request and reads
            the state to continue from (``unilab_lit.collector.snapshot``); ``None`` disables both.

    Raises:
        ValueError: if a numeric argument is out of range.
    """

    options: CollectorOptions
    policy: PolicyBuilder
    writer: WriterSpec
    rank: int = 0
    weights: SharedWeightsHandle | None = None
    obs_stats: SharedObsStatsHandle | None = None
    obs_norm_eps: float = 1e-8
    obs_norm_clip: float | None = 10.0
    report_interval_s: float = 1.0
    max_episodes_per_report: int = 256
    state_dir: str | None = None

    def __post_init__(self) -> None:
        check_arg(self.rank >= 0, "rank", self.rank, ">= 0")
        episodes = self.max_episodes_per_report
        check_arg(episodes >= 1, "max_episodes_per_report", episodes, ">= 1")
        interval = self.report_interval_s
        check_arg(
            interval > 0 and math.isfinite(interval),
            "report_interval_s",
            interval,
            "a finite number > 0",
        )
        check_arg(self.obs_norm_eps > 0, "obs_norm_eps", self.obs_norm_eps, "> 0")
        # None leaves the normalised observation unbounded.
        clip = self.obs_norm_clip
        check_arg(clip is None or clip > 0, "obs_norm_clip", clip, "> 0 or None")

    @property
    def seed(self) -> int:
        """This rank's seed: ``options.seed`` itself on rank 0 (see ``distributed.rank_seed``)."""
        # Imported here: a spawn child imports this module before its first line, so it stays light.
        from unilab_lit.distributed import rank_seed

        return rank_seed(self.options.base_seed, self.rank)
