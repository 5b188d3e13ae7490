"""A replay buffer as a file next to a checkpoint, written and read in chunks straight from shared memory.

Format: one JSON header line (columns, capacity, write pointer, stored rows, and the identity of
the checkpoint it belongs to: the writing run's id and the step), then the stored rows as raw
float32 in their physical order. Physical order and the write pointer make the restored
storage identical to the saved one, so index sampling draws the same rows. A chunk is a view of
the shared rows handed to the file object, so saving and loading never hold a second copy of the
buffer in memory.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch

from unilab_lit.checkpoint_io import partial_file
from unilab_lit.ipc.replay_storage import ReplayStorage

_MAGIC = "unilab_lit-replay-v1"


class ReplaySidecarError(ValueError):
    """A replay sidecar is not one, does not fit this run's replay, or is not the checkpoint's;
    the message is one line naming the file."""


# Rows per write/read call: large enough for full disk bandwidth, small next to any buffer.
_CHUNK_BYTES = 64 * 1024 * 1024


def _chunks(rows: int, width: int) -> list[slice]:
    step = max(1, _CHUNK_BYTES // (4 * width))
    return [slice(start, min(rows, start + step)) for start in range(0, rows, step)]


def save_replay(replay: ReplayStorage, path: Path, identity: dict[str, Any] | None = None) -> None:
    """Write ``replay`` to ``path`` atomically: a partial file (named with this pid, so that a
    killed writer's is reclaimed, :func:`~unilab_lit.checkpoint_io.partial_file`) never has the final
    name.

    The caller keeps writers away meanwhile (the collector waits for the learner during a
    checkpoint).

    Args:
        replay: The storage to save.
        path: The sidecar's final name.
        identity: What names the checkpoint the sidecar belongs to (run id, step), kept in the
            header for :func:`read_identity`.
    """
    size = replay.size
    header = {
        "magic": _MAGIC,
        "columns": replay.columns,
        "capacity": replay.capacity,
        "write_ptr": replay.write_ptr,
        "rows": size,
        "identity": identity,
    }
    file, partial = partial_file(path)
    try:
        with file:
            file.write((json.dumps(header) + "\n").encode())
            for rows in _chunks(size, replay.width):
                file.write(memoryview(replay.rows[rows].numpy()))
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def read_identity(path: Path) -> dict[str, Any] | None:
    """The ``identity`` :func:`save_replay` wrote into ``path``'s header (``None``: none).

    Raises:
        ReplaySidecarError: if the file is not a replay sidecar.
    """
    with open(path, "rb") as file:
        header = _read_header(file, path)
    return header.get("identity")


def _read_header(file: Any, path: Path) -> dict[str, Any]:
    try:
        header = json.loads(file.readline())
    except ValueError:
        header = None
    if not isinstance(header, dict) or header.get("magic") != _MAGIC:
        raise ReplaySidecarError(f"{path} is not a replay sidecar")
    return header


def load_replay(replay: ReplayStorage, path: Path) -> None:
    """Fill ``replay`` (nothing written to it yet) from a file :func:`save_replay` wrote.

    Raises:
        ReplaySidecarError: if the file is not a replay sidecar, or its columns or capacity differ from
            ``replay``'s (the physical layout would not match).
    """
    with open(path, "rb") as file:
        header = _read_header(file, path)
        if header["columns"] != replay.columns or header["capacity"] != replay.capacity:
            raise ReplaySidecarError(
                f"{path} holds a replay of capacity {header['capacity']} with columns "
                f"{header['columns']}; this run's replay has capacity {replay.capacity} and "
                f"columns {replay.columns} (buffer_size, num_envs and the task must not change "
                "on resume)"
            )
        for rows in _chunks(header["rows"], replay.width):
            view = memoryview(replay.rows[rows].numpy()).cast("B")
            if file.readinto(view) != view.nbytes:
                raise ReplaySidecarError(f"{path} is truncated")
    # The rows are in place; load_state_dict with no rows sets just the write pointer.
    replay.load_state_dict(
        {
            "columns": replay.columns,
            "rows": torch.empty(0, replay.width),
            "write_ptr": header["write_ptr"],
        }
    )
