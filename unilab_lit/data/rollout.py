"""APPO data: collector rollouts → shared ring → staging pool → one batch per learner iteration."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from lightning.pytorch import LightningModule
from tensordict import TensorDict
from torch.utils.data import DataLoader
from typing_extensions import override

from unilab_lit import distributed
from unilab_lit.collector.link import FeedingDataset, FeedStats
from unilab_lit.collector.options import CollectorOptions
from unilab_lit.collector.process import CollectorProcess
from unilab_lit.collector.transport import Transport, unlink_blocks
from unilab_lit.collector.writers import AppoWriterSpec
from unilab_lit.data.base import CollectorDataModule
from unilab_lit.data.staging import VERSION_FIELD, StagingPool
from unilab_lit.envs.spec import CRITIC, POLICY, EnvSpec
from unilab_lit.ipc.rollout_gate import RolloutGate
from unilab_lit.ipc.rollout_ring import RolloutRing, rollout_fields
from unilab_lit.telemetry import tracing
from unilab_lit.validation import check_arg

# Ring fields stored once per rollout and env ([N, ...]) rather than per step ([T, N, ...]).
_PER_ENV = ("last_critic_obs",)
# Float32 in shared memory (one dtype per ring), bool in the batch the algorithm sees.
_FLAGS = ("done", "truncated")
_DEFAULT_COLLECTOR = CollectorOptions(task="CartpoleSwingup", num_envs=64)


class RolloutDataset(FeedingDataset):
    """Infinite stream of staging-pool batches; each item waits for at least one new rollout.

    On each ``next``: with a ``gate``, release rollouts until the collector may run
    ``max_policy_lag`` rollouts ahead of the ones read; wait (with collector liveness checks)
    until the ring holds an unread rollout; move it (with a gate) or every available rollout
    (without) into the staging pool, and yield the pool's combined time-major batch (a
    ``TensorDict`` of batch size ``[T, M]``, see :func:`~unilab_lit.data.staging.rollout_batch`).
    :attr:`stats` counts the env steps behind the staged rollouts and those in the batch (into
    ``start`` when given: the data module's counters, earlier runs' counts included) and the latest wait. A dead or stalled collector raises its own ``CollectorError``; no rollout
    within ``timeout_s`` raises ``TimeoutError``. Once ``stop_requested()`` is true, a wait
    without a rollout ends the stream instead (training stops after the last iteration); under
    DDP the ranks wait together (``unilab_lit.distributed.wait_on_every_rank``), so a stop
    request on any rank ends the stream of every rank whenever one of them has no rollout.
    """

    def __init__(
        self,
        ring: RolloutRing,
        pool: StagingPool,
        collector: CollectorProcess,
        timeout_s: float,
        gate: RolloutGate | None = None,
        start: FeedStats | None = None,
        stop_requested: Callable[[], bool] | None = None,
        max_policy_lag: int = 0,
    ) -> None:
        self._ring = ring
        self._gate = gate
        self._max_policy_lag = max_policy_lag
        self._pool = pool
        self._collector = collector
        self._timeout_s = timeout_s
        self._stop_requested = stop_requested
        self.stats = FeedStats() if start is None else start

    def __iter__(self) -> Iterator[TensorDict]:
        while (batch := self._next_batch()) is not None:
            yield batch

    def _stopping(self) -> bool:
        return self._stop_requested is not None and self._stop_requested()

    def _wait_for_rollout(self, seconds: float, deadline: float) -> bool:
        """Wait at most ``seconds`` for a rollout (less on a stop request); whether one is there.

        Raises:
            TimeoutError: if ``deadline`` passed without a rollout while the collector is alive.
        """
        until = min(time.monotonic() + seconds, deadline)
        self._collector.wait_for(
            lambda: self._ring.available() > 0 or self._stopping() or time.monotonic() >= until,
            watch=self._ring.commits,
        )
        if self._ring.available() > 0:
            return True
        if time.monotonic() >= deadline:
            raise TimeoutError(
                f"no rollout arrived within data_timeout_s={self._timeout_s} s while the "
                f"collector is alive; raise data.init_args.collector.data_timeout_s for slow tasks"
            )
        return False

    def _next_batch(self) -> TensorDict | None:
        if self._gate is not None:
            # Every on_train_batch_end of the previous iteration has run: a rollout released now
            # is acted by the weights and statistics that iteration published (or newer ones).
            # The collector may start rollout r once r + 1 are released: it works at most
            # max_policy_lag rollouts ahead of the one this iteration reads. Counted from the
            # ring, so a resumed run (a fresh ring and gate) keeps the same bound.
            while self._gate.released < self._ring.read_count + 1 + self._max_policy_lag:
                self._gate.release()
        deadline = time.monotonic() + self._timeout_s
        with tracing.timed("wait_for_data") as wait:
            ready = distributed.wait_on_every_rank(
                lambda seconds: self._wait_for_rollout(seconds, deadline), self._stopping
            )
        self.stats.last_wait_s = wait.seconds
        if not ready:
            return None  # a stop was requested
        staged = 0
        with tracing.span("stage_to_device"):  # ring → staging pool: the one device copy
            # Gated, one rollout per iteration: the others the collector ran ahead with are the
            # next iterations' (none is dropped, each is trained in staging_capacity iterations).
            while (self._gate is None or staged == 0) and self._pool.stage_from(self._ring):
                staged += 1
            batch = self._pool.batch()
        tracing.counter("staging_pool_fill", self._pool.active)
        rollout_steps = self._pool.num_steps * self._pool.num_envs
        self.stats.env_steps += staged * rollout_steps
        # Only the newest `capacity` of the rollouts staged now are in this batch.
        self.stats.learned_env_steps += min(staged, self._pool.capacity) * rollout_steps
        return batch


class RolloutTransport(Transport):
    """The ``RolloutRing`` APPO's collector writes whole rollouts into, and its gate.

    Args:
        env_spec: The task's spec (field sizes).
        num_envs: Environments per rollout.
        num_steps: Rollout length T.
        ring_slots: Rollouts the ring holds.
        gated: Also allocate a ``RolloutGate`` (the learner releases the rollouts).
        staging_capacity: Rollouts the learner's staging pool holds on its device (memory plan).
    """

    shrink_keys = (
        "data.init_args.collector.num_envs",
        "data.init_args.num_steps",
        "data.init_args.ring_slots",
        "data.init_args.staging_capacity",
    )

    def __init__(
        self,
        env_spec: EnvSpec,
        num_envs: int,
        num_steps: int,
        ring_slots: int,
        gated: bool,
        staging_capacity: int = 1,
    ) -> None:
        self.num_steps = num_steps
        self.ring_slots = ring_slots
        self.gated = gated
        self.staging_capacity = staging_capacity
        self.fields = rollout_fields(
            num_steps,
            num_envs,
            env_spec.obs_sizes[POLICY],
            env_spec.obs_sizes[CRITIC],
            env_spec.action_size,
        )
        self.ring: RolloutRing | None = None
        self.gate: RolloutGate | None = None

    @override
    def host_blocks(self) -> Mapping[str, int]:
        blocks = {"rollout_ring": RolloutRing.required_bytes(self.ring_slots, self.fields)}
        if self.gated:
            blocks["rollout_gate"] = RolloutGate.required_bytes()
        return blocks

    @override
    def device_blocks(self) -> Mapping[str, int]:
        # The staging pool: staging_capacity rollouts of every ring field on the learner device.
        per_rollout = sum(
            math.prod(shape) * (torch.bool if name in _FLAGS else dtype).itemsize
            for name, (shape, dtype) in self.fields.items()
            if name != VERSION_FIELD
        )
        return {"staging_pool": self.staging_capacity * per_rollout}

    @override
    def create(self) -> AppoWriterSpec:
        self.ring = RolloutRing(self.ring_slots, self.fields)
        if self.gated:
            self.gate = RolloutGate()
        return AppoWriterSpec(
            ring=self.ring.handle(),
            num_steps=self.num_steps,
            gate=None if self.gate is None else self.gate.handle(),
        )

    @override
    def release(self) -> None:
        unlink_blocks(self.ring, self.gate)
        self.ring = None
        self.gate = None

    @property
    @override
    def dropped(self) -> int:
        return 0 if self.ring is None else self.ring.dropped


class RolloutDataModule(CollectorDataModule):
    """Feeds APPO: the collector writes whole rollouts into a ``RolloutRing``.

    The learner drains every available rollout into a bounded ``StagingPool`` on its
    device and trains on the newest ``staging_capacity`` rollouts each iteration.

    Args:
        collector: The collector's task, env batch, seed, threads and timeouts
            (``data_timeout_s``: longest wait for the next rollout).
        num_steps: Rollout length T in env steps (>= 1).
        ring_slots: Rollouts the shared ring holds (>= 2); a collector that laps the
            learner drops the oldest unread ones (counted).
        staging_capacity: Rollouts combined into one batch (>= 1). With more than one, the staged
            rollouts are part of every checkpoint, so a resumed run trains on the same ones.
        max_policy_lag: Sample Factory's ``max_policy_lag``, in learner iterations: the
            collector starts a rollout only when it is at most this many rollouts ahead of the
            one the learner reads (``unilab_lit.ipc.rollout_gate``), and the learner stages
            one rollout per iteration. The newest rollout of every batch was then acted by
            weights at most ``max_policy_lag`` iterations old, none is dropped, each is trained
            in exactly ``staging_capacity`` iterations, and the collector runs at the learner's
            rate. ``1`` overlaps collecting the next rollout with training on this one. ``None``
            (the default) runs the collector free: it drops the oldest unread rollouts when it
            laps the learner, which then drains every rollout available.
        synchronous: ``max_policy_lag: 0``: collect rollout ``k + 1`` only after iteration ``k``
            has published its weights: no policy lag and a run that depends only on its seeds
            (resume-equivalence tests, debugging), at the cost of the overlap of collection and
            learning.

    Raises:
        ValueError: if an argument is out of range.
    """

    def __init__(
        self,
        collector: CollectorOptions = _DEFAULT_COLLECTOR,
        num_steps: int = 32,
        ring_slots: int = 4,
        staging_capacity: int = 3,
        max_policy_lag: int | None = None,
        synchronous: bool = False,
    ) -> None:
        if num_steps < 1:
            raise ValueError(f"num_steps must be >= 1, got {num_steps}")
        if ring_slots < 2:
            # With one slot a reader that is lapped mid-copy has no intact rollout to fall back to.
            raise ValueError(f"ring_slots must be >= 2, got {ring_slots}")
        if staging_capacity < 1:
            raise ValueError(f"staging_capacity must be >= 1, got {staging_capacity}")
        if synchronous and max_policy_lag not in (None, 0):
            raise ValueError(
                f"synchronous: true is max_policy_lag: 0, got max_policy_lag={max_policy_lag}; "
                "set one of them"
            )
        if synchronous:
            max_policy_lag = 0
        if max_policy_lag is not None:
            check_arg(max_policy_lag >= 0, "max_policy_lag", max_policy_lag, ">= 0 or null")
            # The collector may hold max_policy_lag unread rollouts while it writes the next.
            check_arg(
                ring_slots >= max_policy_lag + 1,
                "ring_slots",
                ring_slots,
                f">= max_policy_lag + 1 = {max_policy_lag + 1}",
            )
        super().__init__(collector)
        self.num_steps = num_steps
        self.ring_slots = ring_slots
        self.staging_capacity = staging_capacity
        self.max_policy_lag = max_policy_lag
        self.transport: RolloutTransport | None = None
        self.pool: StagingPool | None = None
        self._pool_state: dict[str, Any] | None = None  # restored, for the next pool

    @override
    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        # With one slot the staged rollout is replaced by the next iteration's: nothing to keep.
        if self.pool is not None and self.staging_capacity > 1:
            state["staging"] = self.pool.state_dict()
        return state

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self._pool_state = state_dict.get("staging")

    @override
    def train_dataloader(self) -> DataLoader:
        session, transport = self.session, self.transport
        if session is None or transport is None or transport.ring is None:
            raise RuntimeError("train_dataloader() before setup('fit') started the collector")
        session.process.wait_ready()
        pool = StagingPool(
            self.staging_capacity,
            self.num_steps,
            self.collector.num_envs,
            step_fields={
                k: (shape[2:], torch.bool if k in _FLAGS else dtype)
                for k, (shape, dtype) in transport.fields.items()
                if k not in (*_PER_ENV, VERSION_FIELD)
            },
            env_fields={
                k: (shape[1:], dtype)
                for k, (shape, dtype) in transport.fields.items()
                if k in _PER_ENV
            },
            device=self.device,
        )
        if self._pool_state is not None:
            pool.load_state_dict(self._pool_state)
            self._pool_state = None
        self.pool = pool
        dataset = RolloutDataset(
            transport.ring,
            pool,
            session.process,
            self.collector.data_timeout_s,
            transport.gate,
            start=self._feed,
            stop_requested=self._stop_check(),
            max_policy_lag=self.max_policy_lag or 0,
        )
        return self._item_loader(dataset)

    @override
    def _make_transport(self, model: LightningModule) -> RolloutTransport:
        self.transport = RolloutTransport(
            self.env_spec,
            self.collector.num_envs,
            self.num_steps,
            self.ring_slots,
            self.max_policy_lag is not None,
            self.staging_capacity,
        )
        return self.transport

    @override
    def _stop_collector(self) -> None:
        super()._stop_collector()
        self.transport = None
        self.pool = None
