"""Collector lifecycle in real subprocesses: ready, failures reach the learner, stop leaves nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from collector_workers import spec
from conftest import ACT, OBS, assert_no_leftovers, process_exists

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


def test_collector_error_carries_child_traceback_when_act_raises(make_rig, segments_before):
    rig = make_rig(spec("RaisingPolicy", OBS, ACT, fail_at=3))
    with pytest.raises(CollectorError) as err:
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
    with pytest.raises(TimeoutError, match="waiting for the learner's first weights publish"):
        rig.collector.wait_for(lambda: rig.ring.available() > 0, timeout=0.5)
    rig.weights.publish_module(policy, version=3)
    rig.collector.wait_for(lambda: rig.ring.available() > 0, timeout=60)
    (read, rollout), *_ = rig.ring.read_available()
    assert read.sequence == 0
    assert int(rollout["policy_version"]) == 3


LEARNER_SCRIPT = textwrap.dedent(
    """
    import sys, time
    sys.path[:0] = {paths!r}

    def main():
        from collector_workers import spec
        from conftest import ACT, OBS
        from unilab_lit.collector.appo_writer import AppoWriterSpec
        from unilab_lit.collector.config import CollectorConfig
        from unilab_lit.collector.process import CollectorProcess
        from unilab_lit.ipc import RolloutRing, rollout_fields

        ring = RolloutRing(2, rollout_fields(8, 2, OBS, OBS, ACT))
        collector = CollectorProcess(CollectorConfig(
            task="CartpoleSwingup", num_envs=2, policy=spec("ConstantGaussian", OBS, ACT),
            writer=AppoWriterSpec(ring.handle(), 8)))
        collector.start(timeout=120)
        print(collector.pid, flush=True)
        time.sleep(600)

    if __name__ == "__main__":
        main()
    """
)


def test_collector_exits_when_learner_is_sigkilled(tmp_path: Path, marked_env):
    env, _ = marked_env
    script = tmp_path / "learner.py"
    script.write_text(LEARNER_SCRIPT.format(paths=[str(Path(__file__).parent), *sys.path]))
    learner = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        child_pid = int(learner.stdout.readline())
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
