"""Tracing in real processes: the collector's trace switch and fits with ``Tracing``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from lightning.pytorch import Callback

from tests.collector_fits import collector_trainer
from tests.trace_checks import assert_well_formed, load_trace, names, tracks
from unilab_lit.algos.appo import APPO
from unilab_lit.algos.fast_td3 import FastTD3
from unilab_lit.algos.offpolicy_options import OffPolicyOptions
from unilab_lit.callbacks import EpisodeStatsMonitor, Tracing
from unilab_lit.collector.options import CollectorConfig, CollectorOptions
from unilab_lit.collector.process import CollectorProcess
from unilab_lit.collector.writers import OffPolicyWriterSpec
from unilab_lit.data.replay import ReplayDataModule
from unilab_lit.data.rollout import RolloutDataModule
from unilab_lit.envs.cartpole import CartpoleSwingup
from unilab_lit.envs.spec import CRITIC, POLICY
from unilab_lit.envs.task_spec import TaskSpec
from unilab_lit.ipc import ReplayStorage, replay_columns
from unilab_lit.ipc.lockstep import LockstepLink
from unilab_lit.nn.policies import GaussianActor, PolicySpec
from unilab_lit.telemetry import tracing
from unilab_lit.telemetry.trace_file import TraceStore

OBS = CartpoleSwingup.OBS_SIZE


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
            CollectorOptions("CartpoleSwingup", num_envs),
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
    trace = load_trace(store.write(tmp_path / "trace.json"))
    assert_well_formed(trace)
    assert tracks(trace) == {"collector": {"main", "pack"}}
    spans = names(trace, "collector", "X")
    assert {"env_step", "policy_inference", "shm_write", "pack", "wait_for_learner"} <= spans
    assert {"replay_size", "env_steps_per_s"} <= names(trace, "collector", "C")
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
    trainer = collector_trainer(
        max_steps,
        EpisodeStatsMonitor(),
        Tracing(),
        *extra,
        log_every_n_steps=1,
        default_root_dir=root,
    )
    trainer.fit(model, datamodule=data)


def test_fit_writes_one_timeline_with_learner_and_collector_tracks_on_one_clock(tmp_path):
    began = time.perf_counter_ns()
    _fit(tmp_path, max_steps=3, extra=[])
    ended = time.perf_counter_ns()
    assert tracing.current() is None  # the learner stops recording with the fit

    trace = load_trace(tmp_path / "trace.json")
    assert_well_formed(trace)
    processes = {e["pid"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    assert len(processes) >= 2
    assert tracks(trace) == {"learner": {"main"}, "collector": {"main"}}
    assert {
        "wait_for_data",
        "stage_to_device",
        "training_step",
        "backward",
        "optimizer_step",
        "WeightSync.publish",
        "ObsNormSync.publish",
    } <= names(trace, "learner", "X")
    assert {"staging_pool_fill", "policy_lag"} <= names(trace, "learner", "C")
    assert {"env_step", "policy_inference", "shm_write", "sync_weights_and_stats"} <= names(
        trace, "collector", "X"
    )
    assert "env_steps_per_s" in names(trace, "collector", "C")
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
    trace = load_trace(tmp_path / "trace.json")
    assert_well_formed(trace)
    assert set(tracks(trace)) == {"learner", "collector"}
    assert len([e for e in trace["traceEvents"] if e["name"] == "training_step"]) >= 1


def test_offpolicy_fit_adds_the_copier_and_pack_thread_tracks(tmp_path):
    data = ReplayDataModule(
        CollectorOptions(TaskSpec("CartpoleSwingup", {"max_episode_steps": 50}), 4),
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
    collector_trainer(3, Tracing(path=str(path)), default_root_dir=tmp_path).fit(
        model, datamodule=data
    )

    trace = load_trace(path)
    assert_well_formed(trace)
    assert tracks(trace) == {"learner": {"main", "replay-h2d"}, "collector": {"main", "pack"}}
    assert {
        "wait_for_data",
        "request_next_pack",
        "wait_for_pack",
        "device_copy",
        "training_step",
        "backward",
        "optimizer_step/0",
        "optimizer_step/1",
    } <= names(trace, "learner", "X")
    assert {"env_step", "policy_inference", "shm_write", "pack"} <= names(trace, "collector", "X")
    assert "replay_size" in names(trace, "collector", "C")


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
