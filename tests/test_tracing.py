"""Tracing: the recorder and trace file, the collector's trace switch, and real fits with Tracing."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from lightning.pytorch import Callback, Trainer

from callbacks import EpisodeStatsMonitor, ObsNormSync, Tracing, WeightSync
from unilab_lit import tracing
from unilab_lit.algos.appo import APPO
from unilab_lit.algos.fast_td3 import FastTD3
from unilab_lit.algos.offpolicy import OffPolicyOptions
from unilab_lit.collector.config import CollectorConfig
from unilab_lit.collector.lockstep import LockstepLink
from unilab_lit.collector.metrics import EPISODES
from unilab_lit.collector.offpolicy_writer import OffPolicyWriterSpec
from unilab_lit.collector.process import CollectorProcess
from unilab_lit.data.inbox import CollectorInbox
from unilab_lit.data.options import CollectorOptions
from unilab_lit.data.replay import ReplayDataModule
from unilab_lit.data.rollout import RolloutDataModule
from unilab_lit.envs.cartpole import CartpoleSwingup
from unilab_lit.envs.spec import CRITIC, POLICY
from unilab_lit.ipc import ReplayStorage, replay_columns
from unilab_lit.nn.policies import GaussianActor, PolicySpec
from unilab_lit.trace_file import TraceStore

OBS = CartpoleSwingup.OBS_SIZE


# ---------------------------------------------------------------- trace-file checks
def _load(path: Path) -> dict[str, Any]:
    def reject(constant: str) -> None:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(path.read_text(), parse_constant=reject)


def _tracks(trace: dict[str, Any]) -> dict[str, set[str]]:
    """Process name -> names of its thread tracks."""
    events = trace["traceEvents"]
    processes = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    tracks: dict[str, set[str]] = defaultdict(set)
    for e in events:
        if e["name"] == "thread_name":
            tracks[processes[e["pid"]]].add(e["args"]["name"])
    return tracks


def _names(trace: dict[str, Any], process: str, ph: str) -> set[str]:
    events = trace["traceEvents"]
    pids = {
        e["pid"] for e in events if e["name"] == "process_name" and e["args"]["name"] == process
    }
    return {e["name"] for e in events if e["ph"] == ph and e["pid"] in pids}


def _assert_well_formed(trace: dict[str, Any]) -> None:
    """Every span is on a named track; per track, ts never goes back and slices nest."""
    events = trace["traceEvents"]
    named = {(e["pid"], e["tid"]) for e in events if e["name"] == "thread_name"}
    per_track: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            assert (e["pid"], e["tid"]) in named, f"span on an unnamed track: {e}"
            assert e["dur"] >= 0, e
            # Integer nanoseconds: the file prints exact microseconds with three decimals.
            begin = round(e["ts"] * 1000)
            per_track[(e["pid"], e["tid"])].append((begin, begin + round(e["dur"] * 1000)))
        else:
            assert e["ph"] in ("M", "C"), e
    assert per_track, "no spans"
    for track, spans in per_track.items():
        open_ends: list[int] = []
        previous = -1
        for begin, end in spans:
            assert begin >= previous, f"timestamps go backwards on track {track}"
            previous = begin
            while open_ends and open_ends[-1] <= begin:
                open_ends.pop()
            assert not open_ends or end <= open_ends[-1], f"slices overlap on track {track}"
            open_ends.append(end)


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
    trace = _load(store.write(tmp_path / "sub" / "trace.json", first_processes=("learner",)))
    _assert_well_formed(trace)
    assert _tracks(trace) == {
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
    trace = _load(store.write(tmp_path / "trace.json"))  # strict JSON: no NaN literal
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
def test_inbox_hands_trace_batches_and_metrics_to_separate_readers():
    first, last = (tracing.TraceRecorder("collector").drain() for _ in range(2))
    arrivals = [
        [{"kind": EPISODES, "count": 1}, tracing.message(first, final=False)],
        [{"kind": EPISODES, "count": 2}, tracing.message(last, final=True)],
    ]
    inbox = CollectorInbox(lambda: arrivals.pop(0) if arrivals else [])
    traced, final = inbox.drain_trace()  # also pulls the first episodes message
    assert len(traced) == 1 and traced[0] is first and not final
    counts = [m["count"] for m in inbox.drain_metrics()]
    assert counts == [1, 2]  # the one held for it, then the one it pulled itself
    traced, final = inbox.drain_trace()
    assert len(traced) == 1 and traced[0] is last and final
    assert inbox.drain_metrics() == [] and inbox.drain_trace() == ([], False)


def test_inbox_counts_messages_its_reader_left_too_long():
    arrivals = [[{"kind": EPISODES, "count": i} for i in range(1030)]]
    inbox = CollectorInbox(lambda: arrivals.pop() if arrivals else [])
    inbox.drain_trace()  # pulls the burst; the metrics reader keeps only the newest 1024
    assert inbox.dropped == 6
    assert inbox.drain_metrics()[0]["count"] == 6


# ---------------------------------------------------------------- collector
def _drain_trace_messages(collector: CollectorProcess) -> list[dict[str, Any]]:
    return [m for m in collector.drain_metrics() if m["kind"] == tracing.MESSAGE_KIND]


def test_collector_records_only_while_switched_on_and_ships_a_final_batch_with_its_pack_track(
    tmp_path,
):
    num_envs, samples = 4, 16
    replay = ReplayStorage(256, replay_columns(OBS, OBS, 1))
    link = LockstepLink(samples, replay.width)
    collector = CollectorProcess(
        CollectorConfig(
            task="CartpoleSwingup",
            num_envs=num_envs,
            policy=PolicySpec(
                f"{GaussianActor.__module__}:GaussianActor",
                {"obs_size": OBS, "action_size": 1, "hidden_dims": [8]},
            ),
            writer=OffPolicyWriterSpec(replay.handle(), link.handle()),
            report_interval_s=0.05,
        )
    )
    try:
        collector.start(timeout=120)
        for tick in (1, 2):
            link.release_steps(tick)
            collector.wait_for(lambda tick=tick: link.steps_done >= tick, timeout=60)
        time.sleep(0.15)  # several report intervals
        assert _drain_trace_messages(collector) == []  # switched off: nothing recorded

        switched_on = time.perf_counter_ns()
        collector.control.request_trace(True)
        for tick in range(3, 9):
            link.release_steps(tick)
            collector.wait_for(lambda tick=tick: link.steps_done >= tick, timeout=60)
            link.request_pack(tick, tick % 2, seed=tick)
            collector.wait_for(lambda tick=tick: link.pack_done(tick), timeout=60)
        collector.control.request_trace(False)
        messages = collector.wait_for(lambda: _drain_trace_messages(collector), timeout=30)
        while not messages[-1]["final"]:
            messages += collector.wait_for(lambda: _drain_trace_messages(collector), timeout=30)
        final_received = time.perf_counter_ns()
        link.release_steps(9)
        collector.wait_for(lambda: link.steps_done >= 9, timeout=60)
        time.sleep(0.15)
        assert _drain_trace_messages(collector) == []  # switched off again
    finally:
        collector.stop()
        replay.unlink()
        link.unlink()

    store = TraceStore(max_events=100_000)
    for message in messages:
        store.add(message["batch"])
    trace = _load(store.write(tmp_path / "trace.json"))
    _assert_well_formed(trace)
    assert _tracks(trace) == {"collector": {"main", "pack"}}
    spans = _names(trace, "collector", "X")
    assert {"env_step", "policy_inference", "shm_write", "pack", "wait_for_learner"} <= spans
    assert {"replay_size", "env_steps_per_s"} <= _names(trace, "collector", "C")
    # Ticks 3..8 take one vector step each; the step of tick 3 may start before the collector
    # sees the switch. Everything recorded overlaps the time between switch-on and the final
    # batch (the wait for tick 3 may have begun before the switch).
    assert len([e for e in trace["traceEvents"] if e["name"] == "env_step"]) >= 5
    origin = trace["otherData"]["origin_ns"]
    for e in trace["traceEvents"]:
        if e["ph"] in ("X", "C"):
            begin = origin + round(e["ts"] * 1000)
            end = begin + round(e.get("dur", 0) * 1000)
            assert switched_on <= end and begin <= final_received, e


# ---------------------------------------------------------------- real fits
class _RaiseAt(Callback):
    def __init__(self, batch_idx: int) -> None:
        self.batch_idx = batch_idx

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if batch_idx == self.batch_idx:
            raise RuntimeError("boom in on_train_batch_end")


def _fit(root: Path, max_steps: int, extra: list[Callback]) -> None:
    data = RolloutDataModule(
        CollectorOptions("CartpoleSwingup", 8), num_steps=8, ring_slots=4, staging_capacity=2
    )
    spec = data.env_spec
    model = APPO(
        spec.obs_sizes[POLICY],
        spec.obs_sizes[CRITIC],
        spec.action_size,
        actor_hidden_dims=[16],
        critic_hidden_dims=[16],
        num_learning_epochs=1,
        num_mini_batches=2,
    )
    trainer = Trainer(
        max_steps=max_steps,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        log_every_n_steps=1,
        default_root_dir=root,
        callbacks=[WeightSync(), ObsNormSync(), EpisodeStatsMonitor(), Tracing(), *extra],
    )
    trainer.fit(model, datamodule=data)


def test_fit_writes_one_timeline_with_learner_and_collector_tracks_on_one_clock(tmp_path):
    began = time.perf_counter_ns()
    _fit(tmp_path, max_steps=3, extra=[])
    ended = time.perf_counter_ns()
    assert tracing.current() is None  # the learner stops recording with the fit

    trace = _load(tmp_path / "trace.json")
    _assert_well_formed(trace)
    processes = {e["pid"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    assert len(processes) >= 2
    assert _tracks(trace) == {"learner": {"main"}, "collector": {"main"}}
    assert {
        "wait_for_data",
        "stage_to_device",
        "training_step",
        "backward",
        "optimizer_step",
        "WeightSync.publish",
        "ObsNormSync.publish",
    } <= _names(trace, "learner", "X")
    assert {"staging_pool_fill", "policy_lag"} <= _names(trace, "learner", "C")
    assert {"env_step", "policy_inference", "shm_write", "sync_weights_and_stats"} <= _names(
        trace, "collector", "X"
    )
    assert "env_steps_per_s" in _names(trace, "collector", "C")
    learner_steps = [e for e in trace["traceEvents"] if e["name"] == "training_step"]
    assert len(learner_steps) == 3
    optimizer_steps = [e for e in trace["traceEvents"] if e["name"] == "optimizer_step"]
    assert len(optimizer_steps) == 3 * 2  # every minibatch step, not only Lightning's
    # Both processes' events fall inside the fit as the test process's clock saw it.
    origin = trace["otherData"]["origin_ns"]
    for e in trace["traceEvents"]:
        if e["ph"] in ("X", "C"):
            begin = origin + round(e["ts"] * 1000)
            assert began <= begin and begin + round(e.get("dur", 0) * 1000) <= ended, e


def test_fit_that_raises_still_writes_a_well_formed_trace(tmp_path):
    with pytest.raises(RuntimeError, match="boom in on_train_batch_end"):
        _fit(tmp_path, max_steps=10, extra=[_RaiseAt(batch_idx=1)])
    assert tracing.current() is None
    trace = _load(tmp_path / "trace.json")
    _assert_well_formed(trace)
    assert set(_tracks(trace)) == {"learner", "collector"}
    assert len([e for e in trace["traceEvents"] if e["name"] == "training_step"]) >= 1


def test_offpolicy_fit_adds_the_copier_and_pack_thread_tracks(tmp_path):
    data = ReplayDataModule(
        CollectorOptions("CartpoleSwingup", 4, task_kwargs={"max_episode_steps": 50}),
        batch_size=8,
        buffer_size=64,
        learning_starts=4,
    )
    spec = data.env_spec
    model = FastTD3(
        spec.obs_sizes[POLICY],
        spec.obs_sizes[CRITIC],
        spec.action_size,
        actor_hidden_dims=(16,),
        critic_hidden_dims=(16,),
        offpolicy=OffPolicyOptions(num_atoms=11, v_min=-10.0, v_max=10.0, updates_per_step=2),
    )
    path = tmp_path / "chosen" / "offpolicy.json"
    Trainer(
        max_steps=3,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
        callbacks=[WeightSync(), ObsNormSync(), Tracing(path=str(path))],
    ).fit(model, datamodule=data)

    trace = _load(path)
    _assert_well_formed(trace)
    assert _tracks(trace) == {"learner": {"main", "replay-h2d"}, "collector": {"main", "pack"}}
    assert {
        "wait_for_data",
        "request_next_pack",
        "wait_for_pack",
        "device_copy",
        "training_step",
        "backward",
        "optimizer_step/0",
        "optimizer_step/1",
    } <= _names(trace, "learner", "X")
    assert {"env_step", "policy_inference", "shm_write", "pack"} <= _names(trace, "collector", "X")
    assert "replay_size" in _names(trace, "collector", "C")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_events": 0}, "max_events must be >= 1, got 0"),
        ({"collector_timeout_s": -1.0}, "collector_timeout_s must be >= 0, got -1.0"),
    ],
)
def test_tracing_rejects_out_of_range_arguments_naming_them(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Tracing(**kwargs)
