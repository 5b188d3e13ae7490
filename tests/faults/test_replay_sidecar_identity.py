"""What a killed run leaves in its checkpoint directory is never taken for another run's state.

The real sequence on ``cli.py fit`` with ``configs/fast_sac.yaml``'s own checkpoint settings
(``RLCheckpoint(save_replay=true)``, ``StopCheckpoint(save_last=true)``; only sizes shrunk): a
run is SIGKILLed (its whole process group) in the middle of its step-K checkpoint, after the
sidecar is on disk and before the checkpoint is; a resume from an earlier step reaches K again.
And the partial files of writers killed mid-write are removed by the next start.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import torch

from tests.conftest import REPO
from tests.faults.test_fault_injection import (
    SAC_TINY,
    STARTUP_S,
    _signal_group_and_wait,
    _start_training,
)
from tests.test_cli import run_cli
from unilab_lit.checkpoint_io import partial_file
from unilab_lit.ipc.replay_sidecar import read_identity

SAC_CONFIG = str(REPO / "configs" / "fast_sac.yaml")
EARLIER, K = 4, 8


def test_resume_that_reaches_a_killed_runs_step_writes_its_own_sidecar_and_refuses_a_foreign_one(
    tmp_path, marked_env
):
    env, _ = marked_env
    runs = tmp_path / "runs"
    fit = ["fit", "--config", SAC_CONFIG, *SAC_TINY, f"--trainer.logger.init_args.save_dir={runs}"]
    first = run_cli([*fit, f"--trainer.max_steps={EARLIER}"], env)
    assert first.returncode == 0, first.stderr[-4000:]
    (checkpoints,) = {p.parent for p in runs.rglob("last.ckpt")}

    # Killed inside its step-K checkpoint: the sidecar is written, the checkpoint is not.
    killed = _start_training(
        SAC_CONFIG,
        SAC_TINY,
        env,
        tmp_path,
        0,
        (
            f"--trainer.callbacks.stall_checkpoint_at={K}",
            f"--trainer.max_steps={K}",
            "--ckpt_path=last",
        ),
    )
    stalled = (tmp_path / "step").with_suffix(".stalled")
    deadline = time.monotonic() + STARTUP_S
    while not stalled.exists():
        assert killed.poll() is None, (tmp_path / "stderr").read_text()[-4000:]
        assert time.monotonic() < deadline, f"the run did not reach its step-{K} checkpoint"
        time.sleep(0.05)
    _signal_group_and_wait(killed, signal.SIGKILL)
    sidecar = checkpoints / f"replay-step={K}.bin"
    assert sidecar.is_file(), "the killed run left no sidecar (the test proves nothing)"
    assert not (checkpoints / f"step={K}.ckpt").exists()
    killed_bytes, killed_inode = sidecar.read_bytes(), sidecar.stat().st_ino

    resumed = run_cli([*fit, f"--trainer.max_steps={K}", "--ckpt_path=last"], env)
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert sidecar.stat().st_ino != killed_inode, "the killed run's sidecar was kept"
    (last,) = runs.rglob("last.ckpt")
    checkpoint = torch.load(last, weights_only=True, map_location="cpu")
    assert checkpoint["global_step"] == K
    (record,) = [
        state["replay_file"]
        for key, state in checkpoint["callbacks"].items()
        if key.startswith("RLCheckpoint")
    ]
    assert record["name"] == sidecar.name
    assert read_identity(sidecar) == {"run_id": record["run_id"], "step": K}
    killed_copy = tmp_path / "killed-sidecar.bin"
    killed_copy.write_bytes(killed_bytes)
    assert read_identity(killed_copy)["run_id"] != record["run_id"]

    # The killed run's sidecar put back under the same name: refused, in one line naming both.
    sidecar.write_bytes(killed_bytes)
    refused = run_cli([*fit, f"--trainer.max_steps={K + 1}", "--ckpt_path=last"], env)
    assert refused.returncode == 1, refused.stderr[-4000:]
    line = refused.stderr.strip().splitlines()[-1]
    assert line.startswith("error: ") and "last.ckpt" in line and sidecar.name in line, line
    assert "Traceback" not in refused.stderr


_KILLED_WRITER = """
import os, signal, sys
from pathlib import Path
from unilab_lit.checkpoint_io import partial_file
for target in sys.argv[1:]:
    file, path = partial_file(Path(target))
    file.write(b"half a file")
    file.flush()
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_start_removes_the_partial_files_of_killed_writers_and_keeps_a_live_writers(
    tmp_path, marked_env
):
    env, _ = marked_env
    runs = tmp_path / "runs"
    fit = ["fit", "--config", SAC_CONFIG, *SAC_TINY, f"--trainer.logger.init_args.save_dir={runs}"]
    first = run_cli([*fit, "--trainer.max_steps=2"], env)
    assert first.returncode == 0, first.stderr[-4000:]
    (checkpoints,) = {p.parent for p in runs.rglob("last.ckpt")}
    targets = [str(checkpoints / name) for name in ("step=50.ckpt", "replay-step=50.bin")]
    killed = subprocess.Popen([sys.executable, "-c", _KILLED_WRITER, *targets], cwd=REPO, env=env)
    assert killed.wait() == -signal.SIGKILL
    leftovers = sorted(p.name for p in checkpoints.glob(f".*.{killed.pid}.*.partial"))
    assert len(leftovers) == 2, list(checkpoints.iterdir())
    live_file, live = partial_file(checkpoints / "step=100.ckpt")  # this test: a live writer
    with live_file:
        resumed = run_cli([*fit, "--trainer.max_steps=3", "--ckpt_path=last"], env)
        assert resumed.returncode == 0, resumed.stderr[-4000:]
        assert live.exists(), "a live writer's partial file was removed"
    assert not any(p.name in leftovers for p in checkpoints.iterdir())
    (line,) = [line for line in resumed.stderr.splitlines() if "partial file(s)" in line]
    assert f"left by dead writer(s) [{killed.pid}]" in line
    live.unlink()
