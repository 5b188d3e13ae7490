"""Helpers shared by the integration tests: leak checks for /dev/shm and child processes."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
MARK_VAR = "UNILAB_LIT_TEST_MARK"


def processes_with_mark(mark: str) -> list[int]:
    """Pids of live processes whose environment carries ``MARK_VAR=mark`` (children inherit it)."""
    needle = f"{MARK_VAR}={mark}".encode()
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
            state = Path(f"/proc/{entry}/stat").read_text().split()[2]
        except OSError:
            continue
        if needle in environ.split(b"\0") and state != "Z":
            pids.append(int(entry))
    return pids


@pytest.fixture
def marked_env() -> tuple[dict[str, str], str]:
    """An environment for a subprocess whose descendants can be found after it exits."""
    mark = uuid.uuid4().hex
    env = dict(os.environ, **{MARK_VAR: mark})
    return env, mark


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip ``gpu``-marked tests on a machine without CUDA (``pytest -m gpu`` selects them)."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device; none is available")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
