"""Loggers that continue a resumed run's files instead of replacing them."""

from __future__ import annotations

from lightning.fabric.loggers.logger import rank_zero_experiment
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter

from unilab_lit.telemetry.lightning_compat import AppendingExperimentWriter, cached_experiment


class ResumableCSVLogger(CSVLogger):
    """Lightning's ``CSVLogger`` that appends to an existing ``metrics.csv`` instead of deleting it.

    Lightning's CSV writer deletes ``metrics.csv`` when it opens a non-empty run directory, so a
    run resumed into its own directory (``cli.py fit --ckpt_path last`` does that) would lose
    every row written before the checkpoint. This logger keeps them and appends, so the curves
    continue in one file; a new column rewrites the file with the wider header, as Lightning's
    does. Rows the interrupted run logged after its last checkpoint (a crash between two
    checkpoints) stay, and their steps then appear twice.

    Takes the arguments of ``lightning.pytorch.loggers.CSVLogger``.
    """

    @property
    @rank_zero_experiment
    def experiment(self) -> ExperimentWriter:
        return cached_experiment(self, AppendingExperimentWriter)
