"""Futex waits on shared counters: a ring wakes a waiter in another process; no ring, a timeout."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import torch
from ipc_workers import wait_for_first_weights

from unilab_lit.ipc import SharedWeights
from unilab_lit.ipc.futex import CounterWatch

_SYS_FUTEX = "202"
# Bounds on how long a broken wake could hang the test; never a performance figure.
_HANG_S = 60.0


def _in_futex(task: Path) -> bool:
    return task.joinpath("syscall").read_text().split()[0] == _SYS_FUTEX


def _until(condition, what: str) -> None:
    deadline = time.monotonic() + _HANG_S
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def _wait_in_thread(watch: CounterWatch, seen: int, timeout_s: float) -> threading.Thread:
    thread = threading.Thread(target=watch.wait, args=(seen, timeout_s), daemon=True)
    thread.start()
    return thread


def test_publish_wakes_a_reader_blocked_in_another_process(spawn) -> None:
    weights = SharedWeights(8)
    child = spawn.Process(target=wait_for_first_weights, args=(weights,), daemon=True)
    child.start()
    try:
        main_thread = Path(f"/proc/{child.pid}/task/{child.pid}")
        _until(lambda: _in_futex(main_thread), "the reader never blocked")
        weights.publish(torch.ones(8))
        # The reader waits an hour per futex call: only the publish's wake ends it in time.
        child.join(_HANG_S)
        assert child.exitcode == 0
    finally:
        if child.exitcode is None:
            child.kill()
            child.join()
        weights.unlink()


def test_wait_without_a_ring_ends_at_its_timeout() -> None:
    counter = torch.zeros(1, dtype=torch.int64)
    watch = CounterWatch(counter.data_ptr())
    thread = _wait_in_thread(watch, watch.value, 0.05)
    thread.join(_HANG_S)
    assert not thread.is_alive()
    assert watch.value == 0


def test_wait_on_a_value_already_changed_returns_at_once() -> None:
    counter = torch.zeros(1, dtype=torch.int64)
    watch = CounterWatch(counter.data_ptr())
    seen = watch.value
    counter[0] = 1  # stored before the wait, not woken: the kernel's comparison catches it
    thread = _wait_in_thread(watch, seen, 3600.0)
    thread.join(_HANG_S)
    assert not thread.is_alive()


def test_wake_ends_a_wait_in_this_process() -> None:
    counter = torch.zeros(1, dtype=torch.int64)
    watch = CounterWatch(counter.data_ptr())
    thread = _wait_in_thread(watch, 0, 3600.0)
    task = Path(f"/proc/self/task/{thread.native_id}")
    _until(lambda: _in_futex(task), "the waiter never blocked")
    counter[0] = 1
    watch.wake()
    thread.join(_HANG_S)
    assert not thread.is_alive()
