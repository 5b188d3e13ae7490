"""Collector lifecycle in real subprocesses: ready, failures reach the learner, stop leaves nothing."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from collector_rig import ACT, OBS, assert_no_leftovers, process_exists
from collector_workers import spec

from unilab_lit.collector.process import CollectorError
from unilab_lit.ipc import list_segments

# The learner must notice a failed collector within this many seconds.
NOTICE_S = 5.0


def _never() -> bool:
    return False


def test_start_reports_ready_and_stop_is_clean(make_rig, segments_before):
    rig = make_rig(spec("ConstantGaussian", OBS, ACT))
    assert rig.collector.startup_s is not None and rig.collector.startup_s > 0
    assert set(rig.collector.control.startup_timings()) == {"spawn_s", "import_s", "build_s"}
    rig.collector.wait_for(lambda: rig.ring.available() > 0, timeout=60)
    rig.collector.check()
    rig.release()
    rig.release()  # idempotent
    rig.collector.check()  # a stopped collector is not an error
    assert_no_leftovers(rig, segments_before)


def test_spawn_returns_at_once_and_wait_for_waits_until_ready(make_rig, segments_before, caplog):
    rig = make_rig(spec("ConstantGaussian", OBS, ACT), start=False)
    rig.collector.spawn(timeout=120)
    # The child cannot have imported torch yet: spawn returns while it starts.
    assert rig.collector.startup_s is None
    with caplog.at_level("INFO", logger="unilab_lit.collector.process"):
        rig.collector.wait_for(lambda: rig.ring.available() > 0, timeout=60)
    assert rig.collector.startup_s is not None and rig.collector.startup_s > 0
    assert "the learner waited" in caplog.text
    rig.release()
    assert_no_leftovers(rig, segments_before)


def test_collector_error_carries_child_traceback_when_act_raises(make_rig, segments_before):
    rig = make_rig(spec("RaisingPolicy", OBS, ACT, fail_at=3), start=False)
    with pytest.raises(CollectorError) as err:
        # Under load the child can fail before start() sees it ready; either way the
        # learner gets the child's traceback.
        rig.collector.start(timeout=120)
        rig.collector.wait_for(_never, timeout=NOTICE_S)
    message = str(err.value)
    assert "Traceback (most recent call last)" in message
    assert "ValueError: deliberate failure in act call 3" in message
    assert "collector_workers.py" in message
    rig.release()
    assert_no_leftovers(rig, segments_before)


def test_collector_error_names_signal_when_child_is_sigkilled(make_rig, segments_before):
    rig = make_rig(spec("ConstantGaussian", OBS, ACT))
    os.kill(rig.collector.pid, signal.SIGKILL)
    with pytest.raises(CollectorError, match=r"killed by SIGKILL \(exit code -9\)"):
        rig.collector.wait_for(_never, timeout=NOTICE_S)
    rig.release()
    assert_no_leftovers(rig, segments_before)


def test_collector_error_reports_stall_when_child_hangs(make_rig, segments_before):
    rig = make_rig(
        spec("HangingPolicy", OBS, ACT, hang_at=3), stall_timeout_s=1.0, join_timeout_s=1.0
    )
    with pytest.raises(CollectorError, match=r"made no progress for \d+\.\d s") as err:
        rig.collector.wait_for(_never, timeout=NOTICE_S)
    assert "stepping the env" in str(err.value)
    # The hung child ignores the stop request: stop() must escalate to SIGTERM.
    rig.release()
    assert_no_leftovers(rig, segments_before)


def test_start_raises_with_traceback_when_policy_cannot_be_built(make_rig, segments_before):
    rig = make_rig(spec("NoSuchPolicy", OBS, ACT), start=False)
    with pytest.raises(CollectorError, match="KeyError: 'NoSuchPolicy'") as err:
        rig.collector.start(timeout=120)
    assert "build_loop" in str(err.value)
    rig.release()
    assert_no_leftovers(rig, segments_before)


def test_child_survives_sigint_and_stops_cleanly(make_rig, segments_before):
    rig = make_rig(spec("ConstantGaussian", OBS, ACT))
    os.kill(rig.collector.pid, signal.SIGINT)
    time.sleep(0.3)
    rig.collector.check()
    process = rig.collector._process
    rig.release()
    assert process.exitcode == 0
    assert_no_leftovers(rig, segments_before)


def test_collector_waits_for_first_weights_then_stamps_their_version(make_rig):
    from collector_workers import ConstantGaussian

    policy = ConstantGaussian(OBS, ACT)
    rig = make_rig(spec("ConstantGaussian", OBS, ACT), weights_of=policy)
    with pytest.raises(TimeoutError, match="waiting for the learner's first publish of weights"):
        rig.collector.wait_for(lambda: rig.ring.available() > 0, timeout=0.5)
    rig.weights.publish_module(policy, version=3)
    rig.collector.wait_for(lambda: rig.ring.available() > 0, timeout=60)
    (read, rollout), *_ = rig.ring.read_available()
    assert read.sequence == 0
    assert int(rollout["policy_version"]) == 3


LEARNER_SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    sys.path[:0] = {paths!r}

    def main():
        from collector_workers import spec
        from collector_rig import ACT, OBS
        from unilab_lit.collector.writers import AppoWriterSpec
        from unilab_lit.collector.options import CollectorConfig
        from unilab_lit.collector.options import CollectorOptions
        from unilab_lit.collector.process import CollectorProcess
        from unilab_lit.ipc import RolloutRing, rollout_fields

        ring = RolloutRing(2, rollout_fields(8, 2, OBS, OBS, ACT))
        collector = CollectorProcess(CollectorConfig(
            CollectorOptions("CartpoleSwingup", 2), policy=spec("ConstantGaussian", OBS, ACT),
            writer=AppoWriterSpec(ring.handle(), 8)))
        collector.start(timeout=120)
        print(os.getpid(), collector.pid, flush=True)
        if {exit_without_stop!r}:
            return  # neither stop() nor unlink: the exit hooks must do both
        time.sleep(600)

    if __name__ == "__main__":
        main()
    """
)


