"""Every ipc test must leave /dev/shm without segments created by this process."""

from __future__ import annotations

import gc
import multiprocessing
import os
from collections.abc import Iterator

import pytest

from unilab_lit.ipc import list_segments


@pytest.fixture(autouse=True)
def no_leaked_segments() -> Iterator[None]:
    """Fail a test that leaves a segment of ours behind once its objects are gone."""
    before = set(list_segments(os.getpid()))
    yield
    gc.collect()
    leaked = set(list_segments(os.getpid())) - before
    assert not leaked, f"segments left in /dev/shm: {sorted(leaked)}"


@pytest.fixture(scope="session", autouse=True)
def no_segments_after_session() -> Iterator[None]:
    """Nothing this test process created may outlive the session."""
    yield
    gc.collect()
    assert list_segments(os.getpid()) == []


@pytest.fixture
def spawn() -> multiprocessing.context.SpawnContext:
    """The spawn multiprocessing context (what the collector uses)."""
    return multiprocessing.get_context("spawn")
