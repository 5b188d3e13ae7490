"""The learner-side store of every process's trace batches, and the Chrome trace-event JSON writer."""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from unilab_lit.telemetry.tracing import TraceBatch
from unilab_lit.validation import check_arg


class TraceStore:
    """The batches of every process of a run; keeps the newest ``max_events`` and writes the trace.

    Args:
        max_events: Events kept (>= 1); beyond it the oldest batches are dropped whole (counted
            in :attr:`dropped_events`), so a long run keeps its latest window.

    Raises:
        ValueError: if ``max_events`` is smaller than 1.
    """

    def __init__(self, max_events: int) -> None:
        check_arg(max_events >= 1, "max_events", max_events, ">= 1")
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
