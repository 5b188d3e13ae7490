"""Learner-side handle of the collector subprocess: start, liveness checks, stop."""

from __future__ import annotations

import contextlib
import logging
import multiprocessing as mp
import pickle
import signal
import time
import weakref
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import TYPE_CHECKING, Any

from unilab_lit.collector import _entry, prestart
from unilab_lit.ipc.channel import MetricsChannel
from unilab_lit.ipc.control import FAILED, READY, STOPPED, ControlBlock
from unilab_lit.ipc.futex import WAIT_SLICE_S, CounterWatch
from unilab_lit.validation import check_arg

if TYPE_CHECKING:
    from unilab_lit.collector.options import CollectorConfig

logger = logging.getLogger(__name__)

# A ready collector beats every env step and every wait poll (milliseconds); one silent this
# long is hung (or SIGSTOPped) and cannot act on a request.
HUNG_S = 1.0


class CollectorError(RuntimeError):
    """The collector failed: it raised (message holds its traceback), died, or stalled."""


def _describe_exit(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"was killed by {name} (exit code {exitcode})"
    return f"exited with code {exitcode}"


def _shutdown(
    process: BaseProcess,
    control: ControlBlock,
    join_timeout_s: float,
    config_pipe: Connection | None = None,
) -> None:
    """Stop event → join → terminate → kill. Runs at most once (via ``weakref.finalize``).

    ``config_pipe`` is a pre-started child's: closing it ends a child still waiting for its config.
    A child still silent (hung) after :data:`HUNG_S` is killed then: it ignores SIGTERM, and the
    two joins would cost a stop ``2 × join_timeout_s``.
    """
    if config_pipe is not None:
        config_pipe.close()
    control.request_stop()
    # A child that acts on the request is gone within a beat; one still silent is hung.
    process.join(min(HUNG_S, join_timeout_s))
    if process.exitcode is None and _hung(control):
        logger.warning(
            "collector pid %s has not beaten for %.1f s while %s; killing it",
            process.pid,
            control.seconds_since_heartbeat(),
            control.phase_name,
        )
        process.kill()
    process.join(join_timeout_s)
    if process.exitcode is None:
        logger.warning("collector pid %s ignored the stop request; terminating it", process.pid)
        process.terminate()
        process.join(join_timeout_s)
    if process.exitcode is None:
        logger.warning("collector pid %s ignored SIGTERM; killing it", process.pid)
        process.kill()
        process.join()


def _hung(control: ControlBlock) -> bool:
    return control.state == READY and control.seconds_since_heartbeat() > HUNG_S


class CollectorProcess:
    """The collector subprocess (spawn context) as seen from the learner.

    The learner calls :meth:`start` once (or :meth:`spawn`, builds, then :meth:`wait_ready`),
    :meth:`check` (or :meth:`wait_for` while blocked on data) regularly, :meth:`drain_metrics` for
    episode stats and timings, and :meth:`stop` on every exit path. ``stop`` is idempotent and
    also runs when the object is garbage collected and at interpreter exit, so no child outlives
    the learner.

    Args:
        config: Everything the child needs to build env, actor and writer; must pickle.
        join_timeout_s: How long :meth:`stop` waits after each escalation step (stop request,
            SIGTERM) before the next one (> 0).
        metrics_capacity: Messages the metrics channel holds before dropping the oldest (>= 1).
        metrics_slot_bytes: Largest pickled metrics message (>= 256).

    Raises:
        ValueError: if ``join_timeout_s`` is not positive.
    """

    def __init__(
        self,
        config: CollectorConfig,
        join_timeout_s: float = 5.0,
        metrics_capacity: int = prestart.METRICS_CAPACITY,
        metrics_slot_bytes: int = prestart.METRICS_SLOT_BYTES,
    ) -> None:
        check_arg(join_timeout_s > 0, "join_timeout_s", join_timeout_s, "> 0")
        self.config = config
        self.join_timeout_s = join_timeout_s
        self._ctx = mp.get_context("spawn")
        self._process: BaseProcess | None = None
        self._finalizer: weakref.finalize | None = None
        # A child pre-started by the CLI (collector.prestart) comes with its own shared blocks.
        self._prestarted = prestart.claim(metrics_capacity, metrics_slot_bytes)
        if self._prestarted is None:
            self.control = ControlBlock(self._ctx)
            self.metrics = MetricsChannel(metrics_capacity, metrics_slot_bytes, self._ctx)
        else:
            self.control = self._prestarted.control
            self.metrics = self._prestarted.metrics
            self._process = self._prestarted.process
            self._finalizer = weakref.finalize(
                self,
                _shutdown,
                self._process,
                self.control,
                join_timeout_s,
                self._prestarted.connection,
            )
        self._stopping = False
        self._spawned_at: float | None = None
        self._ready_timeout = 0.0
        self.startup_s: float | None = None

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    @property
    def running(self) -> bool:
        """Started, not stopped, and the child has not exited."""
        return self._process is not None and not self._stopping and self._process.exitcode is None

    @property
    def hung(self) -> bool:
        """Running, ready, and silent for over :data:`HUNG_S` (stuck, or stopped by SIGSTOP)."""
        return self.running and _hung(self.control)

    def start(self, timeout: float = 120.0) -> None:
        """Spawn the child and block until it reports ready (:meth:`spawn` + :meth:`wait_ready`).

        Raises:
            RuntimeError: if called twice.
            CollectorError: if the child fails, dies or is not ready within ``timeout`` seconds;
                the child is stopped before raising.
        """
        self.spawn(timeout)
        self.wait_ready()

    def spawn(self, timeout: float = 120.0) -> None:
        """Spawn the child and return at once, so the learner builds while the child imports.

        Args:
            timeout: Seconds from now the child has to report ready (see :meth:`wait_ready`).

        Raises:
            RuntimeError: if called twice.
        """
        if self._spawned_at is not None:
            raise RuntimeError("CollectorProcess started twice; create a new instance")
        config_bytes = pickle.dumps(self.config)
        self._spawned_at = time.monotonic()
        self._ready_timeout = timeout
        if self._prestarted is not None:
            # Already imported torch and the collector modules; it builds once it has the config.
            # A child that died since it was claimed is reported by wait_ready / check.
            with contextlib.suppress(OSError):
                self._prestarted.connection.send_bytes(config_bytes)
            self._prestarted.connection.close()
            return
        self._process = self._ctx.Process(
            target=_entry.main,
            args=(config_bytes, self.control, self.metrics, self._spawned_at),
            name="unilab-collector",
            daemon=True,
        )
        self._process.start()
        self._finalizer = weakref.finalize(
            self, _shutdown, self._process, self.control, self.join_timeout_s
        )

    def wait_ready(self) -> None:
        """Block until the spawned child reports ready; sets :attr:`startup_s`. No-op once ready.

        Raises:
            RuntimeError: if the child was never spawned.
            CollectorError: if the child fails, dies or is not ready in time; the child is
                stopped before raising.
        """
        if self._spawned_at is None:
            raise RuntimeError("CollectorProcess.wait_ready() before spawn()")
        if self.startup_s is not None:
            return
        waited_from = time.monotonic()
        try:
            timeout = self._ready_timeout
            deadline = self._spawned_at + timeout
            state = self.control.state_watch()
            while (seen := state.value) != READY:
                self._raise_if_failed_or_dead()
                if time.monotonic() > deadline:
                    raise CollectorError(
                        f"collector (pid {self.pid}) was not ready within {timeout:.1f} s "
                        f"(state {self.control.state_name})"
                    )
                state.wait(seen, WAIT_SLICE_S)
        except BaseException:
            self.stop()
            raise
        timings = self.control.startup_timings()
        # The child's own phases, from the spawn on: the learner may look only later.
        self.startup_s = sum(timings.values())
        logger.info(
            "collector pid %s ready in %.2f s (spawn %.2f s, imports %.2f s, build %.2f s%s); "
            "the learner waited %.2f s for it",
            self.pid,
            self.startup_s,
            *timings.values(),
            ", pre-started alongside the learner's imports" if self._prestarted else "",
            time.monotonic() - waited_from,
        )

    def check(self) -> None:
        """Raise if the collector failed, died or stalled; cheap enough to call every iteration.

        Raises:
            CollectorError: with the child's traceback, its exit code / signal, or the stall time.
        """
        if self._process is None or self._stopping:
            return
        self._raise_if_failed_or_dead()
        if self.control.state == READY:
            stalled = self.control.seconds_since_heartbeat()
            if stalled > self.config.options.stall_timeout_s:
                raise CollectorError(
                    f"collector (pid {self.pid}) made no progress for {stalled:.1f} s "
                    f"(stall_timeout_s={self.config.options.stall_timeout_s}); it is alive but stuck "
                    f"while {self.control.phase_name}"
                )

    def wait_for(
        self,
        predicate: Callable[[], Any],
        timeout: float | None = None,
        poll: float = 0.001,
        *,
        watch: CounterWatch | None = None,
    ) -> Any:
        """Poll ``predicate`` until it returns something truthy, checking the collector meanwhile.

        A child still starting is waited for first (:meth:`wait_ready`); ``timeout`` counts from then.
        With ``watch``, the shared counter whose change can make ``predicate`` true, the wait
        between two polls blocks on it (a futex) for at most ``WAIT_SLICE_S`` instead of
        sleeping ``poll``: no CPU burnt, no latency added.

        Returns:
            The first truthy value of ``predicate()``.

        Raises:
            CollectorError: as soon as :meth:`check` would raise, or if the child does not become ready.
            TimeoutError: if ``timeout`` seconds pass first (``None`` waits indefinitely; a stuck
                collector is still caught by the stall check).
        """
        self.wait_ready()
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            seen = None if watch is None else watch.value
            result = predicate()
            if result:
                return result
            self.check()
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(
                    f"condition not met within {timeout} s; collector pid {self.pid} is alive "
                    f"and {self.control.phase_name} (heartbeat {self.control.heartbeat})"
                )
            if watch is None:
                time.sleep(poll)
            else:
                watch.wait(seen, WAIT_SLICE_S)

    def drain_metrics(self) -> list[dict[str, Any]]:
        """Messages sent by the collector since the last call; see :class:`MetricsChannel`."""
        return self.metrics.drain()

    def stop(self) -> None:
        """Stop the child: stop request → join → SIGTERM → SIGKILL. Idempotent, never raises."""
        self._stopping = True
        if self._finalizer is not None:
            self._finalizer()

    def _raise_if_failed_or_dead(self) -> None:
        assert self._process is not None
        if self.control.state == FAILED:
            raise CollectorError(
                f"collector (pid {self.pid}) raised an exception:\n{self.control.error_text()}"
            )
        exitcode = self._process.exitcode
        if exitcode is not None:
            clean = exitcode == 0 and self.control.state == STOPPED
            detail = "stopped on its own" if clean else _describe_exit(exitcode)
            raise CollectorError(f"collector (pid {self.pid}) {detail} before it was asked to stop")
