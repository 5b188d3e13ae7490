"""``StepProgressBar``: a resumed run's bar starts at the restored global step of ``max_steps``."""

from __future__ import annotations

from lightning.pytorch import Trainer
from lightning.pytorch.demos.boring_classes import BoringModel

from callbacks import StepProgressBar


class _BarAtFirstBatch(BoringModel):
    """Records what the progress bar shows when the first batch of this fit starts."""

    def __init__(self) -> None:
        super().__init__()
        self.shown: tuple[int, int | None] | None = None

    def on_train_batch_start(self, batch, batch_idx):
        if self.shown is None:
            bar = self.trainer.progress_bar_callback.train_progress_bar
            self.shown = (bar.n, bar.total)


def _trainer(tmp_path, max_steps: int) -> Trainer:
    return Trainer(
        default_root_dir=tmp_path,
        max_steps=max_steps,
        callbacks=[StepProgressBar()],
        logger=False,
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
    assert resumed.progress_bar_callback.train_progress_bar.n == 6
