"""A collector pre-started before the learner's imports: adopted by the first CollectorProcess,
and gone on every path that never configures it."""

from __future__ import annotations

import subprocess
import sys

from collector_rig import ACT, OBS, assert_no_leftovers, process_exists
from collector_workers import spec

from tests.conftest import REPO
from unilab_lit.collector import prestart


def test_first_collector_process_adopts_the_prestarted_child(make_rig, segments_before, caplog):
    prestart.prestart()
    pid = prestart._pending.process.pid
    with caplog.at_level("INFO", logger="unilab_lit.collector.process"):
        rig = make_rig(spec("ConstantGaussian", OBS, ACT))
    assert rig.collector.pid == pid
    assert "pre-started alongside the learner's imports" in caplog.text
    rig.collector.wait_for(lambda: rig.ring.available() > 0, timeout=60)
    # Adopted once: the next collector spawns its own child.
    second = make_rig(spec("ConstantGaussian", OBS, ACT))
    assert second.collector.pid != pid
    second.release()
    rig.release()
    assert_no_leftovers(rig, segments_before)


def test_adopted_child_exits_when_stopped_before_its_config(make_rig, segments_before):
    prestart.prestart()
    rig = make_rig(spec("ConstantGaussian", OBS, ACT), start=False)
    pid = rig.collector.pid
    rig.release()
    assert not process_exists(pid)
    assert_no_leftovers(rig, segments_before)


def test_unclaimable_child_is_killed_and_claim_returns_none():
    prestart.prestart()
    process = prestart._pending.process
    assert prestart.claim(prestart.METRICS_CAPACITY + 1, prestart.METRICS_SLOT_BYTES) is None
    assert not process_exists(process.pid)
    assert prestart.claim(prestart.METRICS_CAPACITY, prestart.METRICS_SLOT_BYTES) is None


def test_cli_that_builds_no_collector_exits_with_its_prestarted_child_gone():
    # The child ignores SIGTERM; multiprocessing's exit handler would terminate and join it.
    result = subprocess.run(
        [sys.executable, "cli.py", "fit", "--config", "configs/appo.yaml", "--print_config"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "class_path: unilab_lit.algos.appo.APPO" in result.stdout
