"""The collector's episode report: every episode counted, only the newest values carried."""

from __future__ import annotations

import numpy as np

from unilab_lit.collector.loop import _EpisodeReport
from unilab_lit.ipc.channel import EPISODES


def _info(returns: list[float], nonfinite: int = 0) -> dict:
    values = np.asarray(returns, dtype=np.float32)
    episode = {
        "return": values,
        "length": np.full_like(values, 10.0),
        "reward/upright": values / 2,
        "env_ids": np.arange(len(values), dtype=np.int64),
    }
    return {"episode": episode, "nonfinite_resets": nonfinite}


def test_report_counts_all_episodes_but_keeps_newest_values():
    report = _EpisodeReport(keep=3)
    for returns in ([1.0, 2.0], [], [3.0], [4.0, 5.0]):
        n = len(returns)
        report.add(_info(returns), terminated=np.zeros(n, bool), truncated=np.ones(n, bool))
    message = report.message(env_steps=100)
    assert message["kind"] == EPISODES
    assert message["count"] == 5 and message["truncated"] == 5 and message["terminated"] == 0
    np.testing.assert_array_equal(message["return"], [3.0, 4.0, 5.0])
    np.testing.assert_array_equal(message["reward/upright"], [1.5, 2.0, 2.5])
    assert "env_ids" not in message


def test_report_counts_nonfinite_resets_and_terminations():
    report = _EpisodeReport(keep=8)
    report.add(_info([0.0], nonfinite=1), terminated=np.ones(1, bool), truncated=np.zeros(1, bool))
    message = report.message(env_steps=4)
    assert message["nonfinite_resets"] == 1 and message["terminated"] == 1
