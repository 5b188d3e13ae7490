"""The LightningModule hooks that make an RL learner data-parallel under Lightning's DDP."""

from __future__ import annotations

from typing import Any

from lightning.pytorch import LightningModule

from unilab_lit import distributed, rank_states


class DataParallelHooks(LightningModule):
    """Mixin for the learners: DDP gradient sync by the learner, per-rank state in checkpoints.

    - ``on_train_batch_start``: DDP's reducer is kept out of this step's backward passes; the
      learner averages gradients before every optimizer step instead
      (:func:`unilab_lit.distributed.take_over_gradient_sync`, ``RLAlgorithm._step``).
    - ``on_save_checkpoint`` / ``on_load_checkpoint``: every rank's data-module and callback
      state goes into rank 0's checkpoint and comes back to its rank on resume
      (:mod:`unilab_lit.rank_states`); a different world size fails there.

    Without DDP every hook is a no-op. A subclass overriding one of them calls ``super()``.
    """

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        distributed.take_over_gradient_sync(self.trainer)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        rank_states.gather_rank_states(self.trainer, checkpoint)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # load_from_checkpoint (play, export) has no trainer and needs only the weights.
        if self._trainer is not None:
            rank_states.select_rank_state(self.trainer, checkpoint)
