"""What callbacks may use of a running collector (``CollectorLink``) and how they reach it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from lightning.pytorch import Trainer
    from torch import nn

    from unilab_lit.envs.task_spec import TaskSpec
    from unilab_lit.ipc.replay import ReplayStorage
    from unilab_lit.nn.normalization import ObsNormalizer
    from unilab_lit.tracing import TraceBatch


class CollectorLink(Protocol):
    """The learner's side of one running collector, as callbacks see it.

    ``unilab_lit.data.session.CollectorSession`` implements it; a data module hands it out as
    its ``collector_link`` between ``setup("fit")`` and ``teardown``.
    """

    @property
    def task(self) -> TaskSpec:
        """The task the collector steps (class path and arguments)."""

    @property
    def env_steps(self) -> int:
        """Collector env steps behind every batch delivered so far (restored on resume)."""

    @property
    def learned_env_steps(self) -> int:
        """Of :attr:`env_steps`, those in the batches the learner trained on (APPO's staging
        pool keeps only the newest rollouts of those it drains at once)."""

    @property
    def last_wait_s(self) -> float:
        """Seconds the learner waited for its latest batch."""

    @property
    def ring_dropped(self) -> int:
        """Rollouts the collector overwrote before the learner read them (0 without a ring)."""

    @property
    def metrics_dropped(self) -> int:
        """Collector messages lost because the learner drained too late."""

    @property
    def replay(self) -> ReplayStorage | None:
        """The shared replay the collector writes into (``None`` for on-policy data)."""

    def publish_weights(self, policy: nn.Module, version: int) -> None:
        """Hand ``policy``'s parameters to the collector as ``version``."""

    def publish_obs_stats(self, normalizer: ObsNormalizer, version: int) -> None:
        """Hand ``normalizer``'s statistics to the collector as ``version``."""

    def drain_metrics(self) -> list[dict[str, Any]]:
        """Metrics messages (episodes, timing) the collector sent since the last call."""

    def start_trace(self) -> None:
        """Ask the collector to record trace spans and ship them."""

    def drain_trace(self) -> list[TraceBatch]:
        """Trace batches the collector sent since the last call."""

    def stop_trace(self, timeout_s: float) -> list[TraceBatch]:
        """Ask the collector to stop recording; every batch not drained yet, its last one
        included if it arrives within ``timeout_s``."""


def collector_link(trainer: Trainer) -> CollectorLink:
    """The link to the collector that ``trainer``'s data module runs.

    Raises:
        TypeError: if the trainer's data module runs no collector (it has no ``collector_link``).
        RuntimeError: if the collector is not running (before ``setup("fit")``, after ``teardown``).
    """
    datamodule = trainer.datamodule
    if not has_collector_link(trainer):
        raise TypeError(
            "this callback talks to the collector, so it needs a data module with a "
            "`collector_link` (a CollectorDataModule such as RolloutDataModule or "
            f"ReplayDataModule); the trainer's data module is {type(datamodule).__name__}"
        )
    return datamodule.collector_link


def has_collector_link(trainer: Trainer) -> bool:
    """Whether ``trainer``'s data module runs a collector (provides ``collector_link``)."""
    datamodule = trainer.datamodule
    # Looked up on the class and the instance, not by hasattr(): asking must not run the
    # property, which raises while the collector is stopped.
    return hasattr(type(datamodule), "collector_link") or "collector_link" in getattr(
        datamodule, "__dict__", {}
    )
