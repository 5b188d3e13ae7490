"""Tracing: the recorder, the trace store and file, and the collector inbox's trace channel."""

from __future__ import annotations

import pickle
import subprocess
import sys
import threading
import time
from typing import Any

import numpy as np
import pytest

from tests.trace_checks import assert_well_formed, load_trace, tracks
from unilab_lit.collector.link import CollectorInbox
from unilab_lit.ipc.channel import EPISODES
from unilab_lit.telemetry import tracing
from unilab_lit.telemetry.trace_file import TraceStore


# ---------------------------------------------------------------- recorder and store
def test_recorder_drains_nested_spans_threads_and_counters_into_one_batch():
    recorder = tracing.TraceRecorder("learner")
    recorder.name_thread("main")
    with recorder.span("outer"):
        with recorder.span("inner"):
            pass
        recorder.counter("fill", 3)
    worker = threading.Thread(target=lambda: recorder.add_span("copy", 10, 20), name="copy-thread")
    worker.start()
    worker.join()

    batch = recorder.drain()
    names = [batch.names[i] for i in batch.span_name]
    assert names == ["inner", "outer", "copy"]
    assert set(batch.threads.values()) == {"main", "copy-thread"}
    assert batch.threads[threading.get_native_id()] == "main"
    (inner_begin, outer_begin), (inner_end, outer_end) = batch.span_begin[:2], batch.span_end[:2]
    assert outer_begin <= inner_begin <= inner_end <= outer_end
    assert [batch.names[i] for i in batch.counter_name] == ["fill"]
    assert batch.counter_value.tolist() == [3.0]
    assert batch.num_events == 4 and recorder.pending == 0
    assert recorder.drain().num_events == 0
    assert recorder.drain().threads == batch.threads  # names outlive the drain


def test_add_phases_leaves_out_phases_shorter_than_min_phase_ns():
    recorder = tracing.TraceRecorder("collector")
    short, long = tracing.MIN_PHASE_NS - 1, tracing.MIN_PHASE_NS
    t = 1_000_000
    stamps = [t, t + short, t + short + long, t + short + 2 * long]
    recorder.add_phases(("wait", "act", "step"), stamps)
    assert recorder.pending == 3
    batch = recorder.drain()
    assert [batch.names[i] for i in batch.span_name] == ["act", "step"]
    assert batch.span_begin.tolist() == stamps[1:3]
    assert batch.span_end.tolist() == stamps[2:]


def test_module_span_and_counter_record_only_with_an_installed_recorder():
    assert tracing.current() is None
    with tracing.span("ignored"):
        tracing.counter("ignored", 1.0)
    recorder = tracing.TraceRecorder("learner")
    tracing.install(recorder)
    try:
        with tracing.span("kept"):
            tracing.counter("kept_counter", 2.0)
    finally:
        tracing.install(None)
    batch = recorder.drain()
    assert set(batch.names) == {"kept", "kept_counter"}
    assert batch.num_events == 2


def test_timed_gives_the_statistic_and_the_span_one_measurement():
    with tracing.timed("untraced") as untraced:
        time.sleep(0.001)
    assert untraced.seconds > 0  # measured also while tracing is off
    recorder = tracing.TraceRecorder("learner")
    tracing.install(recorder)
    try:
        with tracing.timed("wait_for_data") as wait:
            time.sleep(0.001)
    finally:
        tracing.install(None)
    batch = recorder.drain()
    assert [batch.names[i] for i in batch.span_name] == ["wait_for_data"]
    assert (batch.span_end[0] - batch.span_begin[0]) * 1e-9 == wait.seconds


def _batch(pid: int, process: str, tid: int, spans: list[tuple[str, int, int]]) -> Any:
    names = tuple(dict.fromkeys(name for name, _, _ in spans))
    return tracing.TraceBatch(
        pid=pid,
        process_name=process,
        threads={tid: f"{process}-{tid}"},
        names=names,
        span_name=np.asarray([names.index(n) for n, _, _ in spans], np.uint16),
        span_tid=np.full(len(spans), tid, np.int32),
        span_begin=np.asarray([b for _, b, _ in spans], np.int64),
        span_end=np.asarray([e for _, _, e in spans], np.int64),
        counter_name=np.zeros(0, np.uint16),
        counter_ts=np.zeros(0, np.int64),
        counter_value=np.zeros(0, np.float64),
    )


def test_store_keeps_the_newest_batches_beyond_max_events():
    store = TraceStore(max_events=3)
    for i in range(3):
        store.add(
            _batch(1, "learner", 1, [("a", 10 * i, 10 * i + 1), ("b", 10 * i + 2, 10 * i + 3)])
        )
    assert store.num_events == 2 and store.dropped_events == 4
    with pytest.raises(ValueError, match="max_events must be >= 1, got 0"):
        TraceStore(0)


