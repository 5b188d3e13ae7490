"""Learner ↔ collector handshake of the off-policy pipeline: step releases and batch pack requests.

One shared block holds the counters, an index buffer and two packed host slots. Protocol (one
learner, one collector; every counter has a single writer):

- Steps. The learner releases tick ``k`` (``release_steps(k)``, ticks 1, 2, ...); the collector
  takes ``env_steps_per_sync`` vector steps for it, writes them into the replay and publishes
  ``steps_done = k``. It never steps ahead of the released tick.
- Packs. The learner requests one pack at a time: tick, target slot, and either a seed (the
  collector draws uniform indices at pack time) or explicit row indices, plus the replay write
  pointer the pack must wait for. The collector gathers ``sample_count`` rows into the slot and
  publishes the request's sequence number and tick; ``pack_done(tick)`` then returns True. A
  completed pack for another tick raises: the learner would train on the wrong batch.

The request fields are written before the request counter, and the slot before the done counter,
so on x86-64 (total store order) a reader that sees a counter also sees what it announces. Each
side blocks on the other's counter (a futex on the counter, see ``ipc/futex.py``) instead of
polling it; every counter store is followed by a wake.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from unilab_lit.ipc.block import BlockLayout, SharedStructure, ShmHandle
from unilab_lit.ipc.futex import CounterWatch
from unilab_lit.validation import check_arg

NUM_SLOTS = 2

# Indices into the int64 counter array.
_RELEASED = 0  # learner: newest tick whose steps may be taken
_STEPS_DONE = 1  # collector: newest tick whose steps are in the replay
_REQ_SEQ = 2  # learner: pack requests issued
_REQ_TICK = 3
_REQ_SLOT = 4
_REQ_HAS_SEED = 5  # 1: draw indices from REQ_SEED at pack time; 0: use the index buffer
_REQ_SEED = 6
_REQ_MIN_PTR = 7
_DONE_SEQ = 8  # collector: pack requests completed
_DONE_TICK = 9
_NUM_COUNTERS = 10


class PackRequest(NamedTuple):
    """A pack request as the collector reads it."""

    sequence: int
    tick: int
    slot: int
    seed: int | None
    min_write_ptr: int


def _layout(sample_count: int, width: int) -> BlockLayout:
    layout = BlockLayout()
    layout.add("counters", (_NUM_COUNTERS,), torch.int64)
    layout.add("indices", (sample_count,), torch.int64)
    layout.add("slots", (NUM_SLOTS, sample_count, width), torch.float32)
    return layout


@dataclass(frozen=True)
class LockstepLinkHandle:
    """Picklable handle: attach with :meth:`attach`."""

    block: ShmHandle
    sample_count: int
    width: int

    def attach(self) -> LockstepLink:
        """Map the link in this process (non-owner)."""
        return LockstepLink(self.sample_count, self.width, _attach=self.block)


class LockstepLink(SharedStructure):
    """Step releases and pack requests between an off-policy learner and its collector.

    Args:
        sample_count: Rows per packed batch (``batch_size * updates_per_step``), > 0.
        width: Floats per replay row (``ReplayStorage.width``), > 0.

    Raises:
        ValueError: a non-positive size.
    """

    def __init__(self, sample_count: int, width: int, _attach: ShmHandle | None = None) -> None:
        check_arg(sample_count > 0, "sample_count", sample_count, "> 0")
        check_arg(width > 0, "width", width, "> 0")
        self.sample_count = int(sample_count)
        self.width = int(width)
        views = self._map(_layout(self.sample_count, self.width), "lockstep", _attach)
        self._counters = views["counters"]
        self._indices = views["indices"]
        self._slots = views["slots"]
        base = self._counters.data_ptr()
        self._watch = {
            i: CounterWatch(base + 8 * i) for i in (_RELEASED, _STEPS_DONE, _REQ_SEQ, _DONE_SEQ)
        }

    @staticmethod
    def required_bytes(sample_count: int, width: int) -> int:
        """Shared-memory bytes of a link (counters, index buffer, both host slots)."""
        return _layout(sample_count, width).nbytes

    def handle(self) -> LockstepLinkHandle:
        """Picklable handle a spawn child uses to attach."""
        return LockstepLinkHandle(self._block.handle, self.sample_count, self.width)

    def slot(self, index: int) -> torch.Tensor:
        """Host slot ``index`` (0 or 1), ``[sample_count, width]``, shared memory."""
        return self._slots[index]

    # ---- learner side -------------------------------------------------------------------------
    @property
    def released(self) -> int:
        """Newest tick released to the collector (0 before the first release)."""
        return int(self._counters[_RELEASED])

    @property
    def steps_done(self) -> int:
        """Newest tick whose transitions are in the replay (0 before the first)."""
        return int(self._counters[_STEPS_DONE])

    def release_steps(self, tick: int) -> None:
        """Let the collector take the steps of ``tick``, which must be ``released + 1``.

        Raises:
            ValueError: ``tick`` skips or repeats a tick.
        """
        expected = self.released + 1
        if tick != expected:
            raise ValueError(f"release_steps: expected tick {expected}, got {tick}")
        self._counters[_RELEASED] = tick
        self._watch[_RELEASED].wake()

    def request_pack(
        self,
        tick: int,
        slot: int,
        *,
        seed: int | None = None,
        indices: torch.Tensor | None = None,
        min_write_ptr: int = 0,
    ) -> None:
        """Ask the collector to gather one batch for ``tick`` into host slot ``slot``.

        Args:
            tick: The learner iteration the batch is for; ``pack_done`` checks it.
            slot: Target host slot, 0 or 1 (not the one the learner is reading).
            seed: Draw ``sample_count`` uniform row indices over the rows stored at pack time
                from a CPU generator seeded with this (exclusive with ``indices``).
            indices: Explicit physical row indices, int64 ``[sample_count]``.
            min_write_ptr: Pack only once the replay's write pointer has reached this, e.g.
                after the rows of the tick just released.

        Raises:
            RuntimeError: the previous pack has not completed.
            ValueError: bad slot, both or neither of ``seed``/``indices``, wrong index shape.
        """
        if self.pack_pending():
            raise RuntimeError(
                f"request_pack(tick={tick}) while the pack for tick "
                f"{int(self._counters[_REQ_TICK])} is still pending"
            )
        check_arg(slot in range(NUM_SLOTS), "slot", slot, "0 or 1")
        if (seed is None) == (indices is None):
            raise ValueError("request_pack needs exactly one of seed= and indices=")
        if indices is not None:
            if indices.shape != (self.sample_count,):
                raise ValueError(
                    f"indices must have shape ({self.sample_count},), got {tuple(indices.shape)}"
                )
            self._indices.copy_(indices)
        counters = self._counters
        counters[_REQ_TICK] = tick
        counters[_REQ_SLOT] = slot
        counters[_REQ_HAS_SEED] = int(seed is not None)
        counters[_REQ_SEED] = 0 if seed is None else seed
        counters[_REQ_MIN_PTR] = min_write_ptr
        counters[_REQ_SEQ] = int(counters[_REQ_SEQ]) + 1
        self._watch[_REQ_SEQ].wake()

    def pack_pending(self) -> bool:
        """Whether a requested pack has not completed yet."""
        return int(self._counters[_DONE_SEQ]) < int(self._counters[_REQ_SEQ])

    def pack_done(self, tick: int) -> bool:
        """Whether the batch for ``tick`` is in its slot.

        Raises:
            RuntimeError: the last completed pack was for another tick, or none was requested.
        """
        if int(self._counters[_REQ_SEQ]) == 0:
            raise RuntimeError(f"pack_done(tick={tick}) before any request_pack")
        if self.pack_pending():
            return False
        done_tick = int(self._counters[_DONE_TICK])
        if done_tick != tick:
            raise RuntimeError(f"tick mismatch: waiting for tick {tick}, packed tick {done_tick}")
        return True

    def wait_pack(self, timeout_s: float) -> None:
        """Block until no pack is pending, at most ``timeout_s``; the caller re-checks."""
        done = self._watch[_DONE_SEQ]
        seen = done.value
        if seen < int(self._counters[_REQ_SEQ]):
            done.wait(seen, timeout_s)

    @property
    def steps_done_watch(self) -> CounterWatch:
        """:attr:`steps_done` as a futex to block on until the collector marks a tick done."""
        return self._watch[_STEPS_DONE]

    # ---- collector side -----------------------------------------------------------------------
    def mark_steps_done(self, tick: int) -> None:
        self._counters[_STEPS_DONE] = tick
        self._watch[_STEPS_DONE].wake()

    def wait_release(self, tick: int, timeout_s: float) -> None:
        """Block until a tick after ``tick`` is released, at most ``timeout_s``; the caller re-checks."""
        released = self._watch[_RELEASED]
        seen = released.value
        if seen <= tick:
            released.wait(seen, timeout_s)

    def wait_request(self, timeout_s: float) -> None:
        """Block until a pack is pending, at most ``timeout_s``; the caller re-checks."""
        requested = self._watch[_REQ_SEQ]
        seen = requested.value
        if int(self._counters[_DONE_SEQ]) >= seen:
            requested.wait(seen, timeout_s)

    def pending_request(self) -> PackRequest | None:
        """The request not yet completed, if any."""
        if not self.pack_pending():
            return None
        c = self._counters.tolist()
        seed = c[_REQ_SEED] if c[_REQ_HAS_SEED] else None
        return PackRequest(c[_REQ_SEQ], c[_REQ_TICK], c[_REQ_SLOT], seed, c[_REQ_MIN_PTR])

    def request_indices(self) -> torch.Tensor:
        """The explicit indices of the pending request (a shared view; copy before completing)."""
        return self._indices

    def mark_pack_done(self, request: PackRequest) -> None:
        self._counters[_DONE_TICK] = request.tick
        self._counters[_DONE_SEQ] = request.sequence
        self._watch[_DONE_SEQ].wake()
