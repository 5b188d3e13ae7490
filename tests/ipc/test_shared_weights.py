"""SharedWeights: round trips, version rules, and no mixed reads under a concurrent publisher."""

from __future__ import annotations

import logging

import pytest
import torch
from ipc_workers import publish_weights, read_weights
from torch import nn

from unilab_lit.ipc import NOT_PUBLISHED, SharedWeights, flat_size

log = logging.getLogger(__name__)


def _net() -> nn.Module:
    return nn.Sequential(nn.Linear(5, 7), nn.BatchNorm1d(7), nn.Tanh(), nn.Linear(7, 2))


def test_flat_size_counts_parameters_and_floating_buffers() -> None:
    net = _net()
    params = sum(p.numel() for p in net.parameters())
    # BatchNorm's running_mean and running_var; num_batches_tracked (int64) is not floating.
    assert flat_size(net) == params + 2 * 7


def test_load_module_reproduces_published_parameters_and_buffers() -> None:
    src, dst = _net(), _net()
    src[1].running_mean.uniform_()
    src[1].running_var.uniform_(1, 2)
    weights = SharedWeights(flat_size(src))
    version = weights.publish_module(src)
    assert weights.load_module_if_newer(dst, NOT_PUBLISHED) == version == 0
    for (name, a), b in zip(src.state_dict().items(), dst.state_dict().values(), strict=True):
        if a.is_floating_point():
            assert torch.equal(a, b), name


def test_read_if_newer_returns_none_and_leaves_out_untouched_when_not_newer() -> None:
    weights = SharedWeights(4)
    out = torch.full((4,), -7.0)
    assert weights.read_if_newer(NOT_PUBLISHED, out) is None
    version = weights.publish(torch.arange(4.0))
    assert weights.read_if_newer(NOT_PUBLISHED, out) == version
    assert torch.equal(out, torch.arange(4.0))
    out.fill_(-7.0)
    assert weights.read_if_newer(version, out) is None
    assert torch.equal(out, torch.full((4,), -7.0))


def test_publish_accepts_increasing_explicit_versions_and_rejects_others() -> None:
    weights = SharedWeights(3)
    assert weights.publish(torch.zeros(3), version=10) == 10
    assert weights.publish(torch.ones(3)) == 11
    with pytest.raises(ValueError, match="version must increase: got 11, .* newest .* 11"):
        weights.publish(torch.ones(3), version=11)
    with pytest.raises(ValueError, match="got 5"):
        weights.publish(torch.ones(3), version=5)
    assert weights.version == 11


def test_publish_rejects_wrong_sizes() -> None:
    weights = SharedWeights(3)
    with pytest.raises(ValueError, match="flat has 4 elements, SharedWeights holds 3"):
        weights.publish(torch.zeros(4))
    with pytest.raises(ValueError, match="flat_size"):
        weights.publish_module(_net())
    with pytest.raises(ValueError, match="num_floats must be > 0"):
        SharedWeights(0)


def test_attached_copy_reads_what_the_owner_publishes() -> None:
    owner = SharedWeights(6)
    reader = owner.handle().attach()
    owner.publish(torch.arange(6.0), version=3)
    out = torch.empty(6)
    assert reader.read_if_newer(NOT_PUBLISHED, out) == 3
    assert torch.equal(out, torch.arange(6.0))
    reader.unlink()  # an attacher's unlink is a no-op: the owner still serves readers
    assert reader.read_if_newer(NOT_PUBLISHED, out) == 3


def test_concurrent_publisher_never_yields_mixed_reads_in_spawn_processes(
    spawn, record_property
) -> None:
    versions = 100_000
    weights = SharedWeights(4096)
    ready, results = spawn.Event(), spawn.Queue()
    writer = spawn.Process(target=publish_weights, args=(weights, versions, ready))
    reader = spawn.Process(target=read_weights, args=(weights, versions, ready, results))
    reader.start()
    writer.start()
    stats = results.get(timeout=120)
    writer.join(timeout=30)
    reader.join(timeout=30)
    assert writer.exitcode == 0 and reader.exitcode == 0
    record_property("weights_stress", stats)
    log.info("SharedWeights stress: %s", stats)
    assert stats["last"] == versions
    assert stats["mixed"] == 0
    assert stats["backwards"] == 0
    assert stats["reads"] > 0
