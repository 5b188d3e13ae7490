"""Collector → learner metrics channel: bounded, never blocks the sender, drops the oldest when full.

A single-producer ring of pickled messages in anonymous shared memory; a reader that waits for a
message blocks on the write counter (``sends``, a futex) that every send wakes. The sender never waits for
the reader: when the reader falls behind by more than ``capacity`` messages the oldest ones are
overwritten. Every slot carries a sequence stamp (odd while being written), so the reader detects an
overwritten or half-written slot, skips it and counts it as dropped instead of unpickling garbage.
"""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import pickle
import threading
from multiprocessing.context import SpawnContext
from typing import Any

from unilab_lit.ipc.futex import CounterWatch
from unilab_lit.validation import check_arg

# Message kinds (value of the "kind" key).
EPISODES = "episodes"
TIMING = "timing"

_I64 = 8
_HEADER = _I64  # total messages ever written
_SLOT_HEADER = 2 * _I64  # sequence stamp, payload length


class MetricsChannel:
    """Bounded drop-oldest message channel from the collector (sender) to the learner (reader).

    Messages are dicts with a ``"kind"`` key (:data:`EPISODES`, :data:`TIMING`); values are
    anything picklable (numpy arrays, numbers, strings). The channel travels to the child as a
    ``Process`` argument (spawn time only).

    Args:
        capacity: Messages the ring holds before the oldest is dropped (>= 1).
        slot_bytes: Largest pickled message in bytes (>= 256).
        ctx: The spawn context the collector process is created from.

    Raises:
        ValueError: if ``capacity`` or ``slot_bytes`` is out of range.
    """

    def __init__(
        self, capacity: int = 64, slot_bytes: int = 64 * 1024, ctx: SpawnContext | None = None
    ) -> None:
        check_arg(capacity >= 1, "capacity", capacity, ">= 1")
        check_arg(slot_bytes >= 256, "slot_bytes", slot_bytes, ">= 256")
        ctx = ctx or mp.get_context("spawn")
        self.capacity = capacity
        self.slot_bytes = slot_bytes
        self._stride = _SLOT_HEADER + slot_bytes
        self._raw = ctx.RawArray(ctypes.c_uint8, _HEADER + capacity * self._stride)
        self._attach()
        self._read = 0
        self.dropped = 0

    def _attach(self) -> None:
        self._buf = memoryview(self._raw).cast("B")
        self._count = self._buf[:_HEADER].cast("q")
        self._send_lock = threading.Lock()
        # Its address differs per process: rebuilt on attach, never pickled.
        self.sends = CounterWatch(ctypes.addressof(self._raw))

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for key in ("_buf", "_count", "_send_lock", "sends"):
            del state[key]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._attach()

    def _slot(self, index: int) -> tuple[memoryview, memoryview]:
        start = _HEADER + (index % self.capacity) * self._stride
        header = self._buf[start : start + _SLOT_HEADER].cast("q")
        payload = self._buf[start + _SLOT_HEADER : start + self._stride]
        return header, payload

    # ---- collector side -----------------------------------------------------------------------
    def send(self, message: dict[str, Any]) -> None:
        """Append ``message``; overwrites the oldest unread one when the ring is full. Never blocks.

        Raises:
            ValueError: if the pickled message is larger than ``slot_bytes``.
        """
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        if len(data) > self.slot_bytes:
            raise ValueError(
                f"metrics message of kind {message.get('kind')!r} pickles to {len(data)} bytes, "
                f"more than slot_bytes={self.slot_bytes}"
            )
        # Threads of the collector (loop and pack service) may both send; the lock is process-local.
        with self._send_lock:
            index = self._count[0]
            header, payload = self._slot(index)
            header[0] = 2 * index + 1
            header[1] = len(data)
            payload[: len(data)] = data
            header[0] = 2 * index + 2
            self._count[0] = index + 1
            self.sends.wake()

    # ---- learner side -------------------------------------------------------------------------
    def drain(self) -> list[dict[str, Any]]:
        """Every message sent since the last drain that was not overwritten, oldest first."""
        written = self._count[0]
        if written - self._read > self.capacity:
            self.dropped += written - self._read - self.capacity
            self._read = written - self.capacity
        out = []
        for index in range(self._read, written):
            header, payload = self._slot(index)
            stamp = header[0]
            length = header[1]
            data = bytes(payload[:length]) if stamp == 2 * index + 2 else b""
            # A changed stamp means the sender lapped us while we copied: the bytes are mixed.
            if not data or header[0] != stamp:
                self.dropped += 1
                continue
            out.append(pickle.loads(data))
        self._read = written
        return out
