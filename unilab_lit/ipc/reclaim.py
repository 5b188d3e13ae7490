"""Reclaims what a hard-killed run left behind: /dev/shm blocks, collector temp dirs, partial files.

SIGKILL of a whole process group (a scheduler, the OOM killer) runs no exit path: not ours, and
not Python's resource tracker either, which sits in the same group. The blocks stay in /dev/shm
(RAM) until reboot. Every block and every collector state directory carries its creator's pid
(``unilab_lit_<pid>_...``, ``unilab_lit_collector_<pid>_...``), so the next start can tell the
leftovers of dead processes from those of live runs, and removes only the former. Checkpoints
and replay sidecars are written to hidden temporary files beside their target that carry the
writer's pid too (:func:`unilab_lit.checkpoint_io.partial_file`), which :func:`remove_dead_writers_files` removes.

A pid is "dead" when no process with it exists, or only a zombie does. Processes in another pid
namespace that share this /dev/shm (containers with ``--ipc=host``) cannot be told apart from
dead ones; run each such container with its own /dev/shm.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from unilab_lit.checkpoint_io import partial_file_pid
from unilab_lit.ipc.block import SHM_DIR, SHM_PREFIX

log = logging.getLogger(__name__)

# Prefix of the collector's state directory in the system temp directory; the creator's pid
# and an underscore follow.
COLLECTOR_DIR_PREFIX = "unilab_lit_collector_"


@dataclass
class Reclaimed:
    """What :func:`reclaim_dead_owners` removed."""

    blocks: list[str] = field(default_factory=list)
    directories: list[str] = field(default_factory=list)
    pids: set[int] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.blocks or self.directories)


def collector_dir_prefix() -> str:
    """Prefix for this process's collector state directory (``tempfile.mkdtemp(prefix=...)``)."""
    return f"{COLLECTOR_DIR_PREFIX}{os.getpid()}_"


def pid_is_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists and is not a zombie (in this pid namespace)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's live process
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state != "Z"


def reclaim_dead_owners(shm_dir: str = SHM_DIR, temp_dir: str | None = None) -> Reclaimed:
    """Remove our /dev/shm blocks and collector temp directories whose creating pid is dead.

    Args:
        shm_dir: Where the blocks live.
        temp_dir: Where the collector state directories live (``None``: the system's).

    Returns:
        What was removed; one INFO line is logged when anything was.
    """
    reclaimed = Reclaimed()
    for name in _dead_entries(shm_dir, _pid_after(SHM_PREFIX), reclaimed.pids):
        try:
            os.unlink(os.path.join(shm_dir, name))
        except FileNotFoundError:
            continue  # reclaimed by a concurrent start
        reclaimed.blocks.append(name)
    temp_root = temp_dir or tempfile.gettempdir()
    for name in _dead_entries(temp_root, _pid_after(COLLECTOR_DIR_PREFIX), reclaimed.pids):
        path = os.path.join(temp_root, name)
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
            reclaimed.directories.append(name)
    if reclaimed:
        log.info(
            "reclaimed %d shared-memory block(s) and %d collector temp dir(s) left by dead "
            "process(es) %s",
            len(reclaimed.blocks),
            len(reclaimed.directories),
            sorted(reclaimed.pids),
        )
    return reclaimed


def _dead_entries(
    directory: str | Path, pid_of: Callable[[str], int | None], dead_pids: set[int]
) -> list[str]:
    """Names in ``directory`` whose pid (``pid_of(name)``, ``None``: not ours) is dead."""
    try:
        names = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return []
    dead = []
    alive: dict[int, bool] = {}
    for name in names:
        pid = pid_of(name)
        if pid is None:
            continue
        if pid not in alive:
            alive[pid] = pid_is_alive(pid)
        if not alive[pid]:
            dead.append(name)
            dead_pids.add(pid)
    return dead


def _pid_after(prefix: str) -> Callable[[str], int | None]:
    """The pid in names ``<prefix><pid>_...``; another naming scheme (an older version's) is not
    attributable."""

    def pid_of(name: str) -> int | None:
        if not name.startswith(prefix):
            return None
        pid_text = name[len(prefix) :].split("_", 1)[0]
        return int(pid_text) if pid_text.isdigit() else None

    return pid_of


def remove_dead_writers_files(directory: Path) -> list[str]:
    """Remove the :func:`~unilab_lit.checkpoint_io.partial_file` files in ``directory`` whose writing pid is dead.

    Returns:
        The removed names; one INFO line is logged when there are any. A live writer's files
        (another run writing into the same directory) are never touched.
    """
    removed: list[str] = []
    pids: set[int] = set()
    for name in _dead_entries(directory, partial_file_pid, pids):
        try:
            os.unlink(directory / name)
        except FileNotFoundError:
            continue  # removed by a concurrent start
        removed.append(name)
    if removed:
        log.info(
            "removed %d partial file(s) in %s left by dead writer(s) %s: %s",
            len(removed),
            directory,
            sorted(pids),
            ", ".join(sorted(removed)),
        )
    return removed
