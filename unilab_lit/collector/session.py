"""One running collector and everything the learner shares with it, from start to stop."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any, TypeVar

from torch import nn

from unilab_lit import distributed
from unilab_lit.collector import state as collector_state
from unilab_lit.collector.config import CollectorConfig, PolicyBuilder
from unilab_lit.collector.link import CollectorInbox, CollectorLink, FeedStats
from unilab_lit.collector.options import CollectorOptions
from unilab_lit.collector.process import CollectorProcess
from unilab_lit.collector.transport import Transport, unlink_blocks
from unilab_lit.ipc.obs_stats import SharedObsStats
from unilab_lit.ipc.reclaim import collector_dir_prefix
from unilab_lit.ipc.versioned import NOT_PUBLISHED
from unilab_lit.ipc.weights import SharedWeights, flat_size
from unilab_lit.nn.normalization import ObsNormalizer


class CollectorSession:
    """The collector process, its shared blocks and its link to the callbacks, from start to stop.

    :meth:`start` allocates ``SharedWeights`` (sized for ``policy``), ``SharedObsStats``, the
    data module's ``transport`` (its memory plan checked by the data module) and a private
    state directory, starts the collector with ``options`` as they are, and builds the
    :class:`~unilab_lit.collector.link.CollectorLink` that callbacks use; :meth:`stop` stops
    the collector and unlinks every block, on every exit path.

    Args:
        options: The collector's task, env batch, threads and timeouts.
        obs_size: Size of the policy observation (the statistics block).
        transport: The data blocks the collector writes into; released by :meth:`stop`.
        feed: Counters of the data set that delivers the batches (the restored env-step count
            until one attaches).
    """

    def __init__(
        self,
        options: CollectorOptions,
        obs_size: int,
        transport: Transport,
        feed: FeedStats,
    ) -> None:
        self.options = options
        self.obs_size = obs_size
        self.transport = transport
        self._feed = feed
        self._process: CollectorProcess | None = None
        self._weights: SharedWeights | None = None
        self._obs_stats: SharedObsStats | None = None
        self._state_dir: Path | None = None
        self._link: CollectorLink | None = None

    # ------------------------------------------------------------------------- lifecycle
    def start(
        self,
        policy: nn.Module,
        policy_spec: PolicyBuilder,
        normalizer: ObsNormalizer,
        restore: dict[str, Any] | None = None,
    ) -> None:
        """Allocate the blocks and start the collector; stops everything again if that fails.

        Args:
            policy: The learner's collector policy (sizes the weights block).
            policy_spec: Recipe of the collector's CPU copy of ``policy``.
            normalizer: The learner's observation normaliser (its ``eps`` and ``clip``).
            restore: Collector state of a checkpoint to continue from instead of a reset.

        Raises:
            CollectorError: the collector failed or was not ready within ``startup_timeout_s``.
        """
        num_floats = flat_size(policy)
        try:
            self._state_dir = Path(tempfile.mkdtemp(prefix=collector_dir_prefix()))
            self._weights = SharedWeights(num_floats)
            self._obs_stats = SharedObsStats(self.obs_size)
            writer = self.transport.create()
            self._process = CollectorProcess(
                CollectorConfig(
                    self.options,
                    policy=policy_spec,
                    writer=writer,
                    rank=distributed.global_rank(),
                    weights=self._weights.handle(),
                    obs_stats=self._obs_stats.handle(),
                    obs_norm_eps=normalizer.eps,
                    obs_norm_clip=normalizer.clip,
                    state_dir=str(self._state_dir),
                )
            )
            process = self._process
            self._link = CollectorLink(
                self.options,
                self._weights,
                self._obs_stats,
                CollectorInbox(process.metrics, process.control, alive=lambda: process.running),
                self.transport,
                self._feed,
            )
            if restore is not None:
                self.restore(restore)
            # Spawned, not awaited: the child imports while the trainer builds; the data loaders
            # wait for it (wait_ready) before their first item.
            self._process.spawn(timeout=self.options.startup_timeout_s)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop the collector, unlink every block, remove the state directory. Idempotent."""
        if self._process is not None:
            self._process.stop()
            self._process = None
        self._link = None
        self.transport.release()
        unlink_blocks(self._weights, self._obs_stats)
        self._weights = None
        self._obs_stats = None
        if self._state_dir is not None:
            shutil.rmtree(self._state_dir, ignore_errors=True)
            self._state_dir = None

    @property
    def process(self) -> CollectorProcess:
        """The started collector (its liveness checks guard every wait for data).

        Raises:
            RuntimeError: before :meth:`start` or after :meth:`stop`.
        """
        return _running(self._process)

    @property
    def link(self) -> CollectorLink:
        """What callbacks may use of the running collector.

        Raises:
            RuntimeError: before :meth:`start` or after :meth:`stop`.
        """
        return _running(self._link)

    # ------------------------------------------------------------------ snapshot / restore
    def snapshot(self) -> dict[str, Any] | None:
        """The collector's state at its next step boundary (``None`` if it is not running)."""
        if self._process is None or self._state_dir is None:
            return None
        return collector_state.take_snapshot(
            self._process,
            self._state_dir,
            self.transport,
            self.options.stall_timeout_s,
            stopping=lambda: self._link is not None and self._link.stop_requested,
        )

    def restore(self, state: dict[str, Any]) -> None:
        """Have the collector continue from ``state`` instead of resetting its envs.

        Raises:
            RuntimeError: after the first weights publish (the collector has reset already).
        """
        if self._process is None or self._state_dir is None:
            raise RuntimeError("restore into a collector session that is not running")
        collector_state.hand_over(
            self._process,
            self._state_dir,
            state,
            weights_published=self._weights is not None and self._weights.version != NOT_PUBLISHED,
        )


_Part = TypeVar("_Part")


def _running(part: _Part | None) -> _Part:
    if part is None:
        raise RuntimeError("the collector session is not running (start() it first)")
    return part
