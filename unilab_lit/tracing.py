"""Trace recording shared by learner and collector: spans and counters on one clock, Chrome JSON out.

Every process records into its own :class:`TraceRecorder`; :meth:`TraceRecorder.drain` turns what
was recorded into a compact, picklable :class:`TraceBatch` (numpy columns, about 22 bytes a span),
which the collector ships over its metrics channel and the learner keeps in a :class:`TraceStore`.
The store writes one Chrome trace-event JSON file (``{"traceEvents": [...]}``) that Perfetto and
``chrome://tracing`` open, with a track per process and thread and name metadata for each.

Timestamps are ``time.perf_counter_ns()``: on Linux that is ``CLOCK_MONOTONIC``, one clock for
every process of the machine, so learner and collector spans line up without any offset.

Library code records through the module functions :func:`span` and :func:`counter`, which go to
the process's installed recorder and cost one global lookup when none is installed (tracing off).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
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
    """Context manager recording one span on exit (also when the block raises)."""

    __slots__ = ("_begin", "_name", "_recorder")

    def __init__(self, recorder: TraceRecorder, name: str) -> None:
        self._recorder = recorder
        self._name = name
        self._begin = 0

    def __enter__(self) -> _Span:
        self._begin = now_ns()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._recorder.add_span(self._name, self._begin, now_ns())


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


class TraceStore:
    """The batches of every process of a run; keeps the newest ``max_events`` and writes the trace.

    Args:
        max_events: Events kept (>= 1); beyond it the oldest batches are dropped whole (counted
            in :attr:`dropped_events`), so a long run keeps its latest window.

    Raises:
        ValueError: if ``max_events`` is smaller than 1.
    """

    def __init__(self, max_events: int) -> None:
        if max_events < 1:
            raise ValueError(f"max_events must be >= 1, got {max_events}")
        self.max_events = max_events
        self._batches: deque[TraceBatch] = deque()
        self._processes: dict[int, tuple[str, dict[int, str]]] = {}
        self.num_events = 0
        self.dropped_events = 0

    def add(self, batch: TraceBatch) -> None:
        """Keep ``batch``; its process and thread names stay known even after it is dropped."""
        _, threads = self._processes.get(batch.pid, (batch.process_name, {}))
        self._processes[batch.pid] = (batch.process_name, {**threads, **batch.threads})
        if batch.num_events == 0:
            return
        self._batches.append(batch)
        self.num_events += batch.num_events
        while self.num_events > self.max_events and len(self._batches) > 1:
            dropped = self._batches.popleft()
            self.num_events -= dropped.num_events
            self.dropped_events += dropped.num_events

    def write(self, path: str | Path, first_processes: Sequence[str] = ()) -> Path:
        """Write every kept event as Chrome trace-event JSON; returns the path.

        Spans become complete (``"X"``) events sorted per track by begin (a parent before the
        spans it contains), so each track's timestamps never go backwards; counters become
        ``"C"`` events; every process and thread track gets its name (``"M"`` events).
        Timestamps are microseconds since the earliest event, whose :data:`now_ns` value is
        ``otherData.origin_ns``.

        Args:
            path: Output file; parent directories are created.
            first_processes: Process names shown first, in this order (others follow).
        """
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        spans, counters, names = self._merged()
        origin = _origin(spans, counters)
        with path.open("w") as out:
            other = {"clock": "time.perf_counter_ns (CLOCK_MONOTONIC)", "origin_ns": origin}
            out.write(f'{{"displayTimeUnit": "ms", "otherData": {json.dumps(other)}, ')
            out.write('"traceEvents": [\n')
            events = self._metadata(first_processes)
            out.write(",\n".join(json.dumps(event) for event in events))
            quoted = [json.dumps(name) for name in names]
            pid, tid, name, begin, end = spans
            for i in range(len(begin)):
                out.write(
                    f',\n{{"name": {quoted[name[i]]}, "ph": "X", "pid": {pid[i]}, '
                    f'"tid": {tid[i]}, "ts": {_us(begin[i] - origin)}, '
                    f'"dur": {_us(end[i] - begin[i])}}}'
                )
            pid, name, ts, value = counters
            for i in np.flatnonzero(np.isfinite(value)):  # JSON has no NaN: no sample, no value
                out.write(
                    f',\n{{"name": {quoted[name[i]]}, "ph": "C", "pid": {pid[i]}, "tid": 0, '
                    f'"ts": {_us(ts[i] - origin)}, "args": {{"value": {float(value[i])!r}}}}}'
                )
            out.write("\n]}\n")
        return path

    def _metadata(self, first_processes: Sequence[str]) -> list[dict[str, Any]]:
        order = {name: i for i, name in enumerate(first_processes)}
        events: list[dict[str, Any]] = []
        for pid, (process_name, threads) in sorted(self._processes.items()):
            sort_index = order.get(process_name, len(order))
            events.append(_meta(pid, 0, "process_name", {"name": process_name}))
            events.append(_meta(pid, 0, "process_sort_index", {"sort_index": sort_index}))
            # The process's own main thread (tid == pid) first, the others by id.
            for tid, thread_name in sorted(threads.items(), key=lambda kv: (kv[0] != pid, kv[0])):
                events.append(_meta(pid, tid, "thread_name", {"name": thread_name}))
        return events

    def _merged(self) -> tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...], list[str]]:
        """All spans sorted by (pid, tid, begin, longest first) and counters by (pid, ts)."""
        names: dict[str, int] = {}
        span_cols: list[list[np.ndarray]] = [[], [], [], [], []]
        counter_cols: list[list[np.ndarray]] = [[], [], [], []]
        for batch in self._batches:
            remap = np.asarray([names.setdefault(n, len(names)) for n in batch.names], np.int64)
            n = len(batch.span_begin)
            for col, values in zip(
                span_cols,
                (
                    np.full(n, batch.pid, np.int64),
                    batch.span_tid.astype(np.int64),
                    remap[batch.span_name],
                    batch.span_begin,
                    batch.span_end,
                ),
                strict=True,
            ):
                col.append(values)
            n = len(batch.counter_ts)
            for col, values in zip(
                counter_cols,
                (
                    np.full(n, batch.pid, np.int64),
                    remap[batch.counter_name],
                    batch.counter_ts,
                    batch.counter_value,
                ),
                strict=True,
            ):
                col.append(values)
        spans = tuple(_concat(col, np.int64) for col in span_cols)
        pid, tid, _, begin, end = spans
        order = np.lexsort((-end, begin, tid, pid))
        counters = tuple(
            _concat(col, np.float64 if i == 3 else np.int64) for i, col in enumerate(counter_cols)
        )
        counter_order = np.lexsort((counters[2], counters[0]))
        return (
            tuple(col[order] for col in spans),
            tuple(col[counter_order] for col in counters),
            list(names),
        )


def _concat(arrays: list[np.ndarray], dtype: type) -> np.ndarray:
    return np.concatenate(arrays) if arrays else np.zeros(0, dtype)


def _origin(spans: tuple[np.ndarray, ...], counters: tuple[np.ndarray, ...]) -> int:
    firsts = [int(a.min()) for a in (spans[3], counters[2]) if len(a)]
    return min(firsts) if firsts else 0


def _us(ns: np.integer | int) -> str:
    # Nanoseconds as microseconds with three decimals: exact, so a child span that ends with its
    # parent ends at the very same printed time.
    ns = int(ns)
    sign = "-" if ns < 0 else ""
    whole, frac = divmod(abs(ns), 1000)
    return f"{sign}{whole}.{frac:03d}"


def _meta(pid: int, tid: int, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "ph": "M", "pid": pid, "tid": tid, "args": args}


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


def counter(name: str, value: float) -> None:
    """Record a sample of counter ``name`` on the current recorder, if any."""
    recorder = _current
    if recorder is not None:
        recorder.counter(name, value)


def message(batch: TraceBatch, final: bool) -> dict[str, Any]:
    """The metrics-channel message that carries ``batch``; ``final`` marks a recorder's last one."""
    return {"kind": MESSAGE_KIND, "batch": batch, "final": final}
