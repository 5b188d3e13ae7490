"""``AtomicCheckpointIO``: a checkpoint file is whole or absent, and a full disk is one line."""

from __future__ import annotations

import errno
import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from lightning.pytorch import Trainer
from lightning.pytorch.demos.boring_classes import BoringModel

import unilab_lit.checkpoint_io as checkpoint_io
from unilab_lit.callbacks import StopCheckpoint
from unilab_lit.checkpoint_io import AtomicCheckpointIO, CheckpointWriteError

_TMPFS_BYTES = 1 << 20


class _HeavyModel(BoringModel):
    """A BoringModel whose checkpoint weighs ~300 KB, so a 1 MiB disk holds three of them."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("ballast", torch.zeros(75_000))


@pytest.fixture
def small_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A 1 MiB directory that fills up: a real tmpfs where this process may mount one, else a
    simulated one whose writes fail with ENOSPC once 1 MiB was written into it."""
    mount_point = tmp_path / "small_disk"
    mount_point.mkdir()
    mounted = (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={_TMPFS_BYTES}", "tmpfs", str(mount_point)],
            capture_output=True,
        ).returncode
        == 0
    )
    if not mounted:
        real_fdopen = checkpoint_io.os.fdopen

        class _FillingFile:
            def __init__(self, file) -> None:
                self._file = file

            def __getattr__(self, name):
                return getattr(self._file, name)

            def __enter__(self):
                return self

            def __exit__(self, *exc_info):
                return self._file.__exit__(*exc_info)

            def write(self, data) -> int:
                used = sum(path.stat().st_size for path in mount_point.iterdir())
                if used + len(data) > _TMPFS_BYTES:
                    self._file.write(bytes(data)[: _TMPFS_BYTES - used])
                    raise OSError(errno.ENOSPC, "No space left on device")
                return self._file.write(data)

        monkeypatch.setattr(
            checkpoint_io.os, "fdopen", lambda *args, **kw: _FillingFile(real_fdopen(*args, **kw))
        )
    yield mount_point
    if mounted:
        subprocess.run(["umount", str(mount_point)], check=True)


def test_atomic_save_writes_a_loadable_file_and_no_temporary(tmp_path):
    target = tmp_path / "checkpoints" / "step=3.ckpt"
    AtomicCheckpointIO().save_checkpoint({"global_step": 3, "w": torch.ones(4)}, target)
    assert torch.load(target, weights_only=True)["global_step"] == 3
    assert [path.name for path in target.parent.iterdir()] == ["step=3.ckpt"]


@pytest.mark.parametrize("umask", [0o022, 0o077], ids=["umask022", "umask077"])
def test_checkpoints_of_a_fit_get_a_new_files_mode_under_the_umask(tmp_path, umask):
    # As Lightning's own write (open()) would make them, not mkstemp's private 0600: a run
    # directory shared with a group stays readable by it.
    before = os.umask(umask)
    try:
        trainer = Trainer(
            max_steps=2,
            callbacks=[StopCheckpoint(dirpath=tmp_path, save_last=True)],
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
        )
        trainer.fit(BoringModel())
    finally:
        os.umask(before)
    written = sorted(tmp_path.glob("*.ckpt"))
    assert [path.name for path in written] == ["last.ckpt", "step=2.ckpt"]
    assert {stat.S_IMODE(path.stat().st_mode) for path in written} == {0o666 & ~umask}


def test_atomic_save_over_an_existing_checkpoint_replaces_it_whole(tmp_path):
    target = tmp_path / "last.ckpt"
    io = AtomicCheckpointIO()
    io.save_checkpoint({"global_step": 1}, target)
    io.save_checkpoint({"global_step": 2}, target)
    assert torch.load(target, weights_only=True)["global_step"] == 2
    assert [path.name for path in tmp_path.iterdir()] == ["last.ckpt"]


def test_full_disk_during_fit_is_one_line_and_keeps_earlier_checkpoints_whole(small_disk):
    checkpoint = StopCheckpoint(dirpath=small_disk, every_n_train_steps=1, save_top_k=-1)
    trainer = Trainer(
        max_steps=20,
        callbacks=[checkpoint],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    with pytest.raises(CheckpointWriteError) as caught:
        trainer.fit(_HeavyModel())
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("disk full while writing checkpoint ")
    assert str(small_disk) in message
    written = sorted(small_disk.iterdir())
    assert written, "the first checkpoints fit on the disk"
    # Only whole checkpoints: no temporary file is left, and each one loads.
    assert all(path.suffix == ".ckpt" and not path.name.startswith(".") for path in written)
    steps = [torch.load(path, weights_only=True)["global_step"] for path in written]
    assert steps == list(range(1, len(written) + 1))


def test_stop_checkpoint_installs_atomic_writes_but_keeps_a_users_own_plugin(tmp_path):
    class _OwnIO(AtomicCheckpointIO):
        pass

    def fitted(**kwargs) -> Trainer:
        trainer = Trainer(
            default_root_dir=tmp_path,
            max_steps=1,
            callbacks=[StopCheckpoint(dirpath=tmp_path, save_last=True)],
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            **kwargs,
        )
        trainer.fit(BoringModel())
        return trainer

    assert type(fitted().strategy.checkpoint_io) is AtomicCheckpointIO
    assert type(fitted(plugins=[_OwnIO()]).strategy.checkpoint_io) is _OwnIO


def test_partial_files_read_the_umask_without_setting_it(tmp_path, monkeypatch):
    # Setting the umask to read it would race with files other threads create meanwhile.
    before = os.umask(0o027)
    try:
        monkeypatch.setattr(os, "umask", _refuse_umask)
        handle, path = checkpoint_io.partial_file(tmp_path / "step=1.ckpt")
        handle.close()
    finally:
        monkeypatch.undo()
        os.umask(before)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


def _refuse_umask(mask: int) -> int:
    raise AssertionError(f"os.umask({mask:#o}) called")
