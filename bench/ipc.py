"""Shared-memory transport cost against plain in-process copies of the same bytes.

    python bench/ipc.py [--threads 1] [--repeats 200]
    python bench/ipc.py --smoke    # 3 repeats (CI)

Prints, for each operation, the median time of the shared-memory path, of its in-process
baseline measured in the same run, and their ratio:
- weights: ``SharedWeights.publish_module`` + ``load_module_if_newer`` of a ~1M-parameter
  actor ÷ one ``torch.Tensor.copy_`` of the same number of bytes (the round trip makes
  two copies, so about 2× is the floor);
- the same through flat vectors (``publish`` + ``read_if_newer``);
- replay: ``ReplayStorage.gather`` of 8192 random rows (capacity 262144, width 111)
  ÷ ``torch.index_select`` of the same indices from a private (non-shared) tensor.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from smoke import parse_args
from torch import nn

from unilab_lit.ipc import NOT_PUBLISHED, ReplayStorage, SharedWeights, flat_size


def _median_us(fn: Callable[[], object], repeats: int, warmup: int = 10) -> float:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter_ns()
        fn()
        samples.append(time.perf_counter_ns() - start)
    return statistics.median(samples) / 1e3


def _actor() -> nn.Module:
    # 48 -> 768 -> 768 -> 512 -> 12 with LayerNorm: 1.03M floats.
    return nn.Sequential(
        nn.Linear(48, 768), nn.LayerNorm(768), nn.ELU(),
        nn.Linear(768, 768), nn.ELU(),
        nn.Linear(768, 512), nn.ELU(),
        nn.Linear(512, 12),
    )  # fmt: skip


def _report(name: str, shared_us: float, baseline_us: float, baseline: str) -> None:
    print(
        f"{name:<34} {shared_us:9.1f} us   {baseline:<28} {baseline_us:9.1f} us"
        f"   ratio {shared_us / baseline_us:5.2f}"
    )


def bench_weights(repeats: int) -> None:
    learner, collector = _actor(), _actor()
    size = flat_size(learner)
    owner = SharedWeights(size)
    reader = owner.handle().attach()
    src, dst = torch.randn(size), torch.empty(size)
    memcpy_us = _median_us(lambda: dst.copy_(src), repeats)
    print(f"actor: {size} floats ({size * 4 / 2**20:.2f} MiB)")

    def module_round_trip() -> None:
        version = owner.publish_module(learner)
        assert reader.load_module_if_newer(collector, version - 1) == version

    def flat_round_trip() -> None:
        version = owner.publish(src)
        assert reader.read_if_newer(version - 1, dst) == version

    _report(
        "publish_module + load_module",
        _median_us(module_round_trip, repeats),
        memcpy_us,
        "memcpy (copy_)",
    )
    _report(
        "publish + read_if_newer (flat)",
        _median_us(flat_round_trip, repeats),
        memcpy_us,
        "memcpy (copy_)",
    )
    _report(
        "version check, nothing newer",
        _median_us(lambda: reader.read_if_newer(owner.version, dst), repeats),
        memcpy_us,
        "memcpy (copy_)",
    )
    assert reader.read_if_newer(NOT_PUBLISHED, dst) == owner.version
    owner.unlink()


def bench_replay(repeats: int) -> None:
    capacity, width, batch = 262_144, 111, 8192
    replay = ReplayStorage(capacity, {"row": width})
    replay.write(torch.randn(capacity, width))
    private = replay.rows.clone()
    generator = torch.Generator().manual_seed(0)
    indices = replay.sample_indices(batch, generator)
    out = torch.empty(batch, width)
    print(
        f"replay: {capacity} x {width} floats ({capacity * width * 4 / 2**20:.0f} MiB), batch {batch}"
    )
    _report(
        "ReplayStorage.gather (shared)",
        _median_us(lambda: replay.gather(indices, out), repeats),
        _median_us(lambda: torch.index_select(private, 0, indices, out=out), repeats),
        "index_select (private)",
    )
    replay.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--repeats", type=int, default=200, help="timed repetitions per case")
    args = parse_args(parser, repeats=3)
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} thread(s), median of {args.repeats}")
    bench_weights(args.repeats)
    bench_replay(args.repeats)


if __name__ == "__main__":
    main()
