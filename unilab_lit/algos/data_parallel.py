"""The LightningModule hooks that make an RL learner data-parallel under Lightning's DDP.

Under DDP only rank 0 writes the checkpoint file, but the data module's state (env-step counter,
the collector's envs, observations and RNG, the staging pool) and the callbacks' state (RNG
streams, episode windows, replay sidecar names) differ per rank. :func:`gather_rank_states` puts
every rank's copy of those entries into rank 0's checkpoint; :func:`select_rank_state` hands each
rank of the resumed job its own before anything is restored from them. Model, optimizer and loop
state are the same on every rank and stay as Lightning writes them.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.trainer.states import TrainerStatus

from unilab_lit import distributed

log = logging.getLogger(__name__)

RANK_STATES_KEY = "rank_states"
"""Checkpoint key of ``{"world_size": W, "states": [per-rank entries] | None}`` (DDP runs only)."""

_CALLBACKS_KEY = "callbacks"


def _rank_local_keys(trainer: Trainer, checkpoint: dict[str, Any]) -> list[str]:
    keys = [_CALLBACKS_KEY]
    if trainer.datamodule is not None:
        keys.append(type(trainer.datamodule).__qualname__)
    return [key for key in keys if key in checkpoint]


def gather_rank_states(trainer: Trainer, checkpoint: dict[str, Any]) -> None:
    """Add every rank's data-module and callback state to ``checkpoint`` (a collective under DDP).

    Call from ``on_save_checkpoint``, which Lightning runs on every rank. A checkpoint written on
    an exception path gathers nothing (another rank may be gone, and a collective would hang):
    it records the world size without per-rank states and cannot be resumed under DDP.
    """
    if not distributed.is_distributed():
        return
    size = distributed.world_size()
    if trainer.state.status == TrainerStatus.INTERRUPTED:
        log.warning("checkpoint written while the job fails holds no per-rank state")
        checkpoint[RANK_STATES_KEY] = {"world_size": size, "states": None}
        return
    keys = _rank_local_keys(trainer, checkpoint)
    states = distributed.gather_to_rank_zero({key: checkpoint[key] for key in keys})
    checkpoint[RANK_STATES_KEY] = {"world_size": size, "states": states}


def select_rank_state(trainer: Trainer, checkpoint: dict[str, Any]) -> None:
    """Replace the rank-local entries of a loaded ``checkpoint`` by this rank's own.

    Call from ``on_load_checkpoint`` (Lightning runs it before the data module and callbacks are
    restored).

    Raises:
        ValueError: if the checkpoint was written by a different number of ranks, or by a
            failing DDP job (no per-rank state).
    """
    saved = checkpoint.get(RANK_STATES_KEY)
    saved_size = 1 if saved is None else int(saved["world_size"])
    size = distributed.world_size()
    if saved_size != size:
        raise ValueError(
            f"checkpoint {trainer.ckpt_path} was written by a job of world size {saved_size}, "
            f"this job has world size {size} (devices x num_nodes); resume with {saved_size}"
        )
    if saved is None:
        return
    if saved["states"] is None:
        raise ValueError(
            f"checkpoint {trainer.ckpt_path} was written while a DDP job failed and holds no "
            "per-rank collector state; resume from an earlier checkpoint"
        )
    checkpoint.update(saved["states"][distributed.global_rank()])


class DataParallelHooks(LightningModule):
    """Mixin for the learners: DDP gradient sync by the learner, per-rank state in checkpoints.

    - ``on_fit_start``: each rank's learner-side random draws (FastTD3's target-policy noise,
      FastSAC's action samples, APPO's minibatch order) come from a stream of its own: rank
      ``r > 0`` reseeds torch's generators with ``rank_seed(torch.initial_seed(), r)``, rank 0
      keeps its stream (a one-rank run draws what a run without DDP draws). Every rank's
      generator states are in the checkpoint (``unilab_lit.callbacks.RLCheckpoint``), so a resume
      continues each stream exactly.
    - ``on_train_batch_start``: DDP's reducer is kept out of this step's backward passes; the
      learner averages gradients before every optimizer step instead
      (:func:`unilab_lit.distributed.take_over_gradient_sync`, ``RLAlgorithm._step``).
    - ``on_save_checkpoint`` / ``on_load_checkpoint``: every rank's data-module and callback
      state goes into rank 0's checkpoint and comes back to its rank on resume
      (:func:`gather_rank_states`, :func:`select_rank_state`); a different world size fails there.

    Without DDP every hook is a no-op. A subclass overriding one of them calls ``super()``.
    """

    def on_fit_start(self) -> None:
        # After the model is built and DDP broadcast rank 0's parameters, before RLCheckpoint
        # puts a resumed run's streams back (on_train_start).
        rank = distributed.global_rank()
        if rank > 0:
            torch.manual_seed(distributed.rank_seed(torch.initial_seed(), rank))

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        distributed.take_over_gradient_sync(self.trainer)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        gather_rank_states(self.trainer, checkpoint)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # load_from_checkpoint (play, export) has no trainer and needs only the weights.
        if self._trainer is not None:
            select_rank_state(self.trainer, checkpoint)
