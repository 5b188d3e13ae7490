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

    Takes the arguments of ``lightning.pytorch.loggers.CSVLogger``; ``save_dir`` defaults to
    ``runs`` (the shipped configs' directory), so ``--trainer.logger+=ResumableCSVLogger`` is a
    whole command-line option.

    Args:
        save_dir: Directory of the experiments.
        name: Experiment name (a folder under ``save_dir``).
        version: Run version; ``None``: the next free ``version_N``.
        prefix: Prefix of every metric key.
        flush_logs_every_n_steps: Steps between writes of ``metrics.csv``.
    """

    def __init__(
        self,
        save_dir: str = "runs",
        name: str | None = "lightning_logs",
        version: int | str | None = None,
        prefix: str = "",
        flush_logs_every_n_steps: int = 100,
    ) -> None:
        super().__init__(save_dir, name, version, prefix, flush_logs_every_n_steps)

    @property
    @rank_zero_experiment
    def experiment(self) -> ExperimentWriter:
        return cached_experiment(self, AppendingExperimentWriter)
