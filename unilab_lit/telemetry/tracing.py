"""Trace recording shared by learner and collector: spans and counters on one clock, Chrome JSON out.

Every process records into its own :class:`TraceRecorder`; :meth:`TraceRecorder.drain` turns what
was recorded into a compact, picklable :class:`TraceBatch` (numpy columns, about 22 bytes a span),
which the collector ships over its metrics channel and the learner keeps in a
``unilab_lit.telemetry.trace_file.TraceStore``. The store writes one Chrome trace-event JSON file (``{"traceEvents": [...]}``) that Perfetto and
``chrome://tracing`` open, with a track per process and thread and name metadata for each.

Timestamps are ``time.perf_counter_ns()``: on Linux that is ``CLOCK_MONOTONIC``, one clock for
every process of the machine, so learner and collector spans line up without any offset.

Library code records through the module functions :func:`span` and :func:`counter`, which go to
the process's installed recorder and cost one global lookup when none is installed (tracing off).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import numpy as np

# Value of the "kind" key of a metrics-channel message that carries a TraceBatch.
MESSAGE_KIND = "trace"

# The clock of every timestamp (nanoseconds, CLOCK_MONOTONIC on Linux).
now_ns = time.perf_counter_ns

# Contiguous phases shorter than this are phases with nothing to do in that step (an APPO
# collector never waits for the learner, and pulls weights once per rollout: 1-5 µs of
# bookkeeping); recording them would double the trace without showing anything.
MIN_PHASE_NS = 10_000

# Upper bound of a pickled batch's size per event (span: 2+4+8+8 bytes, counter: 2+8+8) and
# the fixed part (names, thread table, pickle framing), to size batches for a bounded channel slot.
_BYTES_PER_EVENT = 24
_BATCH_OVERHEAD_BYTES = 8 * 1024


def max_batch_events(slot_bytes: int) -> int:
    """Most events a batch may hold so that its message pickles into ``slot_bytes``.

    Raises:
        ValueError: if ``slot_bytes`` is too small for even a short batch.
    """
    events = (slot_bytes - _BATCH_OVERHEAD_BYTES) // _BYTES_PER_EVENT
    if events < 64:
        raise ValueError(
            f"slot_bytes={slot_bytes} leaves room for {events} trace events per message; "
            f"tracing needs slots of at least {_BATCH_OVERHEAD_BYTES + 64 * _BYTES_PER_EVENT} bytes"
        )
    return events


@dataclass(frozen=True)
class TraceBatch:
    """What one process recorded between two drains, as columns.

    Attributes:
        pid: The recording process.
        process_name: Its track name ("learner", "collector").
        threads: Native thread id -> track name, for every thread the recorder has seen.
        names: Span and counter names; the ``*_name`` columns index into it.
        span_name: ``uint16`` name index per span.
        span_tid: ``int32`` native thread id per span.
        span_begin: ``int64`` begin per span, ns on :data:`now_ns`.
        span_end: ``int64`` end per span, ns.
        counter_name: ``uint16`` name index per counter sample.
        counter_ts: ``int64`` time per counter sample, ns.
        counter_value: ``float64`` value per counter sample.
    """

    pid: int
    process_name: str
    threads: dict[int, str]
    names: tuple[str, ...]
    span_name: np.ndarray
    span_tid: np.ndarray
    span_begin: np.ndarray
    span_end: np.ndarray
    counter_name: np.ndarray
    counter_ts: np.ndarray
    counter_value: np.ndarray

    @property
    def num_events(self) -> int:
        """Spans plus counter samples."""
        return len(self.span_begin) + len(self.counter_ts)


class _Span:
    """Context manager timing its block once: :attr:`seconds` afterwards, and the same interval
    as a span on ``recorder`` (if any) on exit, also when the block raises."""

    __slots__ = ("_begin", "_name", "_recorder", "seconds")

    def __init__(self, recorder: TraceRecorder | None, name: str) -> None:
        self._recorder = recorder
        self._name = name
        self._begin = 0
        self.seconds = 0.0

    def __enter__(self) -> _Span:
        self._begin = now_ns()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        end = now_ns()
        self.seconds = (end - self._begin) * 1e-9
        if self._recorder is not None:
            self._recorder.add_span(self._name, self._begin, end)


class _NoSpan:
    """The span of a process without a recorder: does nothing."""

    __slots__ = ()

    def __enter__(self) -> _NoSpan:
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None


_NO_SPAN = _NoSpan()


class TraceRecorder:
    """Collects one process's spans, contiguous phases and counter samples; thread-safe.

    A thread's track is named by :meth:`name_thread`, or else after its ``threading`` name the
    first time it records.

    Args:
        process_name: Name of this process's track group.
    """

    def __init__(self, process_name: str) -> None:
        self.process_name = process_name
        self.pid = os.getpid()
        self._lock = threading.Lock()
        self._threads: dict[int, str] = {}
        self._spans: list[tuple[str, int, int, int]] = []
        self._phases: list[tuple[tuple[str, ...], int, Sequence[int]]] = []
        self._counters: list[tuple[str, int, float]] = []
        self._pending = 0

    @property
    def pending(self) -> int:
        """Events recorded since the last :meth:`drain` (a phase sequence counts each phase)."""
        return self._pending

    def name_thread(self, name: str) -> None:
        """Name the calling thread's track."""
        tid = threading.get_native_id()
        with self._lock:
            self._threads[tid] = name

    def span(self, name: str) -> _Span:
        """``with recorder.span(name):`` records the block as one span of the calling thread."""
        return _Span(self, name)

    def add_span(self, name: str, begin_ns: int, end_ns: int) -> None:
        """Record a span of the calling thread from ``begin_ns`` to ``end_ns`` (:data:`now_ns`)."""
        tid = threading.get_native_id()
        with self._lock:
            self._see_thread(tid)
            self._spans.append((name, tid, begin_ns, end_ns))
            self._pending += 1

    def add_phases(self, names: tuple[str, ...], stamps: Sequence[int]) -> None:
        """Record back-to-back spans of the calling thread: ``names[i]`` from ``stamps[i]`` to
        ``stamps[i + 1]``. Cheaper than one :meth:`add_span` each (expanded at drain time);
        phases shorter than :data:`MIN_PHASE_NS` are left out.
        """
        tid = threading.get_native_id()
        with self._lock:
            self._see_thread(tid)
            self._phases.append((names, tid, stamps))
            self._pending += len(names)

    def counter(self, name: str, value: float, ts_ns: int | None = None) -> None:
        """Record a sample of the process-wide counter ``name`` (now, unless ``ts_ns`` is given)."""
        ts = now_ns() if ts_ns is None else ts_ns
        with self._lock:
            self._counters.append((name, ts, float(value)))
            self._pending += 1

    def drain(self) -> TraceBatch:
        """Everything recorded since the last drain, as a batch; the recorder keeps thread names."""
        with self._lock:
            spans, self._spans = self._spans, []
            phases, self._phases = self._phases, []
            counters, self._counters = self._counters, []
            threads = dict(self._threads)
            self._pending = 0
        names: dict[str, int] = {}
        name_cols = [np.asarray([names.setdefault(s[0], len(names)) for s in spans], np.uint16)]
        tid_cols = [np.asarray([s[1] for s in spans], np.int32)]
        begin_cols = [np.asarray([s[2] for s in spans], np.int64)]
        end_cols = [np.asarray([s[3] for s in spans], np.int64)]
        for (phase_names, tid), rows in _group_phases(phases).items():
            stamps = np.asarray(rows, np.int64)
            begin, end = stamps[:, :-1], stamps[:, 1:]
            index = [names.setdefault(n, len(names)) for n in phase_names]
            keep = (end - begin) >= MIN_PHASE_NS
            name_cols.append(np.broadcast_to(np.asarray(index, np.uint16), begin.shape)[keep])
            tid_cols.append(np.full(int(keep.sum()), tid, np.int32))
            begin_cols.append(begin[keep])
            end_cols.append(end[keep])
        counter_name = [names.setdefault(name, len(names)) for name, _, _ in counters]
        return TraceBatch(
            pid=self.pid,
            process_name=self.process_name,
            threads=threads,
            names=tuple(names),
            span_name=np.concatenate(name_cols),
            span_tid=np.concatenate(tid_cols),
            span_begin=np.concatenate(begin_cols),
            span_end=np.concatenate(end_cols),
            counter_name=np.asarray(counter_name, np.uint16),
            counter_ts=np.asarray([ts for _, ts, _ in counters], np.int64),
            counter_value=np.asarray([value for _, _, value in counters], np.float64),
        )

    def _see_thread(self, tid: int) -> None:
        if tid not in self._threads:
            self._threads[tid] = threading.current_thread().name


