"""One running collector and everything the learner shares with it: the ``CollectorLink``."""

from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any, TypeVar

import torch
from torch import nn

from unilab_lit import distributed, tracing
from unilab_lit.collector.config import CollectorConfig, PolicyBuilder
from unilab_lit.collector.process import CollectorProcess
from unilab_lit.data import collector_state
from unilab_lit.data.feed_stats import FeedStats
from unilab_lit.data.inbox import CollectorInbox
from unilab_lit.data.memory_plan import check_memory_plan
from unilab_lit.data.options import CollectorOptions
from unilab_lit.data.transport import Transport, unlink_blocks
from unilab_lit.ipc.obs_stats import SharedObsStats
from unilab_lit.ipc.reclaim import collector_dir_prefix
from unilab_lit.ipc.replay import ReplayStorage
from unilab_lit.ipc.versioned import NOT_PUBLISHED
from unilab_lit.ipc.weights import SharedWeights, flat_size
from unilab_lit.nn.normalization import ObsNormalizer


class CollectorSession:
    """The collector process, its shared blocks and its inbox, from start to stop.

    :meth:`start` checks the memory plan, allocates ``SharedWeights`` (sized for ``policy``),
    ``SharedObsStats``, the data module's ``transport`` and a private state directory, and
    starts the collector; :meth:`stop` stops it and unlinks every block, on every exit path.
    In between the session is the data module's :class:`~unilab_lit.data.link.CollectorLink`:
    callbacks publish weights and statistics through it, drain its metrics and trace
    batches, and read the counters of the data set attached with :meth:`attach_feed`.

    Args:
        options: The collector's task, env batch, threads and timeouts.
        obs_size: Size of the policy observation (the statistics block).
        transport: The data blocks the collector writes into; released by :meth:`stop`.
        feed: Counters until a data set is attached (the restored env-step count).
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
        self._inbox = CollectorInbox(self._receive)

    # ------------------------------------------------------------------------- lifecycle
    def start(
        self,
        policy: nn.Module,
        policy_spec: PolicyBuilder,
        normalizer: ObsNormalizer,
        device: torch.device,
        restore: dict[str, Any] | None = None,
    ) -> None:
        """Allocate the blocks and start the collector; stops everything again if that fails.

        Args:
            policy: The learner's collector policy (sizes the weights block).
            policy_spec: Recipe of the collector's CPU copy of ``policy``.
            normalizer: The learner's observation normaliser (its ``eps`` and ``clip``).
            device: The learner's device (memory plan of the device slots).
            restore: Collector state of a checkpoint to continue from instead of a reset.

        Raises:
            MemoryBudgetError: the blocks do not fit.
            CollectorError: the collector failed or was not ready within ``startup_timeout_s``.
        """
        options = self.options
        num_floats = flat_size(policy)
        # The data module's prepare_data reported this plan already; this re-check, right before
        # allocating, guards against memory taken since.
        check_memory_plan(num_floats, self.obs_size, self.transport, device, logging.DEBUG)
        try:
            self._state_dir = Path(tempfile.mkdtemp(prefix=collector_dir_prefix()))
            self._weights = SharedWeights(num_floats)
            self._obs_stats = SharedObsStats(self.obs_size)
            writer = self.transport.create()
            self._process = CollectorProcess(
                CollectorConfig(
                    task=options.task,
                    num_envs=options.num_envs,
                    policy=policy_spec,
                    writer=writer,
                    # Each DDP rank's collector steps its own envs with its own noise.
                    seed=distributed.rank_seed(options.seed, distributed.global_rank()),
                    env_kwargs=options.task_kwargs,
                    physics_threads=options.physics_threads,
                    torch_threads=options.collector_torch_threads,
                    weights=self._weights.handle(),
                    obs_stats=self._obs_stats.handle(),
                    obs_norm_eps=normalizer.eps,
                    obs_norm_clip=normalizer.clip,
                    stall_timeout_s=options.stall_timeout_s,
                    state_dir=str(self._state_dir),
                )
            )
            if restore is not None:
                self.restore(restore)
            # Spawned, not awaited: the child imports while the trainer builds; the data loaders
            # wait for it (wait_ready) before their first item.
            self._process.spawn(timeout=options.startup_timeout_s)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop the collector, unlink every block, remove the state directory. Idempotent."""
        if self._process is not None:
            self._process.stop()
            self._process = None
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
        if self._process is None:
            raise RuntimeError("the collector session is not running (start() it first)")
        return self._process

    @property
    def shared_weights(self) -> SharedWeights | None:
        """The weights block the collector reads (``None`` while stopped)."""
        return self._weights

    @property
    def shared_obs_stats(self) -> SharedObsStats | None:
        """The statistics block the collector reads (``None`` while stopped)."""
        return self._obs_stats

    def attach_feed(self, feed: FeedStats) -> None:
        """Report the counters of ``feed`` (the data set that now delivers the batches)."""
        self._feed = feed

    # ------------------------------------------------------------------ snapshot / restore
    def snapshot(self) -> dict[str, Any] | None:
        """The collector's state at its next step boundary (``None`` if it is not running)."""
        if self._process is None or self._state_dir is None:
            return None
        return collector_state.take_snapshot(
            self._process, self._state_dir, self.transport, self.options.stall_timeout_s
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

    # ------------------------------------------------------------------- CollectorLink
    @property
    def task(self) -> str:
        """The registered task the collector steps."""
        return self.options.task

    @property
    def task_kwargs(self) -> dict[str, Any]:
        """The keyword arguments the collector's task was built with."""
        return dict(self.options.task_kwargs)

    @property
    def env_steps(self) -> int:
        """Collector env steps behind every batch delivered so far (restored on resume)."""
        return self._feed.env_steps

    @property
    def learned_env_steps(self) -> int:
        """Of :attr:`env_steps`, those in the batches the learner trained on."""
        return self._feed.learned_env_steps

    @property
    def last_wait_s(self) -> float:
        """Seconds the learner waited for its latest batch."""
        return self._feed.last_wait_s

    @property
    def ring_dropped(self) -> int:
        """Rollouts the collector overwrote before the learner read them."""
        return self.transport.dropped

    @property
    def metrics_dropped(self) -> int:
        """Messages lost in the channel or the inbox because the learner drained too late."""
        channel = 0 if self._process is None else self._process.metrics.dropped
        return channel + self._inbox.dropped

    @property
    def replay(self) -> ReplayStorage | None:
        """The shared replay, for data modules that have one."""
        return self.transport.replay

    def publish_weights(self, policy: nn.Module, version: int) -> None:
        """Hand ``policy``'s parameters to the collector as ``version``."""
        _running(self._weights).publish_module(policy, version=version)

    def publish_obs_stats(self, normalizer: ObsNormalizer, version: int) -> None:
        """Hand ``normalizer``'s statistics to the collector as ``version``."""
        _running(self._obs_stats).publish_normalizer(normalizer, version=version)

    def drain_metrics(self) -> list[dict[str, Any]]:
        """Messages the collector sent since the last call, trace batches excepted."""
        return self._inbox.drain_metrics()

    def start_trace(self) -> None:
        """Ask the collector to record trace spans; :meth:`drain_trace` collects them."""
        if self._process is not None:
            self._process.control.request_trace(True)

    def drain_trace(self) -> list[tracing.TraceBatch]:
        """Trace batches the collector sent since the last call."""
        return self._inbox.drain_trace()[0]

    def stop_trace(self, timeout_s: float) -> list[tracing.TraceBatch]:
        """Ask the collector to stop recording and wait up to ``timeout_s`` for its last batch
        (less if it is gone); returns every batch not drained before."""
        process = self._process
        if process is None:
            return self.drain_trace()
        process.control.request_trace(False)
        return self._inbox.drain_trace_until_final(timeout_s, alive=lambda: process.running)

    def _receive(self) -> list[dict[str, Any]]:
        return [] if self._process is None else self._process.drain_metrics()


_Block = TypeVar("_Block", SharedWeights, SharedObsStats)


def _running(block: _Block | None) -> _Block:
    if block is None:
        raise RuntimeError("publish to a collector session that is not running")
    return block
