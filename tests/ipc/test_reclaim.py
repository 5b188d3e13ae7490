"""Reclaiming leftovers of dead processes: by the pid in the name, never those of a live one."""

from __future__ import annotations

import os
import subprocess
import sys

from unilab_lit.checkpoint_io import partial_file
from unilab_lit.ipc.reclaim import (
    COLLECTOR_DIR_PREFIX,
    pid_is_alive,
    reclaim_dead_owners,
    remove_dead_writers_files,
)


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_reclaim_removes_blocks_and_dirs_of_dead_pids_and_keeps_live_ones(tmp_path, caplog):
    shm, temp = tmp_path / "shm", tmp_path / "tmp"
    shm.mkdir()
    temp.mkdir()
    dead, live = _dead_pid(), os.getpid()
    assert not pid_is_alive(dead)
    for pid in (dead, live):
        (shm / f"unilab_lit_{pid}_weights_0a1b2c3d").write_bytes(b"x" * 64)
        (temp / f"{COLLECTOR_DIR_PREFIX}{pid}_abc").mkdir()
    (shm / "unilab_lit_notapid_x").write_bytes(b"x")  # not attributable: left alone
    with caplog.at_level("INFO", logger="unilab_lit.ipc.reclaim"):
        reclaimed = reclaim_dead_owners(shm_dir=str(shm), temp_dir=str(temp))
    assert reclaimed.blocks == [f"unilab_lit_{dead}_weights_0a1b2c3d"]
    assert reclaimed.directories == [f"{COLLECTOR_DIR_PREFIX}{dead}_abc"]
    assert sorted(p.name for p in shm.iterdir()) == [
        f"unilab_lit_{live}_weights_0a1b2c3d",
        "unilab_lit_notapid_x",
    ]
    assert [p.name for p in temp.iterdir()] == [f"{COLLECTOR_DIR_PREFIX}{live}_abc"]
    assert len(caplog.records) == 1 and f"[{dead}]" in caplog.records[0].getMessage()


def test_reclaim_with_nothing_dead_logs_nothing(tmp_path, caplog):
    with caplog.at_level("INFO", logger="unilab_lit.ipc.reclaim"):
        assert not reclaim_dead_owners(shm_dir=str(tmp_path), temp_dir=str(tmp_path))
    assert caplog.records == []


def test_partial_files_of_dead_writers_are_removed_and_a_live_writers_kept(tmp_path, caplog):
    dead = _dead_pid()
    leftovers = [
        f".step=50.ckpt.{dead}.q_wglo_3.partial",
        f".replay-step=50.bin.{dead}.x1.partial",
        f".policy.pt2.{dead}.k2_x9.partial.pt2",  # partial_file(..., keep_suffix=True)
    ]
    for name in leftovers:
        (tmp_path / name).write_bytes(b"x")
    live_file, live = partial_file(tmp_path / "step=100.ckpt")  # this process: a live writer
    unattributable = tmp_path / ".step=50.ckpt.9del74cj"  # an older version's name: left alone
    unattributable.write_bytes(b"x")
    with live_file, caplog.at_level("INFO", logger="unilab_lit.ipc.reclaim"):
        removed = remove_dead_writers_files(tmp_path)
    assert sorted(removed) == sorted(leftovers)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, unattributable.name])
    assert live.name.startswith(f".step=100.ckpt.{os.getpid()}.")
    (record,) = caplog.records
    assert f"left by dead writer(s) [{dead}]" in record.getMessage()
