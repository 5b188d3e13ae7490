"""A test-only callback that tells a test outside the process which step training has reached."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

from lightning.pytorch import Callback, LightningModule, Trainer
from typing_extensions import override


class StepProbe(Callback):
    """Writes ``trainer.global_step`` to ``path`` when training starts and after every iteration
    (replace, not append; rank 0 only under DDP).

    Args:
        path: File the step number is written to.
        hang_collector_at: After writing this step, SIGSTOP the data module's collector (before
            the checkpoint callbacks, which Lightning runs last, snapshot it).
        stall_checkpoint_at: Inside the checkpoint of this step, after the callbacks listed
            before this one have added their parts (``RLCheckpoint``'s replay sidecar) and before
            the file is written, write ``<path>.stalled`` and sleep until killed: a test's
            SIGKILL then lands in the middle of that checkpoint's write.
    """

    def __init__(
        self,
        path: str,
        hang_collector_at: int | None = None,
        stall_checkpoint_at: int | None = None,
    ) -> None:
        self.path = Path(path)
        self.hang_collector_at = hang_collector_at
        self.stall_checkpoint_at = stall_checkpoint_at

    @override
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._write(trainer)

    @override
    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._write(trainer)
        if trainer.global_step == self.hang_collector_at:
            os.kill(trainer.datamodule.session.process.pid, signal.SIGSTOP)

    @override
    def on_save_checkpoint(
        self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        if trainer.global_step == self.stall_checkpoint_at:
            self.path.with_suffix(".stalled").write_text(str(trainer.global_step))
            while True:
                time.sleep(1)

    def _write(self, trainer: Trainer) -> None:
        if not trainer.is_global_zero:
            return
        step = trainer.global_step
        scratch = self.path.with_suffix(".tmp")
        scratch.write_text(str(step))
        scratch.replace(self.path)


def read_step(path: Path) -> int:
    """The last step a :class:`StepProbe` wrote (0 once training started), or -1 before."""
    try:
        return int(path.read_text())
    except (FileNotFoundError, ValueError):
        return -1
