"""``StopCheckpoint`` + ``InterruptGuard``: ``last.ckpt`` holds the step training stopped at."""

from __future__ import annotations

import os
import signal

import pytest
import torch
from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.demos.boring_classes import BoringModel
from lightning.pytorch.utilities.exceptions import SIGTERMException

from unilab_lit.callbacks import InterruptGuard, StopCheckpoint


class _SignalAtStep(BoringModel):
    """Sends ``signum`` to its own process during training step ``at`` (0-based)."""

    def __init__(self, signum: int | None = None, at: int = -1) -> None:
        super().__init__()
        self.signum = signum
        self.at = at

    def training_step(self, batch, batch_idx):
        if self.trainer.global_step == self.at:
            os.kill(os.getpid(), self.signum)
        return super().training_step(batch, batch_idx)


def _fit(tmp_path, checkpoint: ModelCheckpoint, model: BoringModel, max_steps: int) -> int:
    trainer = Trainer(
        default_root_dir=tmp_path,
        max_steps=max_steps,
        callbacks=[InterruptGuard(), checkpoint],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model)
    return torch.load(tmp_path / "last.ckpt", weights_only=True)["global_step"]


def _checkpoint(cls: type[ModelCheckpoint], tmp_path) -> ModelCheckpoint:
    return cls(dirpath=tmp_path, save_last=True, every_n_train_steps=3)


def test_lightning_checkpoint_keeps_last_at_the_periodic_step_when_stopped_off_interval(tmp_path):
    # The behaviour StopCheckpoint exists for (Lightning 2.6): last.ckpt lags the stop step.
    assert _fit(tmp_path, _checkpoint(ModelCheckpoint, tmp_path), BoringModel(), 5) == 3


def test_stop_checkpoint_writes_last_at_max_steps_off_interval(tmp_path):
    assert _fit(tmp_path, _checkpoint(StopCheckpoint, tmp_path), BoringModel(), 5) == 5


def test_sigint_mid_iteration_stops_after_it_with_last_at_that_step(tmp_path):
    model = _SignalAtStep(signal.SIGINT, at=4)  # during the 5th iteration
    assert _fit(tmp_path, _checkpoint(StopCheckpoint, tmp_path), model, 100) == 5


def test_sigterm_mid_iteration_finishes_it_writes_last_and_raises_sigterm_exception(tmp_path):
    model = _SignalAtStep(signal.SIGTERM, at=4)
    with pytest.raises(SIGTERMException):
        _fit(tmp_path, _checkpoint(StopCheckpoint, tmp_path), model, 100)
    assert torch.load(tmp_path / "last.ckpt", weights_only=True)["global_step"] == 5


def test_sigterm_stop_hands_sigterm_back_to_the_handler_from_before_fit(tmp_path):
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SIGTERMException):
        _fit(tmp_path, _checkpoint(StopCheckpoint, tmp_path), _SignalAtStep(signal.SIGTERM, 1), 9)
    assert signal.getsignal(signal.SIGTERM) is before
