"""Pre-flight budget: refuses with both numbers and the keys to shrink; passes when it fits."""

from __future__ import annotations

import os

import pytest

from unilab_lit.ipc import MemoryBudgetError, ReplayStorage, check_allocation_budget, replay_columns
from unilab_lit.ipc.block import SHM_DIR, list_segments, shm_free_bytes
from unilab_lit.ipc.budget import format_bytes, mem_available_bytes

GIB = 1024**3


def test_plan_larger_than_free_shm_is_refused_naming_numbers_and_keys() -> None:
    too_big = shm_free_bytes() + GIB
    with pytest.raises(MemoryBudgetError) as info:
        check_allocation_budget(
            [("replay", too_big), ("weights", 4096)], ["data.replay_capacity", "data.num_envs"]
        )
    message = str(info.value)
    assert "\n" not in message
    assert f"needs {format_bytes(too_big + 4096)}" in message
    assert "/dev/shm has " in message and "free" in message and "MemAvailable" in message
    assert "shrink: data.replay_capacity, data.num_envs" in message


def test_host_slots_beyond_available_ram_are_refused() -> None:
    with pytest.raises(
        MemoryBudgetError, match=r"RAM needed .* but MemAvailable is .*shrink: data.batch_size"
    ):
        check_allocation_budget(
            [("ring", 4096)],
            ["data.batch_size"],
            host_blocks=[("batch slots", mem_available_bytes() + GIB)],
        )


def test_plan_that_fits_returns_the_measured_numbers() -> None:
    replay = ReplayStorage.required_bytes(1024, replay_columns(8, 8, 2))
    report = check_allocation_budget(
        [("replay", replay)],
        ["data.replay_capacity"],
        host_blocks=[("slots", 1 << 20)],
        device_blocks=[("device slots", 1 << 20)],
    )
    assert report.shm_bytes == replay and report.host_bytes == 1 << 20
    assert report.shm_free > 0 and report.ram_available > 0
    assert "planned" in str(report)


def test_required_bytes_match_what_the_blocks_allocate() -> None:
    columns = replay_columns(3, 3, 1)
    replay = ReplayStorage(100, columns)
    (name,) = list_segments(os.getpid())
    size = os.path.getsize(os.path.join(SHM_DIR, name))
    assert size == ReplayStorage.required_bytes(100, columns) >= 100 * 11 * 4
    replay.unlink()
