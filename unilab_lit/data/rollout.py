"""APPO data: collector rollouts → shared ring → staging pool → one batch per learner iteration."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from tensordict import TensorDict
from torch.utils.data import DataLoader, IterableDataset
from typing_extensions import override

from unilab_lit import tracing
from unilab_lit.collector.appo_writer import AppoWriterSpec
from unilab_lit.collector.process import CollectorProcess
from unilab_lit.collector.rollout_gate import RolloutGate
from unilab_lit.data.base import CollectorDataModule
from unilab_lit.data.staging import VERSION_FIELD, StagingPool
from unilab_lit.envs.spec import CRITIC, POLICY
from unilab_lit.ipc.rollout_ring import RolloutRing, rollout_fields

# Ring fields stored once per rollout and env ([N, ...]) rather than per step ([T, N, ...]).
_PER_ENV = ("last_critic_obs",)
# Float32 in shared memory (one dtype per ring), bool in the batch the algorithm sees.
_FLAGS = ("done", "truncated")


def _as_is(item: TensorDict) -> TensorDict:
    # The default collate would iterate a 0-d TensorDict and fail; items are batches already.
    return item


class RolloutDataset(IterableDataset):
    """Infinite stream of staging-pool batches; each item waits for at least one new rollout.

    On each ``next``: release one rollout through ``gate`` (synchronous collection), wait
    (with collector liveness checks) until the ring holds an unread rollout, move every
    available rollout into the staging pool, and yield the pool's combined time-major batch.
    A dead or stalled collector raises its own ``CollectorError``; no rollout within
    ``timeout_s`` raises ``TimeoutError``.
    """

    def __init__(
        self,
        ring: RolloutRing,
        pool: StagingPool,
        collector: CollectorProcess,
        owner: RolloutDataModule,
        timeout_s: float,
        gate: RolloutGate | None = None,
    ) -> None:
        self._ring = ring
        self._gate = gate
        self._pool = pool
        self._collector = collector
        self._owner = owner
        self._timeout_s = timeout_s

    def __iter__(self) -> Iterator[TensorDict]:
        while True:
            yield self._next_batch()

    def _next_batch(self) -> TensorDict:
        if self._gate is not None:
            # Every on_train_batch_end of the previous iteration has run: the collector pulls
            # the weights and statistics that iteration published.
            self._gate.release()
        began = time.perf_counter()
        try:
            with tracing.span("wait_for_data"):
                self._collector.wait_for(
                    lambda: self._ring.available() > 0, timeout=self._timeout_s
                )
        except TimeoutError as err:
            raise TimeoutError(
                f"no rollout arrived within data_timeout_s={self._timeout_s} s while the "
                f"collector is alive; raise data.init_args.data_timeout_s for slow tasks"
            ) from err
        self._owner.last_wait_s = time.perf_counter() - began
        staged = 0
        with tracing.span("stage_to_device"):  # ring → staging pool: the one device copy
            while self._pool.stage_from(self._ring):
                staged += 1
            batch = self._pool.batch()
        tracing.counter("staging_pool_fill", self._pool.active)
        self._owner.env_steps += staged * self._pool.num_steps * self._pool.num_envs
        self._owner.last_rollouts_staged = staged
        return batch


class RolloutDataModule(CollectorDataModule):
    """Feeds APPO: the collector writes whole rollouts into a ``RolloutRing``.

    The learner drains every available rollout into a bounded ``StagingPool`` on its
    device and trains on the newest ``staging_capacity`` rollouts each iteration.

    Args:
        task: Registered task name (see ``unilab_lit.envs.registered_tasks()``).
        num_envs: Environments the collector steps together (>= 1).
        num_steps: Rollout length T in env steps (>= 1).
        ring_slots: Rollouts the shared ring holds (>= 2); a collector that laps the
            learner drops the oldest unread ones (counted).
        staging_capacity: Rollouts combined into one batch (>= 1). With more than one, the staged
            rollouts are part of every checkpoint, so a resumed run trains on the same ones.
        synchronous: Collect rollout ``k + 1`` only after iteration ``k`` has published its
            weights (``unilab_lit.collector.rollout_gate``): no policy lag and a run that depends
            only on its seeds (resume-equivalence tests, debugging), at the cost of the overlap
            of collection and learning.
        seed: Seed of the collector's env and policy sampling.
        task_kwargs: Extra keyword arguments of the task's constructor.
        physics_threads: MuJoCo threads in the collector (>= 1).
        collector_torch_threads: Torch intra-op threads in the collector (>= 1).
        stall_timeout_s: A collector without progress for this long is an error (> 0).
        data_timeout_s: Longest wait for the next rollout before failing (> 0).
        startup_timeout_s: Longest wait for the collector to report ready (> 0).
        learner_torch_threads: Torch threads of the learner; ``None``: the cores the collector
            does not use (at least one).

    Raises:
        ValueError: if an argument is out of range.
    """

    def __init__(
        self,
        task: str = "CartpoleSwingup",
        num_envs: int = 64,
        num_steps: int = 32,
        ring_slots: int = 4,
        staging_capacity: int = 3,
        synchronous: bool = False,
        seed: int = 0,
        task_kwargs: dict[str, Any] | None = None,
        physics_threads: int = 1,
        collector_torch_threads: int = 1,
        stall_timeout_s: float = 30.0,
        data_timeout_s: float = 120.0,
        startup_timeout_s: float = 120.0,
        learner_torch_threads: int | None = None,
    ) -> None:
        if num_steps < 1:
            raise ValueError(f"num_steps must be >= 1, got {num_steps}")
        if ring_slots < 2:
            # With one slot a reader that is lapped mid-copy has no intact rollout to fall back to.
            raise ValueError(f"ring_slots must be >= 2, got {ring_slots}")
        if staging_capacity < 1:
            raise ValueError(f"staging_capacity must be >= 1, got {staging_capacity}")
        super().__init__(
            task,
            num_envs,
            seed=seed,
            task_kwargs=task_kwargs,
            physics_threads=physics_threads,
            collector_torch_threads=collector_torch_threads,
            stall_timeout_s=stall_timeout_s,
            data_timeout_s=data_timeout_s,
            startup_timeout_s=startup_timeout_s,
            learner_torch_threads=learner_torch_threads,
        )
        self.num_steps = num_steps
        self.ring_slots = ring_slots
        self.staging_capacity = staging_capacity
        self.synchronous = synchronous
        self.ring: RolloutRing | None = None
        self.gate: RolloutGate | None = None
        self.pool: StagingPool | None = None
        self._pool_state: dict[str, Any] | None = None  # restored, for the next pool
        self.last_rollouts_staged = 0

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

    @property
    def ring_dropped(self) -> int:
        """Rollouts the collector overwrote before the learner read them."""
        return 0 if self.ring is None else self.ring.dropped

    @override
    def train_dataloader(self) -> DataLoader:
        if self.ring is None or self.collector is None:
            raise RuntimeError("train_dataloader() before setup('fit') started the collector")
        self.collector.wait_ready()
        fields = self.ring.fields
        pool = StagingPool(
            self.staging_capacity,
            self.num_steps,
            self.num_envs,
            step_fields={
                k: (shape[2:], torch.bool if k in _FLAGS else dtype)
                for k, (shape, dtype) in fields.items()
                if k not in (*_PER_ENV, VERSION_FIELD)
            },
            env_fields={
                k: (shape[1:], dtype) for k, (shape, dtype) in fields.items() if k in _PER_ENV
            },
            device=self.device,
        )
        if self._pool_state is not None:
            pool.load_state_dict(self._pool_state)
            self._pool_state = None
        self.pool = pool
        dataset = RolloutDataset(
            self.ring, pool, self.collector, self, self.data_timeout_s, self.gate
        )
        return DataLoader(dataset, batch_size=None, num_workers=0, collate_fn=_as_is)

    def _fields(self) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
        spec = self.env_spec
        return rollout_fields(
            self.num_steps,
            self.num_envs,
            spec.obs_sizes[POLICY],
            spec.obs_sizes[CRITIC],
            spec.action_size,
        )

    @override
    def _transport_blocks(self) -> Mapping[str, int]:
        blocks = {"rollout_ring": RolloutRing.required_bytes(self.ring_slots, self._fields())}
        if self.synchronous:
            blocks["rollout_gate"] = RolloutGate.required_bytes()
        return blocks

    @property
    @override
    def _shrink_keys(self) -> tuple[str, ...]:
        return ("data.init_args.num_envs", "data.init_args.num_steps", "data.init_args.ring_slots")

    @override
    def _create_transport(self) -> AppoWriterSpec:
        self.ring = RolloutRing(self.ring_slots, self._fields())
        if self.synchronous:
            self.gate = RolloutGate()
        return AppoWriterSpec(
            ring=self.ring.handle(),
            num_steps=self.num_steps,
            gate=None if self.gate is None else self.gate.handle(),
        )

    @override
    def _release_transport(self) -> None:
        for block in (self.ring, self.gate):
            if block is not None:
                block.unlink()
        self.ring = None
        self.gate = None
        self.pool = None
