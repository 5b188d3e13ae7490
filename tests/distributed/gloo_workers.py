"""Functions the collective unit tests run on each rank of a 2-process gloo group."""

from __future__ import annotations

import os
from pathlib import Path

import torch
import torch.distributed as dist

from unilab_lit import distributed
from unilab_lit.nn.normalization import ObsNormalizer


def _data(rank: int, rows: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(rank)
    return torch.randn(rows, 3, generator=generator, dtype=torch.float64) * (rank + 1) + rank


def collectives(rank: int, world: int, port: int, out_dir: str) -> None:
    """Runs every helper once on rank-specific data and saves what it returned."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        rows = 5 + 3 * rank  # unequal shares
        x = _data(rank, rows)
        normalizer = ObsNormalizer(3)
        normalizer.update(x[:0] if rank == 0 else x)  # rank 0 brings an empty batch once
        normalizer.update(x)
        param = torch.nn.Parameter(torch.zeros(4))
        param.grad = torch.full((4,), float(rank + 1))
        extra = distributed.average_gradients([param], torch.tensor([float(rank)]))
        record = {
            "x": x,
            "mean_std": distributed.mean_std_over_ranks(x.flatten()),
            "normalizer": {k: v.clone() for k, v in normalizer.state_dict().items()},
            "grad": param.grad.clone(),
            "extra": extra,
            "all": (distributed.all_ranks(rank == 0), distributed.all_ranks(True)),
            "any": (distributed.any_rank(rank == 1), distributed.any_rank(False)),
            "max": distributed.reduce_over_ranks(torch.tensor([float(rank)]), "max"),
            "gathered": distributed.gather_to_rank_zero({"rank": rank}),
        }
        torch.save(record, Path(out_dir) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()
