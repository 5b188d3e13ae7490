"""What every data module that feeds a learner from a collector subprocess shares."""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from functools import cached_property
from typing import Any

import torch
from lightning.pytorch import Callback, LightningDataModule, LightningModule
from lightning.pytorch.callbacks import Checkpoint
from lightning.pytorch.utilities.signature_utils import is_param_in_hook_signature
from tensordict import TensorDict
from torch.utils.data import DataLoader
from typing_extensions import override

from unilab_lit import distributed
from unilab_lit.callbacks.collector_sync import ObsNormSync, WeightSync
from unilab_lit.collector.link import CollectorLink, FeedingDataset, FeedStats
from unilab_lit.collector.options import CollectorOptions
from unilab_lit.collector.session import CollectorSession, check_memory_plan, limit_learner_threads
from unilab_lit.collector.transport import Transport
from unilab_lit.envs.spec import POLICY, EnvSpec
from unilab_lit.ipc.reclaim import reclaim_dead_owners
from unilab_lit.ipc.weights import flat_size


class ModelDataMismatchError(TypeError):
    """The model trains on another data module's items; the message names both classes."""


def with_publishers(callbacks: Sequence[Callback]) -> list[Callback]:
    """``callbacks`` with a ``WeightSync`` and an ``ObsNormSync`` for whichever of the two it lacks.

    The collector acts only after it received weights and statistics, so a run without them
    would wait for data until ``data_timeout_s``. A trainer's own instance (of the class or a
    subclass) keeps its settings. The added ones go before the checkpoint callbacks, which
    Lightning keeps last.
    """
    missing = [
        required()
        for required in (WeightSync, ObsNormSync)
        if not any(isinstance(callback, required) for callback in callbacks)
    ]
    at = next((i for i, c in enumerate(callbacks) if isinstance(c, Checkpoint)), len(callbacks))
    return [*callbacks[:at], *missing, *callbacks[at:]]


def _as_is(item: TensorDict) -> TensorDict:
    # The default collate would iterate a TensorDict and fail; items are batches already.
    return item


