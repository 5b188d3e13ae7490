"""Reclaims what a hard-killed run left behind: its /dev/shm blocks and collector temp directories.

SIGKILL of a whole process group (a scheduler, the OOM killer) runs no exit path: not ours, and
not Python's resource tracker either, which sits in the same group. The blocks stay in /dev/shm
(RAM) until reboot. Every block and every collector state directory carries its creator's pid
(``unilab_lit_<pid>_...``, ``unilab_lit_collector_<pid>_...``), so the next start can tell the
leftovers of dead processes from those of live runs, and removes only the former.

A pid is "dead" when no process with it exists, or only a zombie does. Processes in another pid
namespace that share this /dev/shm (containers with ``--ipc=host``) cannot be told apart from
dead ones; run each such container with its own /dev/shm.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

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
    for name in _dead_entries(shm_dir, SHM_PREFIX, reclaimed.pids):
        try:
            os.unlink(os.path.join(shm_dir, name))
        except FileNotFoundError:
            continue  # reclaimed by a concurrent start
        reclaimed.blocks.append(name)
    temp_root = temp_dir or tempfile.gettempdir()
    for name in _dead_entries(temp_root, COLLECTOR_DIR_PREFIX, reclaimed.pids):
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


def _dead_entries(directory: str, prefix: str, dead_pids: set[int]) -> list[str]:
    """Names in ``directory`` that start with ``prefix`` + a pid + ``_`` whose pid is dead."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    dead = []
    alive: dict[int, bool] = {}
    for name in names:
        if not name.startswith(prefix):
            continue
        pid_text = name[len(prefix) :].split("_", 1)[0]
        if not pid_text.isdigit():
            continue  # another naming scheme (e.g. an older version's): not attributable
        pid = int(pid_text)
        if pid not in alive:
            alive[pid] = pid_is_alive(pid)
        if not alive[pid]:
            dead.append(name)
            dead_pids.add(pid)
    return dead
