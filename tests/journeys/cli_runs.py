"""Runs the real ``cli.py`` (and ``python -m`` entry points) as a user does, from a run folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

CLI = str(REPO / "cli.py")
TIMEOUT_S = 600


def user_env() -> dict[str, str]:
    """The environment of a user's shell, with this checkout importable (spawned children too)."""
    return dict(os.environ, PYTHONPATH=str(REPO))


def run(args: list[str], cwd: Path, timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess:
    """``python <args>`` in ``cwd``, output captured as text."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env=user_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def fit(config: str, cwd: Path, *extra: str) -> subprocess.CompletedProcess:
    """``python cli.py fit --config <config> <extra>`` in ``cwd`` (its ``runs/`` lands there)."""
    return run([CLI, "fit", "--config", config, "--trainer.enable_progress_bar=false", *extra], cwd)


def succeeded(done: subprocess.CompletedProcess) -> bool:
    """Exit 0 and no traceback on stderr."""
    return done.returncode == 0 and "Traceback" not in done.stderr


def report(done: subprocess.CompletedProcess) -> str:
    """The end of a run's output, for an assertion message."""
    return f"exit {done.returncode}\n{done.stderr[-4000:]}"
