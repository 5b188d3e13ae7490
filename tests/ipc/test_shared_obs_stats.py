"""SharedObsStats: round trips into a normaliser, version rules, no mixed reads under a publisher."""

from __future__ import annotations

import logging
import pickle

import pytest
import torch
from ipc_workers import publish_obs_stats, read_obs_stats

from unilab_lit.ipc import NOT_PUBLISHED, SharedObsStats
from unilab_lit.nn.normalization import ObsNormalizer

log = logging.getLogger(__name__)


def test_normalizer_loaded_from_shared_stats_normalizes_like_the_source() -> None:
    source, target = ObsNormalizer(6), ObsNormalizer(6)
    source.update(torch.randn(4, 32, 6) * 3 + 1)
    stats = SharedObsStats(6)
    version = stats.publish_normalizer(source)
    receiver = pickle.loads(pickle.dumps(stats))
    assert receiver.load_normalizer_if_newer(target, NOT_PUBLISHED) == version
    assert receiver.load_normalizer_if_newer(target, version) is None
    x = torch.randn(10, 6)
    assert torch.equal(target(x), source(x))
    assert float(target.count) == 128.0


def test_read_if_newer_returns_published_values_once() -> None:
    stats = SharedObsStats(3)
    assert stats.read_if_newer(NOT_PUBLISHED) is None
    stats.publish(torch.tensor([1.0, 2, 3]), torch.tensor([4.0, 5, 6]), 7, version=2)
    snapshot = stats.read_if_newer(NOT_PUBLISHED)
    assert snapshot.version == 2 and snapshot.count == 7.0
    assert snapshot.mean.tolist() == [1, 2, 3] and snapshot.var.tolist() == [4, 5, 6]
    assert stats.read_if_newer(2) is None


def test_publish_rejects_wrong_shape_and_stale_version() -> None:
    stats = SharedObsStats(3)
    with pytest.raises(ValueError, match=r"mean must have shape \(3,\), got \(4,\)"):
        stats.publish(torch.zeros(4), torch.ones(3), 1)
    stats.publish(torch.zeros(3), torch.ones(3), 1, version=5)
    with pytest.raises(ValueError, match="version must increase"):
        stats.publish(torch.zeros(3), torch.ones(3), 1, version=5)


def test_concurrent_publisher_never_yields_mixed_reads_in_spawn_processes(
    spawn, record_property
) -> None:
    versions = 100_000
    stats = SharedObsStats(256)
    ready, results = spawn.Event(), spawn.Queue()
    writer = spawn.Process(target=publish_obs_stats, args=(stats, versions, ready))
    reader = spawn.Process(target=read_obs_stats, args=(stats, versions, ready, results))
    reader.start()
    writer.start()
    outcome = results.get(timeout=120)
    writer.join(timeout=30)
    reader.join(timeout=30)
    assert writer.exitcode == 0 and reader.exitcode == 0
    record_property("obs_stats_stress", outcome)
    log.info("SharedObsStats stress: %s", outcome)
    assert outcome["last"] == versions
    assert outcome["mixed"] == 0
    assert outcome["backwards"] == 0
    assert outcome["reads"] > 0
