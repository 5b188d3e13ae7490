"""Off-policy data: lock-step collector → shared replay → double-buffer pipeline → one large batch per iteration."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any

from lightning.pytorch import LightningModule
from tensordict import TensorDict
from torch.utils.data import DataLoader, IterableDataset
from typing_extensions import override

from unilab_lit import distributed
from unilab_lit.collector.lockstep import LockstepLink
from unilab_lit.collector.offpolicy_writer import OffPolicyWriterSpec
from unilab_lit.data.base import CollectorDataModule
from unilab_lit.data.double_buffer import DoubleBufferPipeline
from unilab_lit.envs.spec import CRITIC, POLICY
from unilab_lit.ipc.replay import ReplayStorage, replay_columns

log = logging.getLogger(__name__)

# Batch key -> replay column; the batch keys are the algorithms' contract
# (``unilab_lit.algos.offpolicy.BATCH_KEYS``).
_MATRIX_COLUMNS = {
    "obs": "obs",
    "next_obs": "next_obs",
    "actions": "actions",
    "critic_obs": "critic",
    "next_critic_obs": "next_critic",
}
# Width-1 columns: float32 in the replay; the batch has them as [rows], the flags as bool.
_FLAG_COLUMNS = ("done", "truncated")


def _as_is(item: TensorDict) -> TensorDict:
    # The default collate would iterate the TensorDict and fail; items are batches already.
    return item


class ReplayDataset(IterableDataset):
    """Endless stream of replay items in the off-policy batch contract.

    Each item is a ``TensorDict`` of ``batch_size × updates_per_step`` rows: ``obs``,
    ``next_obs``, ``critic_obs``, ``next_critic_obs`` ``[R, D]``, ``actions [R, A]``,
    ``reward [R]`` (float32, raw) and ``done``, ``truncated [R]`` (bool; ``done`` is
    terminated-or-truncated). The float tensors are column views of the pipeline's device
    slot, valid until the next item is drawn. Each item also updates the owner's ``env_steps``
    (collector steps behind the batch) and ``last_wait_s``.
    """

    def __init__(
        self, pipeline: DoubleBufferPipeline, replay: ReplayStorage, owner: ReplayDataModule
    ) -> None:
        self._pipeline = pipeline
        self._slices = {name: replay.column_slice(name) for name in replay.columns}
        self._owner = owner
        self._env_steps0 = owner.env_steps

    def __iter__(self) -> Iterator[TensorDict]:
        while True:
            yield self._next_item()

    def _next_item(self) -> TensorDict:
        packed = self._pipeline.next()
        pipeline = self._pipeline
        self._owner.last_wait_s = pipeline.last_wait_s
        self._owner.env_steps = self._env_steps0 + pipeline.tick * pipeline.rows_per_tick
        item = {key: packed[:, self._slices[col]] for key, col in _MATRIX_COLUMNS.items()}
        item["reward"] = packed[:, self._slices["reward"].start]
        for key in _FLAG_COLUMNS:
            item[key] = packed[:, self._slices[key].start] != 0
        return TensorDict(item, batch_size=[packed.shape[0]], device=packed.device)


class ReplayDataModule(CollectorDataModule):
    """Feeds FastTD3 / FastSAC from a lock-step collector through the double-buffer pipeline.

    The collector writes every transition (raw observations; the true final observation as
    ``next_obs`` where an episode ended) into a shared ``ReplayStorage`` of ``buffer_size ×
    num_envs`` rows, taking ``env_steps_per_sync`` vector steps per learner iteration. Training
    starts once the replay holds ``learning_starts × num_envs`` rows (the warm-up runs inside
    the first batch and is logged); each item then holds ``batch_size × updates_per_step``
    uniformly sampled rows (see :class:`ReplayDataset` and :class:`DoubleBufferPipeline`).

    The model's ``training_step`` must take ``dataloader_iter``: Lightning's default loop
    fetches one batch ahead, which would hand the device slot being trained on back to the
    copier (checked in ``setup``).

    Args:
        task: Registered task name (see ``unilab_lit.envs.registered_tasks()``).
        num_envs: Environments the collector steps together (>= 1).
        batch_size: Rows per minibatch (>= 1).
        updates_per_step: Minibatches per learner iteration; ``None`` takes the model's
            ``updates_per_step``, a number must equal it.
        buffer_size: Transitions kept per env (>= 1); the replay holds ``buffer_size ×
            num_envs`` rows.
        learning_starts: Vector env steps collected before the first learner iteration, in
            ``[0, buffer_size]``.
        env_steps_per_sync: Vector env steps the collector takes per learner iteration (>= 1).
        synchronous: Collect tick ``t + 1`` only after iteration ``t`` has published its weights
            (see :class:`DoubleBufferPipeline`): a run that depends only on its seeds and an
            exact checkpoint, at the cost of the overlap of collection and learning.
        seed: Seed of the collector's env and policy, and of the replay sampling.
        task_kwargs: Extra keyword arguments of the task's constructor.
        physics_threads: MuJoCo threads in the collector (>= 1).
        collector_torch_threads: Torch intra-op threads in the collector (>= 1).
        stall_timeout_s: A collector without progress for this long is an error (> 0).
        data_timeout_s: Longest wait for a batch without new replay rows before failing (> 0).
        startup_timeout_s: Longest wait for the collector to report ready (> 0).
        learner_torch_threads: Torch threads of the learner; ``None``: the cores the collector
            does not use (at least one).

    Raises:
        ValueError: if an argument is out of range.
    """

    def __init__(
        self,
        task: str = "HalfCheetah",
        num_envs: int = 16,
        batch_size: int = 256,
        updates_per_step: int | None = None,
        buffer_size: int = 10_000,
        learning_starts: int = 100,
        env_steps_per_sync: int = 1,
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
        for name, value in (
            ("batch_size", batch_size),
            ("buffer_size", buffer_size),
            ("env_steps_per_sync", env_steps_per_sync),
        ):
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if updates_per_step is not None and updates_per_step < 1:
            raise ValueError(f"updates_per_step must be >= 1 or null, got {updates_per_step}")
        if not 0 <= learning_starts <= buffer_size:
            raise ValueError(
                f"learning_starts must be in [0, buffer_size={buffer_size}] (the replay keeps "
                f"buffer_size steps per env), got {learning_starts}"
            )
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
        self.batch_size = batch_size
        self.updates_per_step = updates_per_step
        self.buffer_size = buffer_size
        self.learning_starts = learning_starts
        self.env_steps_per_sync = env_steps_per_sync
        self.synchronous = synchronous
        self.replay: ReplayStorage | None = None
        self.link: LockstepLink | None = None
        self.pipeline: DoubleBufferPipeline | None = None
        self._model_updates_per_step: int | None = None

    @property
    def sample_count(self) -> int:
        """Rows of one item: ``batch_size × updates_per_step`` (known after ``setup``)."""
        if self._model_updates_per_step is None:
            raise RuntimeError("sample_count is known once setup('fit') has seen the model")
        return self.batch_size * self._model_updates_per_step

    @property
    def rows_per_tick(self) -> int:
        """Replay rows the collector writes per learner iteration."""
        return self.num_envs * self.env_steps_per_sync

    @override
    def setup(self, stage: str) -> None:
        if stage == "fit" and self.collector is None:
            self._bind_model(self.trainer.lightning_module)
        super().setup(stage)

    @override
    def train_dataloader(self) -> DataLoader:
        if self.replay is None or self.link is None or self.collector is None:
            raise RuntimeError("train_dataloader() before setup('fit') started the collector")
        if self.pipeline is not None:
            raise RuntimeError(
                "train_dataloader() called twice for one collector; the lock-step ticks "
                "cannot restart (reload_dataloaders_every_n_epochs is not supported)"
            )
        self.pipeline = DoubleBufferPipeline(
            self.link,
            self.replay,
            self.collector,
            rows_per_tick=self.rows_per_tick,
            warmup_rows=max(1, self.learning_starts * self.num_envs),
            device=self.device,
            # Each DDP rank samples its own replay shard with its own stream.
            seed=distributed.rank_seed(self.seed, self.trainer.global_rank),
            timeout_s=self.data_timeout_s,
            tick_offset=self.env_steps // self.rows_per_tick,
            synchronous=self.synchronous,
        )
        dataset = ReplayDataset(self.pipeline, self.replay, self)
        return DataLoader(dataset, batch_size=None, num_workers=0, collate_fn=_as_is)

    def _bind_model(self, model: LightningModule) -> None:
        model_updates = getattr(model.hparams, "updates_per_step", None)
        if model_updates is None and self.updates_per_step is None:
            raise ValueError(
                f"{type(model).__name__} has no `updates_per_step` hyperparameter; set "
                "data.init_args.updates_per_step"
            )
        if None not in (model_updates, self.updates_per_step) and (
            model_updates != self.updates_per_step
        ):
            raise ValueError(
                f"data.init_args.updates_per_step={self.updates_per_step} differs from the "
                f"model's updates_per_step={model_updates}; set it to null to follow the model"
            )
        self._model_updates_per_step = int(
            self.updates_per_step if model_updates is None else model_updates
        )

    def _columns(self) -> dict[str, int]:
        spec = self.env_spec
        return replay_columns(spec.obs_sizes[POLICY], spec.obs_sizes[CRITIC], spec.action_size)

    @override
    def _transport_blocks(self) -> Mapping[str, int]:
        columns = self._columns()
        return {
            "replay": ReplayStorage.required_bytes(self.buffer_size * self.num_envs, columns),
            "lockstep": LockstepLink.required_bytes(self.sample_count, sum(columns.values())),
        }

    @override
    def _device_blocks(self) -> Mapping[str, int]:
        slot = self.sample_count * sum(self._columns().values()) * 4  # float32 rows
        return {"device_slot_0": slot, "device_slot_1": slot}

    @property
    @override
    def _shrink_keys(self) -> tuple[str, ...]:
        return (
            "data.init_args.buffer_size",
            "data.init_args.num_envs",
            "data.init_args.batch_size",
        )

    @override
    def _create_transport(self) -> OffPolicyWriterSpec:
        self.replay = ReplayStorage(self.buffer_size * self.num_envs, self._columns())
        self.link = LockstepLink(self.sample_count, self.replay.width)
        return OffPolicyWriterSpec(
            self.replay.handle(), self.link.handle(), self.env_steps_per_sync
        )

    @override
    def _quiesce_collector(self) -> None:
        # The collector then waits for the next release; the replay stays as the snapshot sees it.
        link, collector = self.link, self.collector
        if link is not None and collector is not None:
            collector.wait_for(
                lambda: link.steps_done >= link.released, timeout=self.stall_timeout_s
            )

    @override
    def _release_transport(self) -> None:
        if self.pipeline is not None:
            self.pipeline.close()
            self.pipeline = None
        for block in (self.link, self.replay):
            if block is not None:
                block.unlink()
        self.link = None
        self.replay = None
