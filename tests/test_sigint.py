"""Ctrl-C during ``cli.py fit``: a last checkpoint, the collector stopped, nothing left behind."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import torch

from tests.conftest import REPO
from tests.test_cli import SMOKE_OVERRIDES, CliRun, assert_no_leftovers

STARTUP_S = 240  # imports, collector spawn and two iterations on a loaded 2-core machine
EXIT_S = 10


def test_sigint_during_fit_writes_last_checkpoint_stops_collector_and_exits(tmp_path, marked_env):
    env, mark = marked_env
    probe = tmp_path / "probe"  # a checkpoint every iteration tells the test training runs
    args = [
        *(a for a in SMOKE_OVERRIDES if not a.startswith("--trainer.max_steps")),
        "--trainer.max_steps=100000",
        f"--trainer.logger.init_args.save_dir={tmp_path / 'runs'}",
        "--trainer.callbacks+=lightning.pytorch.callbacks.ModelCheckpoint",
        f"--trainer.callbacks.dirpath={probe}",
        "--trainer.callbacks.every_n_train_steps=1",
        "--trainer.callbacks.save_top_k=-1",
    ]
    with (
        open(tmp_path / "stdout", "w") as stdout,
        open(tmp_path / "stderr", "w") as stderr,
        subprocess.Popen(
            [sys.executable, "cli.py", "fit", "--config", "configs/appo.yaml", *args],
            cwd=REPO,
            env=env,
            stdout=stdout,
            stderr=stderr,
        ) as proc,
    ):
        try:
            deadline = time.monotonic() + STARTUP_S
            while not list(probe.glob("*step=2*.ckpt")):
                assert proc.poll() is None, (tmp_path / "stderr").read_text()[-4000:]
                assert time.monotonic() < deadline, "training did not reach step 2"
                time.sleep(0.1)
            interrupted_at = time.monotonic()
            proc.send_signal(signal.SIGINT)
            returncode = proc.wait(timeout=EXIT_S)
            exit_s = time.monotonic() - interrupted_at
        finally:
            proc.kill()
    stderr_text = (tmp_path / "stderr").read_text()
    assert returncode == 0, stderr_text[-4000:]
    assert exit_s < EXIT_S
    assert "training stops after this iteration" in stderr_text
    (last,) = (tmp_path / "runs").rglob("last.ckpt")
    checkpoint = torch.load(last, weights_only=True)
    assert checkpoint["global_step"] >= 2
    assert checkpoint["RolloutDataModule"]["collector"]["env"] is not None
    assert_no_leftovers(CliRun(proc.pid, returncode, "", stderr_text), mark)
