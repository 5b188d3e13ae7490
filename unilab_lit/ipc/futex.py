"""Blocking waits on the shared-memory counters themselves: Linux futexes beside the plain stores.

The seqlocks, rings and counters publish with plain stores (see ``versioned.py``); a process
waiting for one of them used to sleep-poll it, which burns a core's worth of wake-ups on a
2-core machine. A :class:`CounterWatch` lets the waiter sleep in the kernel instead: it notes
the counter's value, checks its condition, and blocks in ``FUTEX_WAIT`` while the counter still
holds that value; the writer stores as before and then calls :meth:`CounterWatch.wake`. The
kernel compares the value under its own lock, so a store that lands between the check and the
wait makes the wait return at once: no wake-up is lost. Every wait has a timeout, so a waiter
that also watches something else (a stop flag, the peer's liveness) looks at it regularly.

A futex word is 32 bits; on little-endian x86 these are the low half of the int64 counter, which
changes with every store of a new value (counters here are monotone and move by far less than
2**32 between two looks). Futexes on shared mappings are keyed by the mapped object, so both
processes block and wake on the same word whatever address it has in each.
"""

from __future__ import annotations

import ctypes
import errno
import math
import os
import platform

WAIT_SLICE_S = 0.02
"""Longest one blocking wait lasts before the waiter looks at what it also watches (stop flags,
heartbeats, the peer's liveness); a change of the watched counter ends it at once."""

_FUTEX_WAIT = 0
_FUTEX_WAKE = 1
_WAKE_ALL = 2**31 - 1
# syscall numbers of futex(2); the shared-memory transport runs on x86 only (block.py).
_SYS_FUTEX = {"x86_64": 202, "amd64": 202, "i386": 240, "i686": 240}


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def _syscall() -> ctypes._CFuncPtr:
    function = ctypes.CDLL(None, use_errno=True).syscall
    function.restype = ctypes.c_long
    function.argtypes = [
        ctypes.c_long,
        ctypes.c_void_p,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_int,
    ]
    return function


_SYSCALL = _syscall()
_NUMBER = _SYS_FUTEX.get(platform.machine().lower(), -1)


def futex_wait(address: int, expected: int, timeout_s: float) -> None:
    """Block while the 32-bit word at ``address`` equals ``expected``, at most ``timeout_s``.

    Returns on a wake, a changed word, the timeout or a signal; the caller re-checks its condition.

    Raises:
        OSError: an error other than those four (e.g. a bad address).
    """
    seconds = max(timeout_s, 0.0)
    timeout = _Timespec(int(seconds), int(math.fmod(seconds, 1.0) * 1e9))
    word = ctypes.c_int32(expected & 0xFFFFFFFF).value
    if _SYSCALL(_NUMBER, address, _FUTEX_WAIT, word, ctypes.addressof(timeout), None, 0) == -1:
        code = ctypes.get_errno()
        if code not in (errno.EAGAIN, errno.ETIMEDOUT, errno.EINTR):
            raise OSError(code, f"futex wait failed: {os.strerror(code)}")


def futex_wake(address: int) -> None:
    """Wake every thread of any process blocked in :func:`futex_wait` on ``address``."""
    _SYSCALL(_NUMBER, address, _FUTEX_WAKE, _WAKE_ALL, None, None, 0)


class CounterWatch:
    """Waits for a change of one int64 counter in shared memory (a numpy or torch element view).

    Waiter: ``seen = watch.value``, check the condition, then ``watch.wait(seen, timeout_s)``.
    Writer: store the counter, then ``watch.wake()``. Single writer per counter, as everywhere in
    the transport.

    Args:
        address: Address of the 8-byte aligned int64 counter in a shared mapping
            (``tensor[i:i+1].data_ptr()``); whoever passes it keeps the mapping alive.
    """

    def __init__(self, address: int) -> None:
        self._address = address
        self._counter = ctypes.c_int64.from_address(address)

    @property
    def value(self) -> int:
        """The counter now."""
        return int(self._counter.value)

    def wait(self, seen: int, timeout_s: float) -> None:
        """Block until the counter differs from ``seen``, a wake, or ``timeout_s``."""
        futex_wait(self._address, seen, timeout_s)

    def wake(self) -> None:
        """Wake every waiter; call after storing the new value."""
        futex_wake(self._address)
