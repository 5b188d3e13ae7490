"""``StepProgressBar``: a resumed run's bar starts at the restored global step of ``max_steps``
and shows env steps, their rate and the return under short names."""

from __future__ import annotations

from lightning.pytorch import Trainer
from lightning.pytorch.demos.boring_classes import BoringModel
from lightning.pytorch.loggers import CSVLogger

from unilab_lit.callbacks import StepProgressBar
from unilab_lit.telemetry import metrics


class _BarAtFirstBatch(BoringModel):
    """Records what the progress bar shows when the first batch of this fit starts."""

    def __init__(self) -> None:
        super().__init__()
        self.shown: tuple[int, int | None] | None = None

    def on_train_batch_start(self, batch, batch_idx):
        if self.shown is None:
            bar = self.trainer.progress_bar_callback.train_progress_bar
            self.shown = (bar.n, bar.total)


class _LogsRunFigures(BoringModel):
    """Logs to the bar what ``EpisodeStatsMonitor`` logs there, and a metric of its own."""

    def training_step(self, batch, batch_idx):
        figures = {
            metrics.ENV_STEPS: 245760.0,
            metrics.TOTAL_FPS: 95712.0,
            metrics.MEAN_REWARD: 112.04,
            metrics.POLICY_LAG: 1.5,
        }
        self.log_dict(figures, prog_bar=True)
        return super().training_step(batch, batch_idx)


def _trainer(tmp_path, max_steps: int, logger: CSVLogger | bool = False) -> Trainer:
    return Trainer(
        default_root_dir=tmp_path,
        max_steps=max_steps,
        callbacks=[StepProgressBar()],
        logger=logger,
        enable_model_summary=False,
    )


def test_resumed_run_shows_the_restored_global_step_of_max_steps(tmp_path):
    first = _trainer(tmp_path, 3)
    first.fit(BoringModel())
    checkpoint = tmp_path / "at3.ckpt"
    first.save_checkpoint(checkpoint)
    model = _BarAtFirstBatch()
    resumed = _trainer(tmp_path, 6)
    resumed.fit(model, ckpt_path=checkpoint)
    assert model.shown == (3, 6)
    bar = resumed.progress_bar_callback.train_progress_bar
    assert bar.n == 6
    assert bar.desc.startswith("Iterations") and "Epoch" not in str(bar)


def test_bar_shows_env_steps_rate_and_return_by_short_names_and_no_logger_version(tmp_path):
    model = _LogsRunFigures()
    trainer = _trainer(tmp_path, 2, logger=CSVLogger(tmp_path))
    trainer.fit(model)
    shown = trainer.progress_bar_callback.get_metrics(trainer, model)
    assert shown == {
        "env_steps": "246k",
        "env_steps/s": "95.7k",
        "return": "112.0",
        metrics.POLICY_LAG: 1.5,
    }


class _SpendsABudgetOf40Steps(BoringModel):
    """Logs the share of an env-step budget spent, as ``EnvStepBudget`` does: 1/40 a step."""

    def training_step(self, batch, batch_idx):
        self.log(metrics.BUDGET_SPENT, (self.trainer.global_step + 1) / 40, logger=False)
        self.trainer.should_stop = self.trainer.global_step + 1 >= 12
        return super().training_step(batch, batch_idx)


def test_bar_total_is_the_step_an_env_step_budget_will_be_spent_at_not_max_steps(tmp_path):
    trainer = _trainer(tmp_path, 1000)
    trainer.fit(_SpendsABudgetOf40Steps())
    assert trainer.global_step == 12
    assert trainer.progress_bar_callback.train_progress_bar.total == 40


def test_bar_total_stays_max_steps_without_a_budget(tmp_path):
    trainer = _trainer(tmp_path, 7)
    trainer.fit(BoringModel())
    assert trainer.progress_bar_callback.train_progress_bar.total == 7
