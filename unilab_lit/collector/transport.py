"""The shared blocks a collector writes its data into, as one object per data module."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from unilab_lit.collector.options import WriterSpec
    from unilab_lit.collector.process import CollectorProcess
    from unilab_lit.ipc.replay_storage import ReplayStorage


class _Block(Protocol):
    def unlink(self) -> None: ...


def unlink_blocks(*blocks: _Block | None) -> None:
    """Unlink every block that exists (``None`` stands for one never allocated)."""
    for block in blocks:
        if block is not None:
            block.unlink()


class Transport(ABC):
    """Sizes, allocation and release of a data module's data blocks (ring, replay, links).

    A data module builds its transport in ``setup("fit")``; the ``CollectorSession`` checks
    :meth:`host_blocks` and :meth:`device_blocks` against the memory budget, calls
    :meth:`create` before it starts the collector and :meth:`release` after it stopped it.
    """

    @property
    @abstractmethod
    def shrink_keys(self) -> tuple[str, ...]:
        """Config keys that shrink the allocation, quoted when the budget check refuses."""

    @abstractmethod
    def host_blocks(self) -> Mapping[str, int]:
        """Bytes of each shared block :meth:`create` will allocate."""

    def device_blocks(self) -> Mapping[str, int]:
        """Bytes of each batch slot the data set will allocate on the learner's device."""
        return {}

    @abstractmethod
    def create(self) -> WriterSpec:
        """Allocate the shared blocks; return the collector's writer recipe."""

    @abstractmethod
    def release(self) -> None:
        """Unlink the shared blocks (idempotent)."""

    def quiesce(
        self, collector: CollectorProcess, timeout_s: float, abandon: Callable[[], bool]
    ) -> None:
        """Wait until the collector has done the work it was released for, so that a snapshot
        of its state and the blocks' contents belong to the same moment; ``abandon()`` true
        ends the wait early (a hung collector at a stop request)."""
        # A collector that writes whole rollouts has none in flight at a step boundary.
        return

    @property
    def dropped(self) -> int:
        """Data the collector overwrote before the learner read it."""
        return 0

    @property
    def replay(self) -> ReplayStorage | None:
        """The replay storage, for transports that have one."""
        return None