class CollectorDataModule(LightningDataModule, ABC):
    """Runs a :class:`CollectorSession` from ``setup("fit")`` to ``teardown`` / ``on_exception``.

    ``setup`` adds the ``WeightSync`` / ``ObsNormSync`` the trainer lacks (:func:`with_publishers`;
    this owns the trainer wiring of the collector, so a plain ``Trainer`` gets them too), checks
    the model's ``training_step``, limits the learner's threads, and starts a session with the subclass's transport (:meth:`_make_transport`) and the model's
    ``collector_policy()``, ``collector_policy_spec()`` and ``obs_normalizer``. Callbacks reach
    the running session only through :attr:`collector_link`.

    ``state_dict`` (Lightning stores it in every checkpoint under the class name) holds the
    env-step counter and the collector's state between two steps: env physics, episode
    counters, current observation, its RNG and exploration state. ``load_state_dict`` hands
    that state to the collector, which continues from it instead of resetting: Lightning
    restores after ``setup`` has started the collector, and the collector waits for the first
    weights publish (``on_train_start``) before its reset, so the restore always comes first.

    Args:
        collector: The collector's task, env batch, seed, threads and timeouts.

    Raises:
        ValueError: if the task does not import, is not a task, or its arguments do not fit it.
    """

    def __init__(self, collector: CollectorOptions) -> None:
        super().__init__()
        # Checkpoints then carry the collector options (the task among them), so that play and
        # export rebuild the env from the checkpoint alone. Not logged: Lightning refuses to log
        # hparams the model shares with different values (ReplayDataModule's updates_per_step
        # is None where the model's is a number).
        self.save_hyperparameters(logger=False)
        self.collector = collector
        self._session: CollectorSession | None = None
        self._link: CollectorLink | None = None  # the running session's, handed to callbacks
        self._transport: Transport | None = None  # this fit's, planned once
        self._feed = FeedStats()  # one object for the module's life: data sets count into it
        self._collector_state: dict[str, Any] | None = None  # what the next session restores
        _ = self.env_spec  # a task that cannot be built fails here, before anything starts

    @cached_property
    def env_spec(self) -> EnvSpec:
        """The task's spec (sizes are linked into the model by the CLI)."""
        options = self.collector
        env = options.task.build(1, seed=options.base_seed)
        try:
            return dataclasses.replace(env.spec, num_envs=options.num_envs)
        finally:
            env.close()

    @property
    def session(self) -> CollectorSession | None:
        """The running collector session (``None`` before ``setup("fit")`` and after ``teardown``)."""
        return self._session

    @property
    def collector_link(self) -> CollectorLink:
        """What callbacks may use of the running collector.

        Raises:
            RuntimeError: while no collector runs.
        """
        if self._link is None:
            raise RuntimeError(
                f"{type(self).__name__} runs no collector now: setup('fit') starts it and "
                "teardown stops it"
            )
        return self._link

    @property
    def feed(self) -> FeedStats:
        """A copy of what the data sets delivered so far: env steps behind the batches, those
        the learner trained on (both restored on resume) and the latest wait."""
        return dataclasses.replace(self._feed)

    @property
    def device(self) -> torch.device:
        """The learner's device."""
        return self.trainer.strategy.root_device

    @override
    def prepare_data(self) -> None:
        # Lightning calls this before the loggers create the run directory: a plan that does not
        # fit refuses with nothing written. Leftovers of hard-killed runs hold RAM: reclaim first.
        reclaim_dead_owners()
        self._planned_transport(self.trainer.lightning_module)

    @override
    def setup(self, stage: str) -> None:
        if stage == "fit" and self._session is None:
            self.trainer.callbacks[:] = with_publishers(self.trainer.callbacks)
            self._start_collector(self.trainer.lightning_module)

    @override
    def teardown(self, stage: str) -> None:
        self._stop_collector()

    @override
    def on_exception(self, exception: BaseException) -> None:
        self._stop_collector()

    @override
    def state_dict(self) -> dict[str, Any]:
        snapshot = None if self._session is None else self._session.snapshot()
        feed = self._feed
        return {
            "env_steps": feed.env_steps,
            "learned_env_steps": feed.learned_env_steps,
            "collector": snapshot,
        }

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        env_steps = int(state_dict.get("env_steps", 0))
        # Checkpoints from before the learned counter: every delivered step counted as learned.
        learned = int(state_dict.get("learned_env_steps", env_steps))
        self._feed.env_steps, self._feed.learned_env_steps = env_steps, learned
        self._collector_state = state_dict.get("collector")
        if self._session is not None and self._collector_state is not None:
            self._session.restore(self._collector_state)
            self._collector_state = None

    @abstractmethod
    def _make_transport(self, model: LightningModule) -> Transport:
        """The data blocks of this module's collector, sized for ``model``."""

    def _planned_transport(self, model: LightningModule) -> Transport:
        """This fit's transport, built and checked against the memory budget once per fit.

        ``prepare_data`` plans it on each node's first rank, before anything is written; the
        other DDP ranks plan it in ``setup``.

        Raises:
            MemoryBudgetError: the plan does not fit.
        """
        if self._transport is None:
            self._require_own_learner(model)
            transport = self._make_transport(model)
            check_memory_plan(
                flat_size(model.collector_policy()),
                self.env_spec.obs_sizes[POLICY],
                transport,
                self.device,
            )
            self._transport = transport
        return self._transport

    def _stop_check(self) -> Callable[[], bool]:
        """What ends this fit's waits for data early: a stop request on the collector link.

        Under DDP the data sets wait in rounds agreed by every rank
        (``unilab_lit.distributed.wait_on_every_rank``), so a rank never leaves its wait while
        another one enters the iteration's collectives.
        """
        link = self.collector_link
        return lambda: link.stop_requested

    def _item_loader(self, dataset: FeedingDataset) -> DataLoader:
        """The loader of ``dataset``, whose items are whole batches."""
        return DataLoader(dataset, batch_size=None, num_workers=0, collate_fn=_as_is)

    def _start_collector(self, model: LightningModule) -> None:
        self._require_dataloader_iter(model)
        limit_learner_threads(self.collector, distributed.ranks_per_node(self.trainer))
        session = CollectorSession(
            self.collector,
            self.env_spec.obs_sizes[POLICY],
            self._planned_transport(model),
            self._feed,
        )
        self._link = session.start(
            model.collector_policy(),
            model.collector_policy_spec(),
            model.obs_normalizer,
            restore=self._collector_state,
        )
        self._collector_state = None
        self._session = session

    def _require_dataloader_iter(self, model: LightningModule) -> None:
        """Refuse a model whose ``training_step`` does not take ``dataloader_iter``.

        Lightning's default loop fetches a batch before ``on_train_start`` (the collector waits
        for that first weights publish: a deadlock until ``data_timeout_s``) and one batch ahead
        after it (a replay item's device slot is refilled by the next fetch).

        Raises:
            ValueError: naming the model and the data module.
        """
        if not is_param_in_hook_signature(model.training_step, "dataloader_iter", explicit=True):
            raise ValueError(
                f"{type(model).__name__}.training_step must take `dataloader_iter` to train "
                f"from {type(self).__name__}: the default loop fetches one batch ahead"
            )

    def _require_own_learner(self, model: LightningModule) -> None:
        """Refuse a model that declares (``trains_from``) another data module's items.

        Raises:
            ModelDataMismatchError: naming the model, its data module and this one.
        """
        wanted = getattr(model, "trains_from", None)
        if wanted is None or wanted in (cls.__name__ for cls in type(self).__mro__):
            return
        raise ModelDataMismatchError(
            f"model {type(model).__name__} trains from a {wanted}, not from data "
            f"{type(self).__name__}: set data.class_path to a {wanted} (or a model that trains "
            f"from {type(self).__name__})"
        )

    def _stop_collector(self) -> None:
        self._link = None
        if self._session is not None:
            self._session.stop()
            self._session = None
        self._transport = None
