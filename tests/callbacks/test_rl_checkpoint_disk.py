"""``RLCheckpoint(save_replay=True)`` refuses a replay whose sidecars cannot fit on the disk."""

from __future__ import annotations

import shutil
from types import SimpleNamespace

import pytest

from unilab_lit.callbacks import RLCheckpoint
from unilab_lit.ipc.budget import MemoryBudgetError


def test_sidecars_larger_than_the_free_disk_are_refused_naming_the_keys(tmp_path):
    free = shutil.disk_usage(tmp_path).free
    replay = SimpleNamespace(capacity=free // 4 + 1, width=1)  # one sidecar: just over `free`
    with pytest.raises(MemoryBudgetError, match=r"replay sidecars need .*shrink: .*buffer_size"):
        RLCheckpoint(save_replay=True)._check_sidecar_disk(replay, tmp_path / "not" / "yet")


def test_sidecars_that_fit_pass(tmp_path):
    replay = SimpleNamespace(capacity=1000, width=10)
    RLCheckpoint(save_replay=True, keep_replays=2)._check_sidecar_disk(replay, tmp_path)
