"""One running collector and everything the learner shares with it, from start to stop.

Also the start-up checks around it: the memory plan of its shared blocks and the learner's share
of the cores, and the hand-over of its state between two steps (taken for a checkpoint, given
back on resume).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import torch
from torch import nn

from unilab_lit import distributed
from unilab_lit.collector import snapshot
from unilab_lit.collector.link import CollectorInbox, CollectorLink, FeedStats
from unilab_lit.collector.options import CollectorConfig, CollectorOptions, PolicyBuilder
from unilab_lit.collector.process import CollectorError, CollectorProcess
from unilab_lit.collector.transport import Transport, unlink_blocks
from unilab_lit.ipc.budget import check_allocation_budget
from unilab_lit.ipc.obs_stats import SharedObsStats
from unilab_lit.ipc.reclaim import collector_dir_prefix
from unilab_lit.ipc.versioned import NOT_PUBLISHED
from unilab_lit.ipc.weights import SharedWeights, flat_size
from unilab_lit.nn.normalization import ObsNormalizer

log = logging.getLogger(__name__)


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
        feed: The data module's delivery counters; its data sets count into this one object, so
            the link's ``feed`` is always the current one.
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
    ) -> CollectorLink:
        """Allocate the blocks and start the collector; stops everything again if that fails.

        Returns the :class:`~unilab_lit.collector.link.CollectorLink` callbacks use until :meth:`stop`.

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
        return self._link

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
        return _take_snapshot(
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
        _hand_over(
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


def _never() -> bool:
    return False


def _take_snapshot(
    collector: CollectorProcess,
    state_dir: Path,
    transport: Transport,
    timeout_s: float,
    stopping: Callable[[], bool] = _never,
) -> dict[str, Any] | None:
    """The running collector's state at its next step boundary; ``None`` if it is not running
    or does not answer within ``timeout_s`` (logged: the checkpoint goes on without it).

    ``stopping()``: a stop request, polled while waiting, so that the checkpoint of a stop, or
    one being written when the request comes, does not wait ``timeout_s`` for a hung collector
    (``CollectorProcess.hung``): its state is left out as soon as it is hung.
    """
    if not collector.running:
        return None

    def abandon() -> bool:
        return stopping() and collector.hung

    try:
        transport.quiesce(collector, timeout_s, abandon)
        if abandon():
            raise CollectorError(f"collector (pid {collector.pid}) is hung at the stop")
        request = collector.control.request_snapshot()
        collector.wait_for(
            lambda: collector.control.snapshot_done >= request or abandon(),
            timeout=timeout_s,
            watch=collector.control.snapshot_watch(),
        )
        if collector.control.snapshot_done < request:
            raise CollectorError(f"collector (pid {collector.pid}) hung during the snapshot")
    except (CollectorError, TimeoutError) as err:
        # A checkpoint written because the collector failed must still be written.
        log.warning("checkpoint without the collector's state: %s", err)
        return None
    path = state_dir / snapshot.SNAPSHOT_FILE
    state = snapshot.read(path)
    path.unlink()
    return state


def _hand_over(
    collector: CollectorProcess, state_dir: Path, state: dict[str, Any], weights_published: bool
) -> None:
    """Give ``state`` to the collector, which reads it instead of its first reset.

    Raises:
        RuntimeError: if weights were published already: the collector has reset its envs.
    """
    if weights_published:
        raise RuntimeError(
            "the collector's state was restored after the first weights publish; the "
            "collector has reset its envs already (restore before on_train_start)"
        )
    snapshot.write(state_dir / snapshot.RESTORE_FILE, state)
    collector.control.request_restore()


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
