"""A test-only TensorBoard logger whose metric writes fail as they do on a full disk."""

from __future__ import annotations

import errno
from collections.abc import Mapping

from lightning.pytorch.loggers import TensorBoardLogger
from typing_extensions import override


class FullDiskLogger(TensorBoardLogger):
    """``TensorBoardLogger`` that raises ENOSPC from ``log_metrics`` after ``writes`` calls.

    Like TensorBoard's writer thread, the error names no file.

    Args:
        save_dir: As ``TensorBoardLogger``'s.
        writes: Calls that succeed before the disk is full.
    """

    def __init__(self, save_dir: str, writes: int = 1) -> None:
        super().__init__(save_dir)
        self.writes = writes

    @override
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        if self.writes <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.writes -= 1
        super().log_metrics(metrics, step)