def _write_learner(tmp_path: Path, exit_without_stop: bool) -> Path:
    script = tmp_path / "learner.py"
    paths = [str(Path(__file__).parent), *sys.path]
    script.write_text(LEARNER_SCRIPT.format(paths=paths, exit_without_stop=exit_without_stop))
    return script


def test_collector_exits_when_learner_is_sigkilled(tmp_path: Path):
    script = _write_learner(tmp_path, exit_without_stop=False)
    learner = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        _, child_pid = map(int, learner.stdout.readline().split())
        learner.kill()
        learner.wait(timeout=10)
        deadline = time.monotonic() + NOTICE_S
        while process_exists(child_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not process_exists(child_pid), "collector outlived its learner"
        # The learner's blocks go once the last process that could use them is gone.
        deadline = time.monotonic() + NOTICE_S
        while list_segments(learner.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert list_segments(learner.pid) == []
    finally:
        learner.kill()
        learner.stdout.close()


def test_learner_exit_without_stop_stops_collector_and_unlinks(tmp_path: Path):
    script = _write_learner(tmp_path, exit_without_stop=True)
    learner = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120
    )
    assert learner.returncode == 0, learner.stderr
    child_pid = int(learner.stdout.split()[0])
    # The exit hook joins the child before the learner's interpreter finishes.
    assert not process_exists(child_pid)
    assert "ignored the stop request" not in learner.stderr
    deadline = time.monotonic() + NOTICE_S
    while (
        list_segments(learner.pid if hasattr(learner, "pid") else 0) and time.monotonic() < deadline
    ):
        time.sleep(0.05)


def test_garbage_collected_handle_stops_collector(make_rig, segments_before):
    rig = make_rig(spec("ConstantGaussian", OBS, ACT))
    collector = rig.collector
    pid, process = collector.pid, collector._process
    rig.collector = None
    del collector
    gc.collect()
    assert process.exitcode == 0
    assert not process_exists(pid)
