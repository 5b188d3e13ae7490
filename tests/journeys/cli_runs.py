"""Runs the real ``cli.py`` (and ``python -m`` entry points) as a user does, from a run folder."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

from tests.conftest import MARK_VAR, REPO, processes_with_mark
from unilab_lit.ipc import list_segments

CLI = str(REPO / "cli.py")
TIMEOUT_S = 600


class Done(NamedTuple):
    """A finished command: its pid (the segments it created carry it), exit status and output."""

    pid: int
    returncode: int
    stdout: str
    stderr: str


def user_env(mark: str | None = None) -> dict[str, str]:
    """The environment of a user's shell, with this checkout importable (spawned children too);
    with ``mark``, every process of the run carries it (``conftest.processes_with_mark``)."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    if mark is not None:
        env[MARK_VAR] = mark
    return env


def finish(argv: list[str], cwd: Path, env: dict[str, str], timeout: float) -> Done:
    """Run ``argv`` in ``cwd`` to its end, output captured as text; one past ``timeout`` is
    killed and its output returned (its exit status then says so)."""
    with subprocess.Popen(
        argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
    return Done(proc.pid, proc.returncode, stdout, stderr)


def run(args: list[str], cwd: Path, timeout: float = TIMEOUT_S, mark: str | None = None) -> Done:
    """``python <args>`` in ``cwd`` as a user's shell runs it."""
    return finish([sys.executable, *args], cwd, user_env(mark), timeout)


def fit(config: str, cwd: Path, *extra: str, mark: str | None = None) -> Done:
    """``python cli.py fit --config <config> <extra>`` in ``cwd`` (its ``runs/`` lands there)."""
    args = [CLI, "fit", "--config", config, "--trainer.enable_progress_bar=false", *extra]
    return run(args, cwd, mark=mark)


def succeeded(done: Done) -> bool:
    """Exit 0 and no traceback on stderr."""
    return done.returncode == 0 and "Traceback" not in done.stderr


def report(done: Done) -> str:
    """The end of a run's output, for an assertion message."""
    return f"exit {done.returncode}\n{done.stderr[-4000:]}"


def assert_no_leftovers(done: Done, mark: str) -> None:
    """No process of the run is alive and no segment it created is left in /dev/shm."""
    deadline = time.monotonic() + 5
    while processes_with_mark(mark) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_with_mark(mark) == [], "processes of the run outlived it"
    assert list_segments(done.pid) == [], "shared memory left in /dev/shm"
