"""Every use of Lightning (and TensorBoard writer) internals in this project, each where no public
route exists.

``tests/test_lightning_compat.py`` pins what this module relies on, so a Lightning upgrade
that moves any of it fails there, by name, instead of silently changing behaviour.
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from typing import TYPE_CHECKING

from lightning.fabric.utilities.cloud_io import get_filesystem
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter

if TYPE_CHECKING:
    from lightning.fabric.plugins.environments import ClusterEnvironment
    from lightning.pytorch import Trainer
    from tensorboard.compat.proto.summary_pb2 import Summary
    from torch.utils.tensorboard import SummaryWriter


class AppendingExperimentWriter(ExperimentWriter):
    """Lightning's CSV ``ExperimentWriter`` that takes over an existing ``metrics.csv``.

    Lightning's writer deletes ``metrics.csv`` from its constructor, in the private
    ``_check_log_dir_exists``; no public hook sits in between, so this overrides it to read the
    file's columns instead, and new rows are appended under them.

    Args:
        log_dir: Directory of the run's CSV files.
    """

    def _check_log_dir_exists(self) -> None:
        fs = get_filesystem(self.log_dir)
        if fs.isfile(self.metrics_file_path):
            with fs.open(self.metrics_file_path, "r", newline="") as file:
                self.metrics_keys = next(csv.reader(file), [])


def cached_experiment(
    logger: CSVLogger, build: Callable[[str], ExperimentWriter]
) -> ExperimentWriter:
    """``logger``'s experiment writer, built by ``build(log_dir)`` on first use.

    ``CSVLogger.experiment`` cannot be told which writer class to build and caches its writer
    in the private ``_experiment``; this fills that cache with ``build``'s writer instead.
    """
    if logger._experiment is None:
        get_filesystem(logger.root_dir).makedirs(logger.root_dir, exist_ok=True)
        logger._experiment = build(logger.log_dir)
    return logger._experiment


def logger_step(trainer: Trainer) -> int:
    """The step Lightning's own ``self.log`` calls write under at this point of the fit.

    Lightning logs step metrics at ``fit_loop.epoch_loop._batches_that_stepped`` (it survives a
    resume); a callback that writes to the loggers directly must use the same step for its points
    to line up with the trainer's curves, and no public property exposes it.
    """
    return trainer.fit_loop.epoch_loop._batches_that_stepped


def write_tensorboard_summary(writer: SummaryWriter, summary: Summary, step: int) -> None:
    """Write a prepared protobuf ``summary`` (e.g. a GIF image) through ``writer``.

    ``SummaryWriter.add_video`` would encode the GIF itself but needs moviepy; the file writer that
    takes a ready summary is reached through the private ``_get_file_writer``.
    """
    writer._get_file_writer().add_summary(summary, step)


def cluster_environment(trainer: Trainer) -> ClusterEnvironment:
    """The cluster environment ``trainer`` runs in (SLURM, torchelastic, Lightning's own, ...).

    Only parallel strategies expose it (``strategy.cluster_environment``); a single-device run
    under SLURM has one too, held by the private accelerator connector, which Lightning's own
    SLURM signal handling reads.
    """
    return trainer._accelerator_connector.cluster_environment
