"""Every use of Lightning internals in this project, each where no public route exists.

``tests/test_lightning_compat.py`` pins what this module relies on, so a Lightning upgrade
that moves any of it fails there, by name, instead of silently changing behaviour.
"""

from __future__ import annotations

import csv
from collections.abc import Callable

from lightning.fabric.utilities.cloud_io import get_filesystem
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter


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
