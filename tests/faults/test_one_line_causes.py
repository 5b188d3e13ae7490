"""A run that dies of a known cause ends in one line naming it; the traceback goes to a file.

Real ``cli.py fit`` runs in their own process groups, killed with real signals: the collector
child SIGKILLed, and rank 1 of a two-rank DDP run (gloo) SIGKILLed. The lines the learner writes
after the kill are counted, and the full traceback is where the line says.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import REPO, processes_with_mark
from tests.faults.test_fault_injection import (
    APPO_TINY,
    EXIT_S,
    _collector_pid,
    _start_training,
)
from tests.test_cli import CliRun, assert_no_leftovers

APPO_CONFIG = str(REPO / "configs" / "appo.yaml")
# The error line, and under DDP what the dead rank's orphans say as they go: its collector's
# "the learner process is gone" and its resource tracker's two-line warning about the blocks
# it unlinks.
FEW_LINES = 5


def _lines_after(path: Path, offset: int) -> list[str]:
    with open(path) as file:
        file.seek(offset)
        return [line for line in file.read().splitlines() if line.strip()]


def _wait(proc: subprocess.Popen) -> int:
    try:
        return proc.wait(timeout=EXIT_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _assert_one_line_with_traceback_file(lines: list[str], *needles: str) -> None:
    assert len(lines) <= FEW_LINES, "\n".join(lines)
    assert not any("Traceback" in line for line in lines), "\n".join(lines)
    (error,) = [line for line in lines if line.startswith("error: ")]
    for needle in needles:
        assert needle in error, error
    (saved,) = re.findall(r"full traceback in (\S+)\)", error)
    assert "Traceback (most recent call last)" in Path(saved).read_text()


def test_sigkilled_collector_ends_the_run_in_one_line_naming_it(tmp_path, marked_env):
    env, mark = marked_env
    proc = _start_training(APPO_CONFIG, APPO_TINY, env, tmp_path, 2)
    collector = _collector_pid(mark)
    offset = (tmp_path / "stderr").stat().st_size
    os.kill(collector, signal.SIGKILL)
    returncode = _wait(proc)
    assert returncode == 1
    lines = _lines_after(tmp_path / "stderr", offset)
    _assert_one_line_with_traceback_file(lines, f"collector (pid {collector})", "SIGKILL")
    assert_no_leftovers(CliRun(proc.pid, returncode, "", ""), mark)


def _rank1_pid(mark: str, rank0: int) -> int:
    (pid,) = [
        pid
        for pid in processes_with_mark(mark)
        if pid != rank0 and b"cli.py" in Path(f"/proc/{pid}/cmdline").read_bytes()
    ]
    return pid


def test_sigkilled_ddp_rank_ends_rank_0_in_one_line_naming_the_rank_and_its_pid(
    tmp_path, marked_env
):
    env, mark = marked_env
    ddp = ("--trainer.strategy=ddp", "--trainer.devices=2")
    proc = _start_training(APPO_CONFIG, APPO_TINY, env, tmp_path, 2, ddp)
    rank1 = _rank1_pid(mark, proc.pid)
    offset = (tmp_path / "stderr").stat().st_size
    os.kill(rank1, signal.SIGKILL)
    returncode = _wait(proc)
    assert returncode == 1
    lines = _lines_after(tmp_path / "stderr", offset)
    _assert_one_line_with_traceback_file(lines, "rank 1", f"pid {rank1}", "SIGKILL")
    deadline = time.monotonic() + 10
    while processes_with_mark(mark) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_with_mark(mark) == [], "processes of the run outlived it"


def test_a_connection_reset_in_a_single_process_run_is_not_blamed_on_a_ddp_rank():
    """Only a run of several ranks has a peer that can die; elsewhere (a logger's server, a
    network file system) the words are the same, and the traceback, not a made-up line, says
    what reset."""
    import lightning.pytorch as pl

    from unilab_lit.app.failures import exit_line

    reset = RuntimeError("[gloo/transport/tcp/pair.cc:534] Connection reset by peer")
    trainer = pl.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False)
    assert trainer.world_size == 1
    assert exit_line(reset, trainer) is None
    assert exit_line(reset, None) is None


_OBSERVED_RANK_0 = """
import os, subprocess, sys, time
from types import SimpleNamespace
from lightning.fabric.strategies.launchers.subprocess_script import _ChildProcessObserver
from unilab_lit.app.failures import exit_line

rank1 = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
procs = [rank1]
# Lightning's launcher hands its own list to the observer; here it wakes every 0.2 s, not 5.
_ChildProcessObserver(main_pid=os.getpid(), child_processes=procs,
                      sleep_period=0.2).start()
trainer = SimpleNamespace(strategy=SimpleNamespace(launcher=SimpleNamespace(procs=procs)),
                          world_size=2, global_rank=0, node_rank=0, num_devices=2)
rank1.kill()
line = exit_line(RuntimeError("Connection reset by peer"), trainer)
time.sleep(1.5)  # rank 0's clean-up, over several of the observer's wake-ups
sys.exit(line)
"""


def test_rank_0_ending_the_run_for_a_dead_rank_is_not_sigkilled_by_lightnings_observer(
    tmp_path,
):
    """Lightning's launcher watches local ranks 1.. from a thread that SIGKILLs rank 0 itself
    within 5 s of one dying; rank 0, already ending the run with its line, must exit 1 with its
    clean-up, not -9 (a slow host lost that race in the 2-rank test above)."""
    proc = subprocess.run(
        [sys.executable, "-c", _OBSERVED_RANK_0],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert proc.returncode == 1, proc.stderr
    assert "error: DDP rank 1 (pid" in proc.stderr and "SIGKILL" in proc.stderr, proc.stderr
