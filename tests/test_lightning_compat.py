"""Pins the Lightning internals ``unilab_lit.telemetry.lightning_compat`` relies on; fails by name when they move."""

from __future__ import annotations

import inspect
import re
import signal

from lightning.fabric.plugins.environments import SLURMEnvironment
from lightning.pytorch import Trainer
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter

from tests.conftest import REPO
from unilab_lit.telemetry.lightning_compat import (
    AppendingExperimentWriter,
    cached_experiment,
    cluster_environment,
    logger_step,
    write_tensorboard_summary,
)
from unilab_lit.telemetry.loggers import ResumableCSVLogger

# Lightning writes its columns sorted.
_HEADER = "Loss/value,step\n"


def _run_dir_with_metrics(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / ExperimentWriter.NAME_METRICS_FILE).write_text(_HEADER + "1.5,0\n")
    return run


def test_lightning_writer_still_deletes_metrics_in_the_private_hook_this_overrides(tmp_path):
    hook = inspect.signature(ExperimentWriter._check_log_dir_exists)
    assert list(hook.parameters) == ["self"]
    assert "self._check_log_dir_exists()" in inspect.getsource(ExperimentWriter.__mro__[1].__init__)
    run = _run_dir_with_metrics(tmp_path)
    ExperimentWriter(log_dir=str(run))
    assert not (run / ExperimentWriter.NAME_METRICS_FILE).exists()


def test_appending_writer_keeps_the_rows_and_takes_over_the_columns(tmp_path):
    run = _run_dir_with_metrics(tmp_path)
    writer = AppendingExperimentWriter(log_dir=str(run))
    assert writer.metrics_keys == ["Loss/value", "step"]
    writer.log_metrics({"Loss/value": 0.5}, step=1)
    writer.save()
    assert (run / "metrics.csv").read_text() == _HEADER + "1.5,0\n0.5,1\n"


def test_csv_logger_still_caches_its_writer_in_private_experiment(tmp_path):
    plain = CSVLogger(tmp_path, name="plain")
    assert plain._experiment is None
    assert plain.experiment is plain._experiment
    resumable = ResumableCSVLogger(tmp_path, name="resumable")
    writer = resumable.experiment
    assert isinstance(writer, AppendingExperimentWriter)
    assert writer is resumable._experiment
    assert cached_experiment(resumable, AppendingExperimentWriter) is writer


def test_no_module_outside_the_compat_module_reaches_into_lightning_internals():
    private = re.compile(
        r"\b(trainer|_logger_connector|fit_loop|epoch_loop)\._\w+|\._(experiment|fs)\b"
    )
    offenders = [
        f"{path.relative_to(REPO)}:{number}"
        for folder in ("unilab_lit", "callbacks")
        for path in sorted((REPO / folder).rglob("*.py"))
        if path.name != "lightning_compat.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if private.search(line)
    ]
    assert offenders == []


def test_epoch_loop_still_counts_the_logged_step_in_private_batches_that_stepped(tmp_path):
    from lightning.pytorch import Trainer
    from lightning.pytorch.demos.boring_classes import BoringModel

    trainer = Trainer(
        max_steps=3,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    trainer.fit(BoringModel())
    assert logger_step(trainer) == trainer.global_step == 3


def test_summary_writer_still_hands_out_its_file_writer_privately(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.compat.proto.summary_pb2 import Summary
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path))
    summary = Summary(value=[Summary.Value(tag="probe", simple_value=2.5)])
    write_tensorboard_summary(writer, summary, step=4)
    writer.close()
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("probe")] == [(4, 2.5)]


def test_cluster_environment_is_slurms_in_a_slurm_job_also_on_one_device(monkeypatch):
    monkeypatch.setenv("SLURM_NTASKS", "1")
    monkeypatch.setenv("SLURM_JOB_NAME", "train")
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.setenv("SLURM_PROCID", "0")
    monkeypatch.setenv("SLURM_LOCALID", "0")
    monkeypatch.setenv("SLURM_NODEID", "0")
    trainer = Trainer(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False)
    environment = cluster_environment(trainer)
    assert isinstance(environment, SLURMEnvironment)
    assert environment.auto_requeue and environment.requeue_signal == signal.SIGUSR1
