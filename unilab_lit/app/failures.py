"""One line for each known cause a run dies of; the full traceback goes to a file in the run directory.

:func:`exit_line` is the CLI's mapping from the error that ended a run to the one line it exits
with (status 1): errors whose own message is that line (a memory plan, a checkpoint write or a
checkpoint that does not fit, the CPU, the replay sidecar, a model for another data module), a
full disk, then :func:`cause_line`'s causes. :func:`config_error_line` does the same for a
constructor's validation error.

A collector that was killed, hung or raised, and a DDP rank that died, reach the learner as
exceptions whose traceback (Lightning's loops, the collector's own, gloo's) buries the cause in
its last line. :func:`cause_line` turns them into one line that names the cause and the file
that keeps the whole traceback; ``UNILAB_LIT_DEBUG=1`` shows the traceback instead
(``docs/failures.md``).
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import signal
import subprocess
import tempfile
import traceback
from pathlib import Path
from typing import Any

from unilab_lit import distributed
from unilab_lit.app.resume import CheckpointMismatchError
from unilab_lit.checkpoint_io import CheckpointWriteError
from unilab_lit.collector.process import CollectorError
from unilab_lit.config_errors import PREFIX, with_key_path
from unilab_lit.data.base import ModelDataMismatchError
from unilab_lit.envs.robots.assets import RobotModelError
from unilab_lit.ipc.block import UnsupportedCPUError
from unilab_lit.ipc.budget import MemoryBudgetError
from unilab_lit.ipc.replay_sidecar import ReplaySidecarError

DEBUG_ENV = "UNILAB_LIT_DEBUG"
# gloo's and NCCL's words for a peer that went away.
_PEER_GONE = re.compile(
    r"Connection (?:closed|reset) by peer|remote worker crash|NCCL.*(?:abort|remote)"
)
# How long a dead peer rank may take to be reaped once its socket closed.
_REAP_S = 2.0
# Errors whose own message is the line a run ends with.
_OWN_LINE = (
    MemoryBudgetError,
    CheckpointWriteError,
    CheckpointMismatchError,
    UnsupportedCPUError,
    ReplaySidecarError,
    ModelDataMismatchError,
)


def exit_line(err: Exception, trainer: Any | None) -> str | None:
    """The one line a run that raised ``err`` exits with, or ``None`` for an unknown cause.

    Args:
        err: The exception that ended the run.
        trainer: The run's trainer, if it exists (its loggers' directories name a full disk's
            files and keep :func:`cause_line`'s traceback).

    Returns:
        ``error: <message>`` for the errors that carry their line and for a full disk, else
        :func:`cause_line`'s line; ``None`` (the caller lets the traceback through) for another
        ``OSError`` and for a cause :func:`cause_line` does not know.
    """
    if isinstance(err, _OWN_LINE):
        return f"error: {err}"
    if isinstance(err, OSError):
        if err.errno not in (errno.ENOSPC, errno.EDQUOT):
            return None
        return f"error: {_disk_full(err, trainer)}"
    return cause_line(err, trainer)


def config_error_line(err: BaseException, config: Any) -> str:
    """The one line for a constructor's validation error, which jsonargparse wraps in its report.

    Args:
        err: The error ``instantiate_classes`` raised; its root cause is the constructor's.
        config: The parsed config of the subcommand (a ``Namespace``), for the key path of the
            argument the message names.

    Returns:
        ``error: <message>`` for a robot model that is not there (the config is fine; the
        message says how to get the files), else the config-error prefix, the message and the
        argument's key path.
    """
    if isinstance(_root_error(err), RobotModelError):
        return f"error: {_root_message(err)}"
    key_paths = config.as_dict() if hasattr(config, "as_dict") else {}
    return f"{PREFIX}{with_key_path(_root_message(err), key_paths)}"


def cause_line(err: BaseException, trainer: Any | None) -> str | None:
    """``error: <cause> (full traceback in <file>)`` for an error of a known cause, else ``None``.

    Args:
        err: The exception that ended the run.
        trainer: The run's trainer (its log directory keeps the traceback), if it exists.

    Returns:
        ``None`` when the cause is not one of these, or when ``$UNILAB_LIT_DEBUG`` is ``1``
        (the caller then lets the traceback through).
    """
    if os.environ.get(DEBUG_ENV) == "1":
        return None
    cause = _collector_cause(err) or _dead_rank_cause(err, trainer)
    if cause is None:
        return None
    return f"error: {cause} (full traceback in {_save_traceback(err, trainer)})"


def _disk_full(err: OSError, trainer: Any | None) -> str:
    """One line for a full disk outside the checkpoint writes (those name their file already):
    the file if the error names one, else the loggers' directories (TensorBoard's writer thread
    reports a failed write without its file)."""
    if err.filename is not None:
        where = [str(err.filename)]
    else:
        loggers = [] if trainer is None else trainer.loggers
        where = [str(lg.log_dir) for lg in loggers if getattr(lg, "log_dir", None) is not None]
    if not where:
        return f"disk full: {err.strerror or err}"
    existing = Path(where[0])
    while not existing.exists():
        existing = existing.parent
    free = shutil.disk_usage(existing).free
    return f"disk full while writing {', '.join(where)} ({free} bytes free): {err.strerror or err}"


def _root_error(err: BaseException) -> BaseException:
    while err.__cause__ is not None:
        err = err.__cause__
    return err


def _root_message(err: BaseException) -> str:
    err = _root_error(err)
    if isinstance(err, KeyError) and err.args:
        return str(err.args[0])
    return str(err)


def _collector_cause(err: BaseException) -> str | None:
    found = _in_chain(err, CollectorError)
    if found is None:
        return None
    first, _, child_traceback = str(found).partition("\n")
    if not child_traceback:
        return first  # killed, exited or stuck: one line already
    # The child's traceback ends with its exception line: the cause.
    last = [line for line in child_traceback.splitlines() if line.strip()][-1].strip()
    return f"{first.removesuffix(':')}: {last}"


def _dead_rank_cause(err: BaseException, trainer: Any | None) -> str | None:
    # A single-process run has no peer rank: its "connection reset" came from something else
    # (a logger's server, a network file system), and its traceback says what.
    ranks = getattr(trainer, "world_size", None)
    if (distributed.world_size() if ranks is None else ranks) < 2:
        return None
    found = next((e for e in _chain(err) if _PEER_GONE.search(str(e))), None)
    if found is None:
        return None
    rank = getattr(trainer, "global_rank", None)
    rank = distributed.global_rank() if rank is None else rank
    dead = _dead_local_ranks(trainer)
    _stop_watching_ended_ranks(trainer)
    if dead:
        return "; ".join(dead) + f", so rank {rank} stopped"
    return (
        f"another DDP rank closed its connection to rank {rank} (it died or was killed; its own "
        "output or the scheduler's log says why)"
    )


def _dead_local_ranks(trainer: Any | None) -> list[str]:
    """``DDP rank R (pid P) was killed by SIGKILL`` for each rank this process launched that died.

    Lightning's script launcher starts local ranks 1.. as children of local rank 0.
    """
    procs = _launched_ranks(trainer)
    node = getattr(trainer, "node_rank", 0) * getattr(trainer, "num_devices", 1)
    dead = []
    for local_rank, proc in enumerate(procs, start=1):
        try:
            code = proc.wait(timeout=_REAP_S)
        except subprocess.TimeoutExpired:
            continue
        dead.append(f"DDP rank {node + local_rank} (pid {proc.pid}) {_how_it_ended(code)}")
    return dead


def _launched_ranks(trainer: Any | None) -> list[subprocess.Popen]:
    """The launcher's own list of the local ranks 1.. it started (empty without one)."""
    launcher = getattr(getattr(trainer, "strategy", None), "launcher", None)
    return getattr(launcher, "procs", None) or []