def _group_phases(
    phases: list[tuple[tuple[str, ...], int, Sequence[int]]],
) -> dict[tuple[tuple[str, ...], int], list[Sequence[int]]]:
    groups: dict[tuple[tuple[str, ...], int], list[Sequence[int]]] = {}
    for names, tid, stamps in phases:
        groups.setdefault((names, tid), []).append(stamps)
    return groups


# ---- the process's current recorder ---------------------------------------------------------------
_current: TraceRecorder | None = None


def install(recorder: TraceRecorder | None) -> None:
    """Make ``recorder`` the process's current recorder (``None``: tracing off)."""
    global _current
    _current = recorder


def current() -> TraceRecorder | None:
    """The process's current recorder, ``None`` while tracing is off."""
    return _current


def span(name: str) -> _Span | _NoSpan:
    """``with tracing.span(name):`` records the block on the current recorder, if any."""
    recorder = _current
    return _NO_SPAN if recorder is None else _Span(recorder, name)


def timed(name: str) -> _Span:
    """``with tracing.timed(name) as t:`` measures the block (``t.seconds``) and records it as
    span ``name`` on the current recorder, if any: one clock for a statistic and its span."""
    return _Span(_current, name)


def counter(name: str, value: float) -> None:
    """Record a sample of counter ``name`` on the current recorder, if any."""
    recorder = _current
    if recorder is not None:
        recorder.counter(name, value)


def message(batch: TraceBatch, final: bool) -> dict[str, Any]:
    """The metrics-channel message that carries ``batch``; ``final`` marks a recorder's last one."""
    return {"kind": MESSAGE_KIND, "batch": batch, "final": final}
