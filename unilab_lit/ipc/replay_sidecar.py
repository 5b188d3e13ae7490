"""A replay buffer as a file next to a checkpoint, written and read in chunks straight from shared memory.

Format: one JSON header line (columns, capacity, write pointer, stored rows), then the stored rows
as raw float32 in their physical order. Physical order and the write pointer make the restored
storage identical to the saved one, so index sampling draws the same rows. A chunk is a view of
the shared rows handed to the file object, so saving and loading never hold a second copy of the
buffer in memory.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from unilab_lit.ipc.replay_storage import ReplayStorage

_MAGIC = "unilab_lit-replay-v1"
# Rows per write/read call: large enough for full disk bandwidth, small next to any buffer.
_CHUNK_BYTES = 64 * 1024 * 1024


def _chunks(rows: int, width: int) -> list[slice]:
    step = max(1, _CHUNK_BYTES // (4 * width))
    return [slice(start, min(rows, start + step)) for start in range(0, rows, step)]


def save_replay(replay: ReplayStorage, path: Path) -> None:
    """Write ``replay`` to ``path`` atomically (a partial file never has the final name).

    The caller keeps writers away meanwhile (the collector waits for the learner during a
    checkpoint).
    """
    size = replay.size
    header = {
        "magic": _MAGIC,
        "columns": replay.columns,
        "capacity": replay.capacity,
        "write_ptr": replay.write_ptr,
        "rows": size,
    }
    partial = path.with_name(path.name + ".partial")
    with open(partial, "wb") as file:
        file.write((json.dumps(header) + "\n").encode())
        for rows in _chunks(size, replay.width):
            file.write(memoryview(replay.rows[rows].numpy()))
    os.replace(partial, path)


def load_replay(replay: ReplayStorage, path: Path) -> None:
    """Fill ``replay`` (nothing written to it yet) from a file :func:`save_replay` wrote.

    Raises:
        ValueError: if the file is not a replay sidecar, or its columns or capacity differ from
            ``replay``'s (the physical layout would not match).
    """
    with open(path, "rb") as file:
        header = json.loads(file.readline())
        if header.get("magic") != _MAGIC:
            raise ValueError(f"{path} is not a replay sidecar (header {header})")
        if header["columns"] != replay.columns or header["capacity"] != replay.capacity:
            raise ValueError(
                f"{path} holds a replay of capacity {header['capacity']} with columns "
                f"{header['columns']}; this run's replay has capacity {replay.capacity} and "
                f"columns {replay.columns} (buffer_size, num_envs and the task must not change "
                "on resume)"
            )
        for rows in _chunks(header["rows"], replay.width):
            view = memoryview(replay.rows[rows].numpy()).cast("B")
            if file.readinto(view) != view.nbytes:
                raise ValueError(f"{path} is truncated")
    # The rows are in place; load_state_dict with no rows sets just the write pointer.
    replay.load_state_dict(
        {
            "columns": replay.columns,
            "rows": torch.empty(0, replay.width),
            "write_ptr": header["write_ptr"],
        }
    )
