"""Checkpoint files written atomically: a temporary file beside the target (named with the
writer's pid), fsync, rename."""

from __future__ import annotations

import contextlib
import errno
import io
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import IO, Any

import torch
from fsspec.implementations.local import LocalFileSystem
from lightning.fabric.utilities.cloud_io import get_filesystem
from lightning.fabric.utilities.types import _PATH
from lightning.pytorch.plugins.io import TorchCheckpointIO
from typing_extensions import override

PARTIAL_SUFFIX = ".partial"
# ".<target name>.<writer pid>.<random>.partial[<target suffix>]", as partial_file names them.
_PARTIAL_NAME = re.compile(
    r"^\.(?P<target>.+)\.(?P<pid>\d+)\.\w+" + re.escape(PARTIAL_SUFFIX) + r"(?:\.\w+)?$"
)


def partial_file(target: Path, keep_suffix: bool = False) -> tuple[IO[bytes], Path]:
    """A new hidden file beside ``target`` to write it into before the rename, open for writing.

    Its name carries this process's pid (``.<target name>.<pid>.<random>.partial``), so that
    :func:`unilab_lit.ipc.reclaim.remove_dead_writers_files` tells a killed writer's leftover
    from a live one's. Its mode is a new file's usual one (``0o666`` less the umask), not
    ``mkstemp``'s private ``0o600``: the renamed file is readable as ``open()`` would have made it.

    Args:
        target: The file the partial one is renamed to once written.
        keep_suffix: End the name with ``target``'s suffix too (``....partial.pt2``), for a
            writer that goes by it (``torch.export.save`` warns of any name but ``*.pt2``).
    """
    suffix = PARTIAL_SUFFIX + (target.suffix if keep_suffix else "")
    descriptor, name = tempfile.mkstemp(
        dir=target.parent, prefix=f".{target.name}.{os.getpid()}.", suffix=suffix
    )
    os.fchmod(descriptor, 0o666 & ~_umask())
    return os.fdopen(descriptor, "wb"), Path(name)


def _umask() -> int:
    """The process's file-creation mask, read from ``/proc`` without changing it (Linux).

    Elsewhere reading it means setting it: it is set straight back, but a file another thread
    creates in between gets the mask 0o022.
    """
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def partial_file_pid(name: str) -> int | None:
    """The writer's pid in a :func:`partial_file` name, or ``None`` for any other name."""
    found = _PARTIAL_NAME.match(name)
    return None if found is None else int(found["pid"])


class CheckpointWriteError(RuntimeError):
    """A checkpoint could not be written; the message is one line naming the path."""


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's ``TorchCheckpointIO`` whose local writes are all-or-nothing.

    Lightning writes a local checkpoint through an fsspec transaction whose temporary file lives
    in the system temp directory; committing it moves the file across filesystems, which is a
    copy, so a full disk leaves a truncated, unloadable checkpoint under the final name. Here
    the checkpoint goes to a hidden temporary file in the target's directory (named with the
    writer's pid, :func:`partial_file`, so that the next start removes a
    killed writer's), is fsynced and
    renamed over the target (atomic within one filesystem), and the directory is fsynced. A
    failed write removes the temporary file and leaves every earlier checkpoint as it was.
    Remote paths (``s3://`` and the like) keep Lightning's own write.

    Raises:
        CheckpointWriteError: from :meth:`save_checkpoint`, when the disk is full or the
            directory cannot be written.
    """

    @override
    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: _PATH, storage_options: Any | None = None
    ) -> None:
        if storage_options is not None or not isinstance(get_filesystem(path), LocalFileSystem):
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        target = Path(path)
        # Serialised in memory first, as Lightning does: a write error then surfaces as the
        # OSError of a plain file write, not inside torch's zip writer.
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            file, partial = partial_file(target)
        except OSError as err:
            raise _write_error(target, err) from err
        try:
            with file:
                file.write(buffer.getbuffer())
                file.flush()
                os.fsync(file.fileno())
            os.replace(partial, target)
        except BaseException as err:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(partial)
            if isinstance(err, OSError):
                raise _write_error(target, err) from err
            raise
        _fsync_directory(target.parent)


def _write_error(target: Path, err: OSError) -> CheckpointWriteError:
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        free = shutil.disk_usage(target.parent).free
        return CheckpointWriteError(
            f"disk full while writing checkpoint {target} ({free} bytes free); "
            "the earlier checkpoints are intact",
        )
    return CheckpointWriteError(f"cannot write checkpoint {target}: {err.strerror or err}")


def _fsync_directory(directory: Path) -> None:
    # Makes the rename itself durable: without it a power cut can bring back the old entry.
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
