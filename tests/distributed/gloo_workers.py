"""Functions the collective unit tests run on each rank of a 2-process gloo group."""

from __future__ import annotations

import os
from pathlib import Path

import torch
import torch.distributed as dist
from tensordict import TensorDict
from torch.utils.data import IterableDataset

from tests.algos import appo_batches, offpolicy_batches
from unilab_lit import distributed
from unilab_lit.algos.fast_sac import FastSAC
from unilab_lit.algos.fast_td3 import FastTD3
from unilab_lit.callbacks.episode_stats import job_values
from unilab_lit.nn.normalization import ObsNormalizer
from unilab_lit.telemetry import metrics


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
            "every": distributed.gather_to_every_rank({"rank": rank}),
            "broadcast": distributed.broadcast_from_rank_zero(f"from {rank}"),
            "stack": distributed.stack_over_ranks(torch.tensor([float(rank), 1.0])),
            # Rank 1's data arrives in its third round; rank 0's is there at once.
            "wait_ready": distributed.wait_on_every_rank(_ready_in_round(3 * rank), lambda: False),
            # Rank 0's data is there; rank 1 has none and a stop request: both leave without.
            "wait_stop": distributed.wait_on_every_rank(lambda s: rank == 0, lambda: rank == 1),
            # Rank 1 has finished no episode yet and has no collection rate.
            "job": job_values(
                {metrics.ENV_STEPS: 10.0 * (rank + 1)}
                | ({metrics.COLLECTION_FPS: 5.0} if rank == 0 else {}),
                {metrics.MEAN_REWARD: [1.0, 3.0] if rank == 0 else []},
            ),
        }
        torch.save(record, Path(out_dir) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def _ready_in_round(rounds: int):
    calls = []

    def wait(seconds: float) -> bool:
        calls.append(seconds)
        return len(calls) > rounds

    return wait


def zero_noise(like: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    return torch.zeros_like(like)


def build_case(algo: str) -> tuple[torch.nn.Module, list[TensorDict]]:
    """A small ``algo`` (seeded, so every process builds the same one; the off-policy actor
    steps with the critic) and two batches A, B."""
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    if algo == "appo":
        # One minibatch, one pass: the update is one mean over the batch, whatever its order.
        model = appo_batches.small_appo(num_learning_epochs=1, num_mini_batches=1)
        return model, [appo_batches.random_batch(g, 0) for _ in range(2)]
    cls = FastTD3 if algo == "fast_td3" else FastSAC
    model = offpolicy_batches.build(
        cls, **offpolicy_batches.SMALL, updates_per_step=1, policy_frequency=1
    )
    return model, [offpolicy_batches.random_batch(g, 32) for _ in range(2)]


class _Repeat(IterableDataset):
    def __init__(self, item: TensorDict) -> None:
        self.item = item

    def __iter__(self):
        while True:
            yield self.item.clone()


def updates(world: int, rank: int, out_dir: str, cases: list[str]) -> dict[str, dict]:
    """One iteration of each case's algorithm: under 2-rank DDP on batch A (rank 0) or B
    (rank 1), or in one process (``world == 1``) on A∪B; returns each model's state.

    A case ``<algo>+nan`` puts a NaN reward into rank 1's batch. The caller makes Gaussian draws
    zero (:func:`zero_noise`), so the per-rank noise streams cannot differ from the single
    process's.
    """
    records = {}
    for case in cases:
        algo, _, poison = case.partition("+")
        model, (a, b) = build_case(algo)
        if poison and rank == 1:
            b["reward"][3] = float("nan")
        batch = torch.cat([a, b], dim=a.batch_dims - 1) if world == 1 else (a, b)[rank]
        trainer = offpolicy_batches.make_trainer(
            Path(out_dir), 1, **({} if world == 1 else {"strategy": "ddp", "devices": world})
        )
        trainer.fit(model, train_dataloaders=offpolicy_batches.loader(_Repeat(batch)))
        records[case] = {k: v.clone() for k, v in model.state_dict().items()}
        records[f"{case}:logged"] = {k: float(v) for k, v in trainer.callback_metrics.items()}
    return records


def collectives_then_updates(
    rank: int, world: int, ports: tuple[int, int], out_dir: str, cases: list[str]
) -> None:
    """:func:`collectives`, then :func:`updates` under DDP, saved as ``update<world>_<rank>.pt``:
    one group of processes for both (each process start costs seconds)."""
    collectives(rank, world, ports[0], out_dir)
    # What torchrun sets: Lightning then joins this group instead of launching processes.
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(ports[1]),
        WORLD_SIZE=str(world),
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        NODE_RANK="0",
    )
    torch.randn_like = zero_noise
    torch.set_num_threads(1)
    records = updates(world, rank, out_dir, cases)
    torch.save(records, Path(out_dir) / f"update{world}_{rank}.pt")