def test_written_trace_sorts_each_track_puts_parents_first_and_names_every_track(tmp_path):
    store = TraceStore(max_events=100)
    # Children end (and are recorded) before their parents; batches arrive out of time order.
    store.add(_batch(7, "collector", 70, [("step", 5_000, 6_000), ("pack", 1_500, 2_000)]))
    store.add(_batch(3, "learner", 30, [("child", 1_000, 1_500), ("parent", 1_000, 3_000)]))
    store.add(_batch(3, "learner", 31, [("copy", 1_234, 5_678)]))
    trace = load_trace(store.write(tmp_path / "sub" / "trace.json", first_processes=("learner",)))
    assert_well_formed(trace)
    assert tracks(trace) == {
        "learner": {"learner-30", "learner-31"},
        "collector": {"collector-70"},
    }
    learner = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["pid"] == 3]
    assert [e["name"] for e in learner] == ["parent", "child", "copy"]
    # Microseconds since the earliest event, exact to the nanosecond.
    assert trace["otherData"]["origin_ns"] == 1_000
    assert [(e["ts"], e["dur"]) for e in learner] == [(0.0, 2.0), (0.0, 0.5), (0.234, 4.444)]
    sort_index = {
        e["pid"]: e["args"]["sort_index"]
        for e in trace["traceEvents"]
        if e["name"] == "process_sort_index"
    }
    assert sort_index[3] < sort_index[7]  # the learner is shown first


def test_written_trace_leaves_out_non_finite_counter_samples(tmp_path):
    recorder = tracing.TraceRecorder("learner")
    recorder.counter("policy_lag", float("nan"))
    recorder.counter("policy_lag", 2.0)
    store = TraceStore(max_events=10)
    store.add(recorder.drain())
    trace = load_trace(store.write(tmp_path / "trace.json"))  # strict JSON: no NaN literal
    samples = [e["args"]["value"] for e in trace["traceEvents"] if e["ph"] == "C"]
    assert samples == [2.0]


def test_a_full_trace_batch_pickles_into_a_default_metrics_slot():
    slot_bytes = 64 * 1024
    n = tracing.max_batch_events(slot_bytes)
    recorder = tracing.TraceRecorder("collector")
    for i in range(n):
        recorder.add_span(f"span_with_a_long_descriptive_name_{i % 8}", 2**60 + i, 2**60 + 2 * i)
    message = tracing.message(recorder.drain(), final=False)
    assert len(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)) <= slot_bytes
    with pytest.raises(ValueError, match="slot_bytes=4096"):
        tracing.max_batch_events(4096)


def test_perf_counter_is_one_clock_for_every_process():
    assert "CLOCK_MONOTONIC" in time.get_clock_info("perf_counter").implementation
    before = time.perf_counter_ns()
    child = subprocess.run(
        [sys.executable, "-c", "import time; print(time.perf_counter_ns())"],
        capture_output=True,
        text=True,
        check=True,
    )
    after = time.perf_counter_ns()
    assert before < int(child.stdout) < after


# ---------------------------------------------------------------- collector inbox
class _Channel:
    """A metrics channel whose ``drain`` returns what ``arrive`` returns."""

    def __init__(self, arrive) -> None:
        self.drain = arrive
        self.dropped = 0


def _alive() -> bool:
    return True


def test_inbox_hands_trace_batches_and_metrics_to_separate_readers():
    first, last = (tracing.TraceRecorder("collector").drain() for _ in range(2))
    arrivals = [
        [{"kind": EPISODES, "count": 1}, tracing.message(first, final=False)],
        [{"kind": EPISODES, "count": 2}, tracing.message(last, final=True)],
    ]
    inbox = CollectorInbox(_Channel(lambda: arrivals.pop(0) if arrivals else []), None, _alive)
    traced, final = inbox.drain_trace()  # also pulls the first episodes message
    assert len(traced) == 1 and traced[0] is first and not final
    counts = [m["count"] for m in inbox.drain_metrics()]
    assert counts == [1, 2]  # the one held for it, then the one it pulled itself
    traced, final = inbox.drain_trace()
    assert len(traced) == 1 and traced[0] is last and final
    assert inbox.drain_metrics() == [] and inbox.drain_trace() == ([], False)


def test_inbox_counts_messages_its_reader_left_too_long():
    arrivals = [[{"kind": EPISODES, "count": i} for i in range(1030)]]
    inbox = CollectorInbox(_Channel(lambda: arrivals.pop() if arrivals else []), None, _alive)
    inbox.drain_trace()  # pulls the burst; the metrics reader keeps only the newest 1024
    assert inbox.dropped == 6
    assert inbox.drain_metrics()[0]["count"] == 6
