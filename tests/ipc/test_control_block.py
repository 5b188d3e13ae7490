"""The shared control block: error text round trip and truncation, heartbeat and stop flag."""

from __future__ import annotations

from unilab_lit.ipc.control import ERROR_CAPACITY, FAILED, READY, ControlBlock


def test_error_text_round_trips_and_flips_state_to_failed():
    control = ControlBlock()
    control.mark_failed("Traceback (most recent call last):\n  ValueError: é\n")
    assert control.state == FAILED
    assert control.error_text() == "Traceback (most recent call last):\n  ValueError: é\n"


def test_long_error_keeps_the_tail_when_truncated():
    control = ControlBlock()
    text = "x" * (2 * ERROR_CAPACITY) + "\nValueError: the line that matters\n"
    control.mark_failed(text)
    kept = control.error_text()
    assert len(kept.encode()) == ERROR_CAPACITY
    assert kept.startswith("...[traceback truncated]...")
    assert kept.endswith("ValueError: the line that matters\n")


def test_ready_beat_and_stop_are_visible_to_the_other_side():
    control = ControlBlock()
    assert not control.stop_requested
    control.mark_ready(spawn_s=0.1, import_s=0.2, build_s=0.3)
    assert control.state == READY and control.heartbeat == 1
    assert control.seconds_since_heartbeat() < 60
    control.beat()
    assert control.heartbeat == 2
    assert control.startup_timings() == {"spawn_s": 0.1, "import_s": 0.2, "build_s": 0.3}
    control.request_stop()
    assert control.stop_requested
