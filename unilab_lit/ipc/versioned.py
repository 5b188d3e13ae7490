"""A versioned flat array in shared memory that readers never see half-written.

Protocol (one publisher, any number of readers): two data buffers, each with a stamp.
A stamp is the version the buffer holds when complete, or ``WRITING`` while the publisher
fills it. The publisher always overwrites the buffer holding the *older* version, so the
newest complete version stays readable during the whole next publish. A reader picks the
buffer with the highest stamp, copies it, and re-reads the stamp: if it changed, the
publisher has started overwriting that buffer mid-copy and the reader retries. Versions
are strictly increasing, so an unchanged stamp proves nothing was written in between.
A reader waiting for a new version blocks on the stamp the next publish writes (a futex, see
``futex.py``); the publisher wakes it after the final stamp store.

Ordering relies on x86-64 total store order (stores become visible in program order and
loads are not reordered with loads); each stamp store and data copy is a separate call
into torch, so the compiler cannot reorder them either.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from unilab_lit.ipc.block import BlockLayout, SharedStructure, ShmBlock, ShmHandle
from unilab_lit.ipc.futex import CounterWatch
from unilab_lit.validation import check_arg

NOT_PUBLISHED = -1
"""Version reported before the first publish; readers start from it."""
WRITING = -2


def _layout(numel: int, dtype: torch.dtype) -> BlockLayout:
    layout = BlockLayout()
    layout.add("stamps", (2,), torch.int64)
    layout.add("data", (2, numel), dtype)
    return layout


@dataclass(frozen=True)
class VersionedBufferHandle:
    """Picklable handle: attach with :meth:`attach`."""

    block: ShmHandle
    numel: int
    dtype: torch.dtype

    def attach(self) -> VersionedBuffer:
        """Map the buffer in this process (non-owner)."""
        return VersionedBuffer(self.numel, self.dtype, _attach=self.block)


class VersionedBuffer(SharedStructure):
    """Double-buffered, seqlock-stamped flat array with a monotone version.

    Args:
        numel: number of elements, > 0.
        dtype: element type.
        tag: label in the segment name.

    Raises:
        ValueError: ``numel`` is not positive.
    """

    def __init__(
        self,
        numel: int,
        dtype: torch.dtype,
        tag: str = "versioned",
        _attach: ShmHandle | None = None,
    ) -> None:
        check_arg(numel > 0, "numel", numel, "> 0")
        self.numel = int(numel)
        """Elements per version."""
        self._dtype = dtype
        views = self._map(_layout(self.numel, dtype), tag, _attach)
        if _attach is None:
            views["stamps"].fill_(NOT_PUBLISHED)
        # Control words go through numpy: a scalar load/store there costs ~0.1 µs against
        # several µs for torch indexing, and it is still one aligned 8-byte access.
        self._stamps = views["stamps"].numpy()
        self._watches = [CounterWatch(int(self._stamps.ctypes.data) + 8 * i) for i in range(2)]
        self._data = views["data"]
        self.retries = 0
        """Reads in this process restarted because the publisher overwrote the buffer mid-copy."""

    @staticmethod
    def required_bytes(numel: int, dtype: torch.dtype) -> int:
        """Shared-memory bytes a buffer of ``numel`` elements of ``dtype`` takes."""
        return _layout(numel, dtype).nbytes

    @property
    def block(self) -> ShmBlock:
        """The underlying shared-memory block."""
        return self._block

    @property
    def version(self) -> int:
        """Newest complete version, or ``NOT_PUBLISHED``."""
        return max(max(self._stamps.tolist()), NOT_PUBLISHED)

    def handle(self) -> VersionedBufferHandle:
        """Picklable handle a spawn child uses to attach."""
        return VersionedBufferHandle(self._block.handle, self.numel, self._dtype)

    def publish(self, fill: Callable[[torch.Tensor], None], version: int | None = None) -> int:
        """Publish a new version whose contents ``fill`` writes into the given flat buffer.

        Args:
            fill: writes all ``numel`` elements into the 1-D tensor it receives.
            version: explicit version (e.g. the learner's step); default: newest + 1 (0 first).

        Returns:
            The published version.

        Raises:
            ValueError: ``version`` is not greater than the newest published version.
        """
        newest = self.version
        if version is None:
            version = newest + 1
        elif version <= newest:
            raise ValueError(
                f"version must increase: got {version}, the newest published version is {newest}"
            )
        stamps = self._stamps.tolist()
        target = 0 if stamps[0] <= stamps[1] else 1
        self._stamps[target] = WRITING
        fill(self._data[target])
        self._stamps[target] = version
        self._watches[target].wake()
        return version

    def wait_newer(self, last_version: int, timeout_s: float) -> None:
        """Block until a version newer than ``last_version`` is complete, at most ``timeout_s``;
        the caller re-checks (e.g. with :meth:`read_if_newer`)."""
        stamps = self._stamps.tolist()
        if max(stamps) > last_version:
            return
        # The next publish writes the buffer with the older stamp.
        target = 0 if stamps[0] <= stamps[1] else 1
        self._watches[target].wait(stamps[target], timeout_s)

    def read_if_newer(self, last_version: int, read: Callable[[torch.Tensor], None]) -> int | None:
        """If a version newer than ``last_version`` exists, pass a consistent copy source to ``read``.

        ``read`` receives the 1-D shared buffer of the newest version and must copy out of
        it; it may be called again (after a detected overwrite) until one call saw a
        single version throughout, so whatever it writes ends up consistent.

        Returns:
            The version read, or None when nothing newer than ``last_version`` exists.
        """
        while True:
            stamps = self._stamps.tolist()
            source = 0 if stamps[0] >= stamps[1] else 1
            version = stamps[source]
            if version <= last_version or version < 0:
                return None
            read(self._data[source])
            if int(self._stamps[source]) == version:
                return version
            self.retries += 1


class VersionedRecord(SharedStructure):
    """Base of a typed record kept in one :class:`VersionedBuffer` (weights, statistics)."""

    _buffer: VersionedBuffer

    def _open(
        self, numel: int, dtype: torch.dtype, tag: str, attach: VersionedBufferHandle | None
    ) -> None:
        """Create the buffer (``attach`` is ``None``) or attach to the owner's."""
        self._buffer = VersionedBuffer(numel, dtype, tag=tag) if attach is None else attach.attach()
        self._block = self._buffer.block

    @property
    def version(self) -> int:
        """Newest published version, or ``NOT_PUBLISHED``."""
        return self._buffer.version

    @property
    def retries(self) -> int:
        """Reads in this process restarted because a publish overwrote the source mid-copy."""
        return self._buffer.retries

    def wait_newer(self, last_version: int, timeout_s: float) -> None:
        """Block until a version newer than ``last_version`` is published, at most ``timeout_s``."""
        self._buffer.wait_newer(last_version, timeout_s)
