"""Off-policy data: lock-step collector → shared replay → double-buffer pipeline → one large batch per iteration."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator, Mapping

from lightning.pytorch import LightningModule
from tensordict import TensorDict
from torch.utils.data import DataLoader
from typing_extensions import override

from unilab_lit import distributed
from unilab_lit.collector.link import FeedingDataset, FeedStats
from unilab_lit.collector.options import CollectorOptions
from unilab_lit.collector.process import CollectorProcess
from unilab_lit.collector.transport import Transport, unlink_blocks
from unilab_lit.collector.writers import OffPolicyWriterSpec
from unilab_lit.data.base import CollectorDataModule
from unilab_lit.data.double_buffer import DoubleBufferPipeline
from unilab_lit.envs.spec import CRITIC, POLICY, EnvSpec
from unilab_lit.ipc.lockstep import LockstepLink
from unilab_lit.ipc.replay_storage import ReplayStorage, replay_columns

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
_DEFAULT_COLLECTOR = CollectorOptions(task="HalfCheetah", num_envs=16)


class ReplayDataset(FeedingDataset):
    """Endless stream of replay items in the off-policy batch contract.

    Each item is a ``TensorDict`` of batch size ``[R]``, ``R = batch_size × updates_per_step``
    (the keys of ``unilab_lit.algos.offpolicy.BATCH_KEYS``): ``obs``, ``next_obs``,
    ``critic_obs``, ``next_critic_obs`` ``[R, D]``, ``actions [R, A]``, ``reward [R]`` (float32,
    raw) and ``done``, ``truncated [R]`` (bool; ``done`` is terminated-or-truncated). The float
    tensors are column views of the pipeline's device slot, valid until the next item is drawn.
    :attr:`stats` counts the collector steps behind the items (into ``start`` when given: the
    data module's counters, earlier runs' counts included) and the latest wait. The stream ends when the pipeline's wait ended on a stop
    request.
    """

    def __init__(
        self, pipeline: DoubleBufferPipeline, replay: ReplayStorage, start: FeedStats | None = None
    ) -> None:
        self._pipeline = pipeline
        self._slices = {name: replay.column_slice(name) for name in replay.columns}
        self.stats = FeedStats() if start is None else start
        self._start = dataclasses.replace(self.stats)

    def __iter__(self) -> Iterator[TensorDict]:
        while (item := self._next_item()) is not None:
            yield item

    def _next_item(self) -> TensorDict | None:
        packed = self._pipeline.next()
        if packed is None:
            return None  # a stop was requested
        pipeline = self._pipeline
        self.stats.last_wait_s = pipeline.last_wait_s
        delivered = pipeline.tick * pipeline.rows_per_tick  # every delivered row is sampled from
        self.stats.env_steps = self._start.env_steps + delivered
        self.stats.learned_env_steps = self._start.learned_env_steps + delivered
        item = {key: packed[:, self._slices[col]] for key, col in _MATRIX_COLUMNS.items()}
        item["reward"] = packed[:, self._slices["reward"].start]
        for key in _FLAG_COLUMNS:
            item[key] = packed[:, self._slices[key].start] != 0
        return TensorDict(item, batch_size=[packed.shape[0]], device=packed.device)


class ReplayTransport(Transport):
    """The ``ReplayStorage`` the lock-step collector writes into, and its ``LockstepLink``.

    Args:
        env_spec: The task's spec (column widths).
        rows: Replay capacity in rows (``buffer_size × num_envs``).
        sample_count: Rows of one packed batch.
        env_steps_per_sync: Vector env steps the collector takes per release.
    """

    shrink_keys = (
        "data.init_args.buffer_size",
        "data.init_args.collector.num_envs",
        "data.init_args.batch_size",
    )

    def __init__(
        self, env_spec: EnvSpec, rows: int, sample_count: int, env_steps_per_sync: int
    ) -> None:
        self.rows = rows
        self.sample_count = sample_count
        self.env_steps_per_sync = env_steps_per_sync
        self.columns = replay_columns(
            env_spec.obs_sizes[POLICY], env_spec.obs_sizes[CRITIC], env_spec.action_size
        )
        self.link: LockstepLink | None = None
        self._replay: ReplayStorage | None = None

    @property
    @override
    def replay(self) -> ReplayStorage | None:
        return self._replay

    @override
    def host_blocks(self) -> Mapping[str, int]:
        return {
            "replay": ReplayStorage.required_bytes(self.rows, self.columns),
            "lockstep": LockstepLink.required_bytes(self.sample_count, sum(self.columns.values())),
        }

    @override
    def device_blocks(self) -> Mapping[str, int]:
        slot = self.sample_count * sum(self.columns.values()) * 4  # float32 rows
        return {"device_slot_0": slot, "device_slot_1": slot}

    @override
    def create(self) -> OffPolicyWriterSpec:
        self._replay = ReplayStorage(self.rows, self.columns)
        self.link = LockstepLink(self.sample_count, self._replay.width)
        return OffPolicyWriterSpec(
            self._replay.handle(), self.link.handle(), self.env_steps_per_sync
        )

    @override
    def quiesce(
        self, collector: CollectorProcess, timeout_s: float, abandon: Callable[[], bool]
    ) -> None:
        # The collector then waits for the next release; the replay stays as the snapshot sees it.
        link = self.link
        if link is not None:
            collector.wait_for(
                lambda: link.steps_done >= link.released or abandon(),
                timeout=timeout_s,
                watch=link.steps_done_watch,
            )

    @override
    def release(self) -> None:
        unlink_blocks(self.link, self._replay)
        self.link = None
        self._replay = None


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
        collector: The collector's task, env batch, seed (also of the replay sampling), threads
            and timeouts (``data_timeout_s``: longest wait for a batch without new replay rows).
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

    Raises:
        ValueError: if an argument is out of range.
    """

    def __init__(
        self,
        collector: CollectorOptions = _DEFAULT_COLLECTOR,
        batch_size: int = 256,
        updates_per_step: int | None = None,
        buffer_size: int = 10_000,
        learning_starts: int = 100,
        env_steps_per_sync: int = 1,
        synchronous: bool = False,
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
        super().__init__(collector)
        self.batch_size = batch_size
        self.updates_per_step = updates_per_step
        self.buffer_size = buffer_size
        self.learning_starts = learning_starts
        self.env_steps_per_sync = env_steps_per_sync
        self.synchronous = synchronous
        self.transport: ReplayTransport | None = None
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
        return self.collector.num_envs * self.env_steps_per_sync

    @override
    def train_dataloader(self) -> DataLoader:
        session, transport = self.session, self.transport
        if session is None or transport is None or transport.replay is None:
            raise RuntimeError("train_dataloader() before setup('fit') started the collector")
        if self.pipeline is not None:
            raise RuntimeError(
                "train_dataloader() called twice for one collector; the lock-step ticks "
                "cannot restart (reload_dataloaders_every_n_epochs is not supported)"
            )
        session.process.wait_ready()
        assert transport.link is not None  # created with the replay
        self.pipeline = DoubleBufferPipeline(
            transport.link,
            transport.replay,
            session.process,
            rows_per_tick=self.rows_per_tick,
            warmup_rows=max(1, self.learning_starts * self.collector.num_envs),
            device=self.device,
            # Each DDP rank samples its own replay shard with its own stream.
            seed=distributed.rank_seed(self.collector.base_seed, self.trainer.global_rank),
            timeout_s=self.collector.data_timeout_s,
            tick_offset=self._feed.env_steps // self.rows_per_tick,
            synchronous=self.synchronous,
            stop_requested=self._stop_check(),
        )
        return self._item_loader(ReplayDataset(self.pipeline, transport.replay, self._feed))

    @override
    def _make_transport(self, model: LightningModule) -> ReplayTransport:
        self._bind_model(model)
        self.transport = ReplayTransport(
            self.env_spec,
            self.buffer_size * self.collector.num_envs,
            self.sample_count,
            self.env_steps_per_sync,
        )
        return self.transport

    @override
    def _stop_collector(self) -> None:
        # The copier thread reads the link's slots: it stops before they are unlinked.
        if self.pipeline is not None:
            self.pipeline.close()
            self.pipeline = None
        super()._stop_collector()
        self.transport = None

    def _bind_model(self, model: LightningModule) -> None:
        model_updates = getattr(model, "updates_per_step", None)
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
