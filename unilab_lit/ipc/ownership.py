"""Who unlinks what: the registry of segments this process created, and its exit-path safety nets.

Exit paths covered for the owning process:
- normal end and unhandled exceptions (including Ctrl-C's KeyboardInterrupt): ``atexit``;
- an owner object garbage collected: a ``weakref.finalize`` per block (see ``block.py``);
- SIGTERM: a handler that unlinks, then defers to whatever handler was installed before (or
  the default action: die by SIGTERM); while a graceful stop is in charge of SIGTERM
  (:func:`set_graceful_sigterm`, e.g. ``unilab_lit.callbacks.InterruptGuard`` during training) it
  does nothing, and the stop's own exit path unlinks;
- SIGKILL: Python's resource tracker, with which every owned segment is registered,
  unlinks what is left once every process holding the tracker's pipe has exited.
Attaching processes (the collector) own nothing, so a crashed collector leaves nothing.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import signal
import threading
from multiprocessing import resource_tracker
from types import FrameType

log = logging.getLogger(__name__)

_SHM_DIR = "/dev/shm"
# The tracker's "shared_memory" cleanup calls shm_unlink, which takes the POSIX name ("/x").
_TRACKER_TYPE = "shared_memory"

_lock = threading.Lock()
# Segment name -> pid of the creating process; a forked child inherits this dict, and the
# pid check keeps it from unlinking its parent's segments.
_owned: dict[str, int] = {}
_previous_sigterm: signal.Handlers | object | None = None
_sigterm_installed = False
_graceful_sigterm = False


def track(name: str) -> None:
    """Record that this process created ``name`` and is responsible for unlinking it."""
    with _lock:
        _owned[name] = os.getpid()
    resource_tracker.register("/" + name, _TRACKER_TYPE)
    _install_sigterm_cleanup()


def unlink(name: str) -> None:
    """Unlink an owned segment; idempotent, and a no-op for names this process did not create."""
    with _lock:
        pid = _owned.pop(name, None)
    if pid != os.getpid():
        return
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(_SHM_DIR, name))
    resource_tracker.unregister("/" + name, _TRACKER_TYPE)


def owned_names() -> list[str]:
    """Names of the segments this process created and has not unlinked yet."""
    with _lock:
        return sorted(name for name, pid in _owned.items() if pid == os.getpid())


def unlink_all_owned() -> int:
    """Unlink every segment this process still owns; returns how many were unlinked."""
    names = owned_names()
    for name in names:
        unlink(name)
    if names:
        log.debug("unlinked %d shared-memory segments: %s", len(names), names)
    return len(names)


atexit.register(unlink_all_owned)


def set_graceful_sigterm(enabled: bool) -> None:
    """Tell the SIGTERM safety net whether a graceful stop is in charge of SIGTERM.

    Lightning's Trainer registers its SIGTERM handler after our blocks exist and calls ours
    after its own, so ours would unlink and kill the process before the graceful stop (finish
    the iteration, checkpoint, stop the collector) could run. While enabled, ours does nothing.
    """
    global _graceful_sigterm
    _graceful_sigterm = enabled


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    if _graceful_sigterm:
        return
    unlink_all_owned()
    previous = _previous_sigterm
    if callable(previous):
        previous(signum, frame)
    elif previous is signal.SIG_IGN:
        return
    else:
        # Default action: die by SIGTERM so the exit status stays truthful.
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


def _install_sigterm_cleanup() -> None:
    """Chain our cleanup in front of the current SIGTERM handler (main thread only, once)."""
    global _previous_sigterm, _sigterm_installed
    if _sigterm_installed or threading.current_thread() is not threading.main_thread():
        return
    _previous_sigterm = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, _on_sigterm)
    _sigterm_installed = True
