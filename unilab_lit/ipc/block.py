"""Named POSIX shared-memory blocks: create (owner), attach (any process), typed tensor views."""

from __future__ import annotations

import math
import mmap
import os
import platform
import secrets
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from unilab_lit.ipc import ownership
from unilab_lit.validation import check_arg

SHM_DIR = "/dev/shm"
# Every segment we create starts with this prefix, then the creator's pid, so a test or an
# operator can find (and attribute) ours in /dev/shm.
SHM_PREFIX = "unilab_lit_"
# Views start on cache-line boundaries: keeps every dtype aligned and keeps the seqlock
# stamps off the cache lines the data copies touch.
ALIGNMENT = 64


# The seqlocks and rings publish with plain stores and read with plain loads: correct where the
# CPU keeps stores (and loads) in program order, as x86 does; weakly ordered CPUs (aarch64,
# POWER, RISC-V) would need barriers that numpy/torch stores do not issue.
_STRONGLY_ORDERED_CPUS = ("x86_64", "amd64", "i386", "i686")


class UnsupportedCPUError(RuntimeError):
    """This CPU's memory model is too weak for the shared-memory protocols; one line."""


def check_memory_ordering(machine: str | None = None) -> None:
    """Refuse a CPU whose memory ordering the seqlocks and rings do not handle.

    Raises:
        UnsupportedCPUError: on any CPU other than x86 / x86-64 (``machine`` defaults to
            ``platform.machine()``).
    """
    machine = platform.machine() if machine is None else machine
    if machine.lower() not in _STRONGLY_ORDERED_CPUS:
        raise UnsupportedCPUError(
            f"unilab_lit's shared-memory transport supports x86-64 CPUs only (it relies on "
            f"x86's store ordering); this CPU is {machine!r}"
        )


