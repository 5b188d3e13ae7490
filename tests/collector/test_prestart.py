"""A collector pre-started before the learner's imports: adopted by the first CollectorProcess,
and gone on every path that never configures it."""

from __future__ import annotations

from collector_rig import ACT, OBS, assert_no_leftovers, process_exists
from collector_workers import spec

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


def test_unclaimable_child_exits_and_claim_returns_none():
    prestart.prestart()
    process = prestart._pending.process
    assert prestart.claim(prestart.METRICS_CAPACITY + 1, prestart.METRICS_SLOT_BYTES) is None
    process.join(120)
    assert process.exitcode == 0
    assert prestart.claim(prestart.METRICS_CAPACITY, prestart.METRICS_SLOT_BYTES) is None
