"""Shared control block between the learner and its collector: state, stop flag, heartbeat, error text.

The block is a ``ctypes`` structure in anonymous shared memory (``multiprocessing`` heap), handed to
the child at spawn time. It has no name in ``/dev/shm`` and needs no semaphore, so nothing can leak
on any exit path, and reads/writes never block: a crashed or hung peer cannot wedge the other side.
"""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import time
from multiprocessing.context import SpawnContext

from unilab_lit.ipc.futex import CounterWatch

STARTING = 0
READY = 1
STOPPED = 2
FAILED = 3

_STATE_NAMES = {STARTING: "starting", READY: "ready", STOPPED: "stopped", FAILED: "failed"}

# What a ready collector is doing (diagnostics for timeouts and stalls).
BUILDING = 0
WAITING_FOR_FIRST_PUBLISH = 1
WAITING_FOR_LEARNER = 2
STEPPING = 3

_PHASE_NAMES = {
    BUILDING: "building env and actor",
    WAITING_FOR_FIRST_PUBLISH: "waiting for the learner's first publish of weights and statistics",
    WAITING_FOR_LEARNER: "waiting for the learner",
    STEPPING: "stepping the env",
}

# The tail of a traceback names the failing line; 64 KiB keeps even deep chained tracebacks whole.
ERROR_CAPACITY = 64 * 1024
_TRUNCATION_MARK = b"...[traceback truncated]...\n"


class _Block(ctypes.Structure):
    _fields_ = [
        ("state", ctypes.c_int64),
        ("stop", ctypes.c_int64),
        ("trace", ctypes.c_int64),
        ("snapshot_request", ctypes.c_int64),
        ("snapshot_done", ctypes.c_int64),
        ("restore", ctypes.c_int64),
        ("phase", ctypes.c_int64),
        ("heartbeat", ctypes.c_uint64),
        ("heartbeat_time", ctypes.c_double),
        ("spawn_s", ctypes.c_double),
        ("import_s", ctypes.c_double),
        ("build_s", ctypes.c_double),
        ("error_len", ctypes.c_int64),
        ("error", ctypes.c_char * ERROR_CAPACITY),
    ]


class ControlBlock:
    """Learner ↔ collector control state; every operation is a plain shared-memory read or write.

    The learner creates it and passes it to the child as a ``Process`` argument (it can only travel
    at spawn time). Single writer per field: the learner writes ``stop``, ``trace``,
    ``snapshot_request`` and ``restore``; the collector writes everything else.

    Args:
        ctx: The spawn context the collector process is created from.
    """

    def __init__(self, ctx: SpawnContext | None = None) -> None:
        ctx = ctx or mp.get_context("spawn")
        self._block = ctx.RawValue(_Block)

    # ---- learner side -------------------------------------------------------------------------
    def request_stop(self) -> None:
        """Ask the collector loop to finish its current step and exit cleanly."""
        self._block.stop = 1

    def request_trace(self, enabled: bool) -> None:
        """Ask the collector to record trace spans (``True``) or to ship its last batch and stop
        recording (``False``). A run-time switch rather than a config field: the Tracing callback
        is set up after the data module has started the collector."""
        self._block.trace = int(enabled)

    def request_snapshot(self) -> int:
        """Ask the collector to write its state file (see ``CollectorConfig.state_dir``) at its
        next step boundary; returns the request number :attr:`snapshot_done` reaches then."""
        self._block.snapshot_request += 1
        return int(self._block.snapshot_request)

    def request_restore(self) -> None:
        """Tell the collector that a restore file waits; it is read before the first reset, so
        this must come before the first weights publish."""
        self._block.restore = 1

    @property
    def snapshot_done(self) -> int:
        """Number of the last snapshot request the collector has answered."""
        return int(self._block.snapshot_done)

    def state_watch(self) -> CounterWatch:
        """:attr:`state` as a futex to block on until the collector is ready, fails or stops."""
        return CounterWatch(ctypes.addressof(self._block) + _Block.state.offset)

    def snapshot_watch(self) -> CounterWatch:
        """:attr:`snapshot_done` as a futex to block on (its address is this process's)."""
        return CounterWatch(ctypes.addressof(self._block) + _Block.snapshot_done.offset)

    @property
    def state(self) -> int:
        return int(self._block.state)

    @property
    def state_name(self) -> str:
        return _STATE_NAMES[self.state]

    @property
    def phase_name(self) -> str:
        """What the collector is doing, e.g. "waiting for the learner"."""
        return _PHASE_NAMES[int(self._block.phase)]

    @property
    def heartbeat(self) -> int:
        """Number of loop iterations (steps or idle polls) the collector has completed."""
        return int(self._block.heartbeat)

    def seconds_since_heartbeat(self) -> float:
        """Seconds since the collector last beat; ``time.monotonic`` is system-wide on Linux."""
        return time.monotonic() - float(self._block.heartbeat_time)

    def startup_timings(self) -> dict[str, float]:
        """Start-up phases in seconds: spawn (interpreter + re-import of the learner's main
        script), imports (config unpickling, torch, policy module), env/actor construction."""
        return {
            "spawn_s": float(self._block.spawn_s),
            "import_s": float(self._block.import_s),
            "build_s": float(self._block.build_s),
        }

    def error_text(self) -> str:
        n = int(self._block.error_len)
        raw = ctypes.string_at(ctypes.addressof(self._block) + _Block.error.offset, n)
        return raw.decode("utf-8", errors="replace")

    # ---- collector side -----------------------------------------------------------------------
    @property
    def stop_requested(self) -> bool:
        return bool(self._block.stop)

    @property
    def trace_requested(self) -> bool:
        return bool(self._block.trace)

    @property
    def snapshot_request(self) -> int:
        return int(self._block.snapshot_request)

    @property
    def restore_requested(self) -> bool:
        return bool(self._block.restore)

    def mark_snapshot_done(self, request: int) -> None:
        self._block.snapshot_done = request
        self.snapshot_watch().wake()

    def beat(self) -> None:
        """Record progress; the learner reports a stall when beats stop for ``stall_timeout_s``."""
        self._block.heartbeat_time = time.monotonic()
        self._block.heartbeat += 1

    def set_phase(self, phase: int) -> None:
        self._block.phase = phase

    def mark_ready(self, spawn_s: float, import_s: float, build_s: float) -> None:
        self._block.spawn_s = spawn_s
        self._block.import_s = import_s
        self._block.build_s = build_s
        self.beat()
        self._set_state(READY)

    def mark_stopped(self) -> None:
        self._set_state(STOPPED)

    def mark_failed(self, text: str) -> None:
        """Store the traceback (its tail if too long) and flip the state; the text is written first."""
        data = text.encode("utf-8", errors="replace")
        if len(data) > ERROR_CAPACITY:
            keep = ERROR_CAPACITY - len(_TRUNCATION_MARK)
            data = _TRUNCATION_MARK + data[-keep:]
        ctypes.memmove(ctypes.addressof(self._block) + _Block.error.offset, data, len(data))
        self._block.error_len = len(data)
        self._set_state(FAILED)

    def _set_state(self, state: int) -> None:
        self._block.state = state
        self.state_watch().wake()
