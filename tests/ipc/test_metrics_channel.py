"""The metrics channel: bounded, never blocks the sender, drops the oldest and counts drops."""

from __future__ import annotations

import numpy as np
import pytest

from unilab_lit.ipc.channel import EPISODES, MetricsChannel


def test_drain_returns_messages_in_order_when_not_full():
    channel = MetricsChannel(capacity=8, slot_bytes=1024)
    for i in range(5):
        channel.send({"kind": EPISODES, "i": i})
    assert [m["i"] for m in channel.drain()] == [0, 1, 2, 3, 4]
    assert channel.drain() == []
    assert channel.dropped == 0


def test_send_drops_oldest_and_counts_when_full():
    channel = MetricsChannel(capacity=4, slot_bytes=1024)
    for i in range(10):
        channel.send({"kind": EPISODES, "i": i})
    assert [m["i"] for m in channel.drain()] == [6, 7, 8, 9]
    assert channel.dropped == 6
    channel.send({"kind": EPISODES, "i": 10})
    assert [m["i"] for m in channel.drain()] == [10]
    assert channel.dropped == 6


def test_drain_skips_and_counts_slot_overwritten_during_read():
    channel = MetricsChannel(capacity=2, slot_bytes=1024)
    channel.send({"kind": EPISODES, "i": 0})
    channel.send({"kind": EPISODES, "i": 1})
    # Simulate the sender having started to overwrite slot 0 (message 2) when the reader looks.
    header, _ = channel._slot(0)
    header[0] = 2 * 2 + 1
    assert [m["i"] for m in channel.drain()] == [1]
    assert channel.dropped == 1


def test_send_rejects_message_larger_than_slot():
    channel = MetricsChannel(capacity=2, slot_bytes=256)
    with pytest.raises(ValueError, match="more than slot_bytes=256"):
        channel.send({"kind": EPISODES, "return": np.zeros(1000, dtype=np.float32)})


def test_channel_pickles_to_a_view_of_the_same_memory():
    channel = MetricsChannel(capacity=4, slot_bytes=512)
    # A spawn child receives it through multiprocessing's pickler; its state excludes the views.
    state = channel.__getstate__()
    assert "_buf" not in state and "_send_lock" not in state
    clone = MetricsChannel.__new__(MetricsChannel)
    clone.__setstate__(state)
    clone.send({"kind": EPISODES, "i": 7})
    assert channel.drain() == [{"kind": EPISODES, "i": 7}]


@pytest.mark.parametrize("capacity, slot_bytes", [(0, 1024), (4, 16)])
def test_constructor_rejects_out_of_range_sizes(capacity, slot_bytes):
    with pytest.raises(ValueError, match="must be >="):
        MetricsChannel(capacity=capacity, slot_bytes=slot_bytes)