def _stop_watching_ended_ranks(trainer: Any | None) -> None:
    """Take the local ranks that have ended off the list Lightning's launcher watches.

    A thread of the launcher SIGKILLs every child and rank 0 itself within 5 s of finding one
    ended with a non-zero status. Rank 0 ends the run itself once it has named the dead rank
    (the line, then its clean-up); that kill would cut the clean-up short and turn the exit
    status 1 into -9.
    """
    procs = _launched_ranks(trainer)
    procs[:] = [proc for proc in procs if proc.returncode is None]


def _how_it_ended(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def _save_traceback(err: BaseException, trainer: Any | None) -> Path:
    """Write ``err``'s traceback into the run directory (the temp directory before there is one)."""
    name = "error.txt"
    if getattr(trainer, "world_size", 1) > 1:
        name = f"error-rank{trainer.global_rank}.txt"
    # The loggers' own directories: ``trainer.log_dir`` is a broadcast, which a dead rank fails.
    candidates = [getattr(logger, "log_dir", None) for logger in getattr(trainer, "loggers", [])]
    existing = [Path(c) for c in candidates if c is not None and Path(c).is_dir()]
    directory = existing[0] if existing else None
    if directory is None:
        directory = Path(tempfile.gettempdir()) / f"unilab_lit_error_{os.getpid()}"
        directory.mkdir(exist_ok=True)
    path = directory / name
    path.write_text("".join(traceback.format_exception(err)))
    return path


def _chain(err: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = err
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _in_chain(err: BaseException, kind: type[BaseException]) -> BaseException | None:
    return next((e for e in _chain(err) if isinstance(e, kind)), None)