def _aligned(nbytes: int) -> int:
    return (nbytes + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def segment_name(tag: str) -> str:
    """A fresh segment name: prefix, creator pid, a sanitised tag and a random suffix."""
    safe_tag = "".join(ch if ch.isalnum() else "_" for ch in tag)[:24]
    return f"{SHM_PREFIX}{os.getpid()}_{safe_tag}_{secrets.token_hex(4)}"


def shm_free_bytes() -> int:
    """Bytes an unprivileged process can still allocate in /dev/shm."""
    stats = os.statvfs(SHM_DIR)
    return stats.f_bavail * stats.f_frsize


def list_segments(pid: int | None = None) -> list[str]:
    """Names of our segments currently in /dev/shm, optionally only those created by ``pid``."""
    prefix = SHM_PREFIX if pid is None else f"{SHM_PREFIX}{pid}_"
    return sorted(name for name in os.listdir(SHM_DIR) if name.startswith(prefix))


@dataclass(frozen=True)
class ShmHandle:
    """What a process needs to attach to a block: its name and size. Small and picklable."""

    name: str
    nbytes: int


class BlockLayout:
    """Named, aligned (shape, dtype) regions inside one block; both sides compute the same one."""

    def __init__(self) -> None:
        self._entries: dict[str, tuple[int, tuple[int, ...], torch.dtype]] = {}
        self._nbytes = 0

    def add(self, key: str, shape: Sequence[int], dtype: torch.dtype) -> None:
        """Reserve an aligned region for a tensor of ``shape`` and ``dtype`` under ``key``."""
        if key in self._entries:
            raise ValueError(f"layout key {key!r} is used twice")
        shape = tuple(int(d) for d in shape)
        check_arg(
            not any(d < 0 for d in shape), f"layout key {key!r}: shape", shape, "non-negative"
        )
        nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
        self._entries[key] = (self._nbytes, shape, dtype)
        self._nbytes += _aligned(nbytes)

    @property
    def nbytes(self) -> int:
        """Total bytes the block needs (at least one page-sized unit so mmap never sees 0)."""
        return max(self._nbytes, ALIGNMENT)

    def views(self, block: ShmBlock) -> dict[str, torch.Tensor]:
        """Tensor views of every region over ``block``'s memory (zero-copy)."""
        if block.nbytes < self.nbytes:
            raise ValueError(
                f"block {block.name} has {block.nbytes} bytes, layout needs {self.nbytes}"
            )
        return {
            key: block.view(offset, shape, dtype)
            for key, (offset, shape, dtype) in self._entries.items()
        }


class ShmBlock:
    """One named segment in /dev/shm, mapped into this process.

    The creating process is the owner and the only one that unlinks; attaching processes
    never unlink and never register the segment with Python's resource tracker (which
    would unlink it when the attaching child exits). The owner registers it with the
    tracker so that even a SIGKILLed owner leaves nothing behind once its children exit.

    The mapping stays alive as long as any tensor view of it does (views hold a reference
    to the mmap object), so ``close`` only drops this object's reference and can never
    leave a dangling view.
    """

    def __init__(self, name: str, nbytes: int, mapping: mmap.mmap, owner: bool) -> None:
        self.name = name
        """Segment name (without the /dev/shm directory)."""
        self.nbytes = nbytes
        """Size in bytes."""
        self.is_owner = owner
        """Whether this process created the block (and is the one that unlinks it)."""
        self._bytes: torch.Tensor | None = torch.frombuffer(mapping, dtype=torch.uint8)

    @classmethod
    def create(cls, nbytes: int, tag: str) -> ShmBlock:
        """Create and map a new zero-filled block; this process becomes its owner.

        Args:
            nbytes: size in bytes, > 0.
            tag: short label that becomes part of the segment name (e.g. ``"weights"``).

        Raises:
            UnsupportedCPUError: on a weakly ordered CPU (see :func:`check_memory_ordering`).
            ValueError: ``nbytes`` is not positive.
            OSError: /dev/shm cannot hold the block (the space is reserved up front, so a
                full /dev/shm fails here rather than with SIGBUS on a later write).
        """
        check_memory_ordering()
        check_arg(nbytes > 0, "nbytes", nbytes, "> 0")
        name = segment_name(tag)
        path = os.path.join(SHM_DIR, name)
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        ownership.track(name)
        try:
            os.posix_fallocate(fd, 0, nbytes)
            mapping = mmap.mmap(fd, nbytes)
        except OSError as exc:
            ownership.unlink(name)
            free = shm_free_bytes()
            raise OSError(
                exc.errno,
                f"cannot allocate {nbytes} bytes of shared memory for {tag!r} in {SHM_DIR} "
                f"({exc.strerror}); {free} bytes are free there",
            ) from exc
        finally:
            os.close(fd)
        block = cls(name, nbytes, mapping, owner=True)
        # An owner object that is garbage collected can no longer unlink: do it then.
        weakref.finalize(block, ownership.unlink, name)
        return block

    @classmethod
    def attach(cls, handle: ShmHandle) -> ShmBlock:
        """Map an existing block by handle; this process does not own it.

        Raises:
            FileNotFoundError: the block no longer exists (its owner unlinked it).
            ValueError: the segment is smaller than the handle says.
        """
        fd = os.open(os.path.join(SHM_DIR, handle.name), os.O_RDWR)
        try:
            size = os.fstat(fd).st_size
            if size < handle.nbytes:
                raise ValueError(
                    f"segment {handle.name} has {size} bytes, handle says {handle.nbytes}"
                )
            mapping = mmap.mmap(fd, handle.nbytes)
        finally:
            os.close(fd)
        return cls(handle.name, handle.nbytes, mapping, owner=False)

    @property
    def handle(self) -> ShmHandle:
        """Picklable handle another process passes to :meth:`attach`."""
        return ShmHandle(self.name, self.nbytes)

    def view(self, offset: int, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        """A tensor of ``shape`` and ``dtype`` over the bytes starting at ``offset`` (zero-copy)."""
        if self._bytes is None:
            raise RuntimeError(f"block {self.name} is closed in this process")
        numel = math.prod(shape)
        itemsize = torch.empty((), dtype=dtype).element_size()
        if offset % itemsize or offset < 0 or offset + numel * itemsize > self.nbytes:
            raise ValueError(
                f"view of {numel}×{dtype} at offset {offset} does not fit block {self.name} "
                f"of {self.nbytes} bytes (or is misaligned)"
            )
        return self._bytes[offset : offset + numel * itemsize].view(dtype).view(tuple(shape))

    def unlink(self) -> None:
        """Remove the name from /dev/shm (owner only; idempotent; a no-op for attachers).

        Memory stays mapped in every process that still holds views; it is freed when the
        last mapping goes away.
        """
        if self.is_owner:
            ownership.unlink(self.name)

    def close(self) -> None:
        """Drop this object's reference to the mapping (views handed out stay valid)."""
        self._bytes = None

    def __repr__(self) -> str:
        role = "owner" if self.is_owner else "attached"
        return f"ShmBlock({self.name!r}, nbytes={self.nbytes}, {role})"


class SharedStructure(ABC):
    """Base of the structures laid out in one :class:`ShmBlock`: create or attach, pickle, unlink.

    The owner creates the block (no handle); another process attaches through the subclass's
    :meth:`handle`. Pickling an instance sends that handle, so the receiving process attaches
    and never owns.
    """

    _block: ShmBlock

    def _map(
        self, layout: BlockLayout, tag: str, attach: ShmHandle | None
    ) -> dict[str, torch.Tensor]:
        """Create the block for ``layout`` (``attach`` is ``None``) or attach to it; its views."""
        self._block = (
            ShmBlock.create(layout.nbytes, tag) if attach is None else ShmBlock.attach(attach)
        )
        return layout.views(self._block)

    @abstractmethod
    def handle(self) -> Any:
        """Picklable handle (with an ``attach()`` method) a spawn child uses to attach."""

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[Any]]:
        handle = self.handle()
        return type(handle).attach, (handle,)

    def unlink(self) -> None:
        """Remove the block from /dev/shm (owner only; idempotent)."""
        self._block.unlink()
