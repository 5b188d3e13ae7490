"""Lifecycle shared by the data modules that feed a learner from a collector subprocess."""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import tempfile
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import LightningDataModule
from lightning.pytorch.utilities.signature_utils import is_param_in_hook_signature
from typing_extensions import override

from unilab_lit import distributed, tracing
from unilab_lit.collector import snapshot
from unilab_lit.collector.config import CollectorConfig, WriterSpec
from unilab_lit.collector.process import CollectorError, CollectorProcess
from unilab_lit.envs import make_env
from unilab_lit.envs.spec import POLICY, EnvSpec
from unilab_lit.ipc.budget import check_allocation_budget
from unilab_lit.ipc.obs_stats import SharedObsStats
from unilab_lit.ipc.versioned import NOT_PUBLISHED
from unilab_lit.ipc.weights import SharedWeights, flat_size

log = logging.getLogger(__name__)

# Messages held for a reader that has not drained yet (drop-oldest beyond, like the channel).
_INBOX_MESSAGES = 1024


class CollectorDataModule(LightningDataModule, ABC):
    """Starts the collector in ``setup("fit")`` and stops it on every exit path.

    ``setup`` checks the shared-memory budget, allocates ``SharedWeights`` (the module's
    ``collector_policy()``), ``SharedObsStats`` (its ``obs_normalizer``) and the
    subclass's transport, then starts the collector. ``teardown`` and ``on_exception``
    stop the collector and unlink every block; both are idempotent.

    ``state_dict`` (Lightning stores it in every checkpoint under the class name) holds the
    env-step counter and the collector's state between two steps: env physics, episode
    counters, current observation, its RNG and exploration state. ``load_state_dict`` hands
    that state to the collector, which continues from it instead of resetting: Lightning
    restores after ``setup`` has started the collector, and the collector waits for the first
    weights publish (``on_train_start``) before its reset, so the restore always comes first.

    The model must provide ``collector_policy()``, ``collector_policy_spec()`` and
    ``obs_normalizer`` (see ``unilab_lit.nn.policies``).

    Args:
        task: Registered task name (see ``unilab_lit.envs.registered_tasks()``).
        num_envs: Environments the collector steps together (>= 1).
        seed: Seed of the collector's env and policy sampling.
        task_kwargs: Extra keyword arguments of the task's constructor.
        physics_threads: MuJoCo threads in the collector (>= 1).
        collector_torch_threads: Torch intra-op threads in the collector (>= 1).
        stall_timeout_s: A collector without progress for this long is an error (> 0).
        data_timeout_s: Longest wait for the next batch before failing (> 0).
        startup_timeout_s: Longest wait for the collector to report ready (> 0).
        learner_torch_threads: Torch intra-op threads of the learner process; ``None`` gives
            it the cores the collector does not use (at least one). Oversubscribing the
            cores makes torch's worker threads spin against the collector: on 2 cores, 2
            learner threads next to a collector made an APPO iteration ~6x slower than 1.

    Raises:
        ValueError: if an argument is out of range.
    """

    def __init__(
        self,
        task: str,
        num_envs: int,
        seed: int = 0,
        task_kwargs: dict[str, Any] | None = None,
        physics_threads: int = 1,
        collector_torch_threads: int = 1,
        stall_timeout_s: float = 30.0,
        data_timeout_s: float = 120.0,
        startup_timeout_s: float = 120.0,
        learner_torch_threads: int | None = None,
    ) -> None:
        super().__init__()
        if learner_torch_threads is not None and learner_torch_threads < 1:
            raise ValueError(
                f"learner_torch_threads must be >= 1 or null, got {learner_torch_threads}"
            )
        for name, value in (
            ("num_envs", num_envs),
            ("physics_threads", physics_threads),
            ("collector_torch_threads", collector_torch_threads),
        ):
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        for name, value in (
            ("stall_timeout_s", stall_timeout_s),
            ("data_timeout_s", data_timeout_s),
            ("startup_timeout_s", startup_timeout_s),
        ):
            if value <= 0:
                raise ValueError(f"{name} must be > 0, got {value}")
        self.task = task
        self.num_envs = num_envs
        self.seed = seed
        self.task_kwargs = dict(task_kwargs or {})
        self.physics_threads = physics_threads
        self.collector_torch_threads = collector_torch_threads
        self.stall_timeout_s = stall_timeout_s
        self.data_timeout_s = data_timeout_s
        self.startup_timeout_s = startup_timeout_s
        self.learner_torch_threads = learner_torch_threads
        self.shared_weights: SharedWeights | None = None
        self.shared_obs_stats: SharedObsStats | None = None
        self.collector: CollectorProcess | None = None
        self.env_steps = 0
        self.last_wait_s = 0.0  # seconds the learner waited for its latest batch
        self._state_dir: Path | None = None
        self._collector_state: dict[str, Any] | None = None  # what the next collector restores
        # The channel carries two streams with different readers; each drain takes only its own.
        self._metrics_inbox: deque[dict[str, Any]] = deque(maxlen=_INBOX_MESSAGES)
        self._trace_inbox: deque[dict[str, Any]] = deque(maxlen=_INBOX_MESSAGES)
        _ = self.env_spec  # an unknown task or bad task_kwargs fail here, before anything starts

    @cached_property
    def env_spec(self) -> EnvSpec:
        """The task's spec (sizes are linked into the model by the CLI)."""
        env = make_env(self.task, 1, seed=self.seed, **self.task_kwargs)
        try:
            return dataclasses.replace(env.spec, num_envs=self.num_envs)
        finally:
            env.close()

    @override
    def setup(self, stage: str) -> None:
        if stage == "fit" and self.collector is None:
            self._start_collector()

    @override
    def teardown(self, stage: str) -> None:
        self._stop_collector()

    @override
    def on_exception(self, exception: BaseException) -> None:
        self._stop_collector()

    @override
    def state_dict(self) -> dict[str, Any]:
        return {"env_steps": self.env_steps, "collector": self._snapshot_collector()}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.env_steps = int(state_dict["env_steps"])
        self._collector_state = state_dict.get("collector")
        if self.collector is not None:
            self._hand_over_collector_state()

    def drain_metrics(self) -> list[dict[str, Any]]:
        """Messages the collector sent since the last call, trace batches excepted (empty before
        the collector runs)."""
        self._pull_messages()
        messages = list(self._metrics_inbox)
        self._metrics_inbox.clear()
        return messages

    def start_collector_trace(self) -> None:
        """Ask the running collector to record trace spans (it ships them over the metrics
        channel; :meth:`drain_collector_trace` collects them). No-op without a collector."""
        if self.collector is not None:
            self.collector.control.request_trace(True)

    def drain_collector_trace(self) -> list[tracing.TraceBatch]:
        """Trace batches the collector sent since the last call."""
        self._pull_messages()
        batches = [message["batch"] for message in self._trace_inbox]
        self._trace_inbox.clear()
        return batches

    def stop_collector_trace(self, timeout_s: float) -> list[tracing.TraceBatch]:
        """Ask the collector to stop recording and wait up to ``timeout_s`` for its last batch
        (less if the collector is gone); returns every batch not drained before."""
        if self.collector is None:
            return self.drain_collector_trace()
        self.collector.control.request_trace(False)
        deadline = time.monotonic() + timeout_s
        batches: list[tracing.TraceBatch] = []
        while True:
            self._pull_messages()
            final = any(message["final"] for message in self._trace_inbox)
            batches += self.drain_collector_trace()
            if final or not self.collector.running or time.monotonic() > deadline:
                return batches
            time.sleep(0.005)

    @property
    def device(self) -> torch.device:
        """The learner's device."""
        return self.trainer.strategy.root_device

    @abstractmethod
    def _transport_blocks(self) -> Mapping[str, int]:
        """Bytes of each shared block the subclass will allocate (for the budget check)."""

    @abstractmethod
    def _create_transport(self) -> WriterSpec:
        """Allocate the subclass's shared blocks; return the collector's writer recipe."""

    @abstractmethod
    def _release_transport(self) -> None:
        """Unlink the subclass's shared blocks (idempotent)."""

    @property
    @abstractmethod
    def _shrink_keys(self) -> tuple[str, ...]:
        """Config keys that shrink the allocation, quoted when the budget check refuses."""

    def _device_blocks(self) -> Mapping[str, int]:
        """Bytes of each batch slot the subclass will allocate on ``device`` (budget check)."""
        return {}

    def _pull_messages(self) -> None:
        if self.collector is None:
            return
        for message in self.collector.drain_metrics():
            if message["kind"] == tracing.MESSAGE_KIND:
                self._trace_inbox.append(message)
            else:
                self._metrics_inbox.append(message)

    def _snapshot_collector(self) -> dict[str, Any] | None:
        """The running collector's state at its next step boundary (``None`` without one)."""
        collector = self.collector
        if collector is None or not collector.running or self._state_dir is None:
            return None
        try:
            self._quiesce_collector()
            request = collector.control.request_snapshot()
            collector.wait_for(
                lambda: collector.control.snapshot_done >= request, timeout=self.stall_timeout_s
            )
        except (CollectorError, TimeoutError) as err:
            # A checkpoint written because the collector failed must still be written.
            log.warning("checkpoint without the collector's state: %s", err)
            return None
        path = self._state_dir / snapshot.SNAPSHOT_FILE
        state = snapshot.read(path)
        path.unlink()
        return state

    def _quiesce_collector(self) -> None:
        """Wait until the collector has done the work it was released for (subclass hook), so
        that its snapshot and the transport's contents belong to the same moment."""

    def _hand_over_collector_state(self) -> None:
        """Give the restored state to the collector, which reads it instead of its first reset."""
        if self._collector_state is None:
            return
        assert self.collector is not None and self._state_dir is not None
        if self.shared_weights is not None and self.shared_weights.version != NOT_PUBLISHED:
            raise RuntimeError(
                "the collector's state was restored after the first weights publish; the "
                "collector has reset its envs already (restore before on_train_start)"
            )
        snapshot.write(self._state_dir / snapshot.RESTORE_FILE, self._collector_state)
        self.collector.control.request_restore()
        self._collector_state = None

    def _limit_learner_threads(self) -> None:
        threads = self.learner_torch_threads
        if threads is None:
            collector_cores = max(self.physics_threads, self.collector_torch_threads)
            # The cores this process may run on (taskset / cgroup cpusets), not the machine's,
            # shared with the other DDP ranks on this node and their collectors.
            cores = len(os.sched_getaffinity(0)) // distributed.ranks_per_node(self.trainer)
            threads = max(1, cores - collector_cores)
        torch.set_num_threads(threads)
        log.info("learner uses %d torch thread(s)", threads)

    def _start_collector(self) -> None:
        model = self.trainer.lightning_module
        if not is_param_in_hook_signature(model.training_step, "dataloader_iter", explicit=True):
            # Lightning's default loop fetches a batch before on_train_start (the collector waits
            # for that first weights publish: a deadlock until data_timeout_s) and one batch
            # ahead after it (a replay item's device slot is refilled by the next fetch).
            raise ValueError(
                f"{type(model).__name__}.training_step must take `dataloader_iter` to train "
                f"from {type(self).__name__}: the default loop fetches one batch ahead"
            )
        self._limit_learner_threads()
        policy = model.collector_policy()
        normalizer = model.obs_normalizer
        num_floats = flat_size(policy)
        blocks = {
            "weights": SharedWeights.required_bytes(num_floats),
            "obs_stats": SharedObsStats.required_bytes(self.env_spec.obs_sizes[POLICY]),
            **self._transport_blocks(),
        }
        report = check_allocation_budget(
            list(blocks.items()),
            self._shrink_keys,
            device_blocks=list(self._device_blocks().items()),
            device=self.device,
        )
        log.info("shared-memory plan fits: %s", report)
        try:
            self._state_dir = Path(tempfile.mkdtemp(prefix="unilab_lit_collector_"))
            self.shared_weights = SharedWeights(num_floats)
            self.shared_obs_stats = SharedObsStats(self.env_spec.obs_sizes[POLICY])
            writer = self._create_transport()
            self.collector = CollectorProcess(
                CollectorConfig(
                    task=self.task,
                    num_envs=self.num_envs,
                    policy=model.collector_policy_spec(),
                    writer=writer,
                    # Each DDP rank's collector steps its own envs with its own noise.
                    seed=distributed.rank_seed(self.seed, self.trainer.global_rank),
                    env_kwargs=self.task_kwargs,
                    physics_threads=self.physics_threads,
                    torch_threads=self.collector_torch_threads,
                    weights=self.shared_weights.handle(),
                    obs_stats=self.shared_obs_stats.handle(),
                    obs_norm_eps=normalizer.eps,
                    obs_norm_clip=normalizer.clip,
                    stall_timeout_s=self.stall_timeout_s,
                    state_dir=str(self._state_dir),
                )
            )
            self._hand_over_collector_state()
            self.collector.start(timeout=self.startup_timeout_s)
        except BaseException:
            self._stop_collector()
            raise

    def _stop_collector(self) -> None:
        if self.collector is not None:
            self.collector.stop()
            self.collector = None
        self._release_transport()
        for block in (self.shared_weights, self.shared_obs_stats):
            if block is not None:
                block.unlink()
        self.shared_weights = None
        self.shared_obs_stats = None
        if self._state_dir is not None:
            shutil.rmtree(self._state_dir, ignore_errors=True)
            self._state_dir = None
