"""Data-parallel RL over Lightning's DDP: ranks, per-rank seeds, gradient averaging, global decisions.

Every rank is a complete learner with its own collector. What must agree across ranks goes through
the collectives here, always in the same order on every rank, so no rank waits in a collective the
others never enter:

- gradients: :func:`average_gradients` after every backward, before clipping and the optimizer
  step (the algorithms step raw optimizers several times per ``training_step``; DDP's reducer
  cannot follow a backward with ``inputs=`` or a step skipped on one rank, so it is kept out,
  see :func:`take_over_gradient_sync`);
- decisions that change what an optimizer does (skip a non-finite update, the adaptive-KL
  learning rate, advantage statistics): :func:`all_ranks`, :func:`mean_over_ranks`,
  :func:`mean_std_over_ranks`;
- observation statistics: :func:`moments_of_every_rank`, which every normaliser folds in rank
  order, so each rank ends with the same bits, equal to the statistics of the union;
- what callbacks log: :func:`gather_to_every_rank` (job figures) and
  :func:`broadcast_from_rank_zero` (evaluation results), so every rank logs and monitors the
  same values and enters the same collectives;
- waiting for data: :func:`wait_on_every_rank`, so that a stop request ends the waits of every
  rank in the same round, before any rank enters the iteration's collectives.

Outside an initialised process group of two or more ranks (a single-process run, the collector
subprocess) every function is the identity: no collective, and the single-process numbers stay
exactly what they were.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from unilab_lit.validation import check_arg

if TYPE_CHECKING:
    # Only for annotations: the collector subprocess imports this module and never Lightning.
    from lightning.pytorch import Trainer


def is_distributed() -> bool:
    """True inside an initialised process group of more than one rank."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def world_size() -> int:
    """Ranks in the job (1 outside a process group)."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def global_rank() -> int:
    """This process's rank in the job (0 outside a process group)."""
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def leave_process_group() -> None:
    """Destroy this process's process group, if any, once the run has ended normally.

    Gloo's worker threads outlive a group that is never destroyed; at interpreter exit they
    abort the process ("terminate called without an active exception", exit -6) after a run
    that succeeded (pytorch/pytorch#190489). Lightning leaves the group alive after ``fit``.
    """
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def rank_seed(seed: int, rank: int) -> int:
    """The collector seed of ``rank``: ``seed`` itself on rank 0, an independent stream elsewhere.

    Rank 0 keeps ``seed`` so a one-rank run draws exactly what a run without DDP draws. Other
    ranks get numpy's ``SeedSequence`` hash of ``(seed, rank)``: ``seed + rank`` would make rank
    1 of seed 0 replay rank 0 of seed 1.

    Args:
        seed: The configured base seed.
        rank: Global rank (>= 0).

    Raises:
        ValueError: if ``rank`` is negative.
    """
    check_arg(rank >= 0, "rank", rank, ">= 0")
    if rank == 0:
        return seed
    return int(np.random.SeedSequence([seed % 2**32, rank]).generate_state(1)[0])


def take_over_gradient_sync(trainer: Trainer) -> None:
    """Stop DDP's reducer from touching gradients; :func:`average_gradients` does it instead.

    Lightning prepares the reducer before every ``manual_backward``, so each backward of a
    manually optimised module is all-reduced bucket by bucket. That breaks for the RL learners:
    a backward with ``inputs=`` (the actor loss runs through the critic but fills only the
    actor's gradients) never fires the critic's hooks and the reducer waits for them forever, and
    a step skipped on one rank leaves the others waiting in its all-reduce. With the reducer
    off, gradients are averaged exactly where each optimizer step needs them.

    Call it before every ``training_step`` (``on_train_batch_start``): Lightning's DDP forward
    redirection switches the reducer back on after each step, for the next one. A no-op
    without DDP.
    """
    model = trainer.strategy.model
    if isinstance(model, DistributedDataParallel):
        model.require_backward_grad_sync = False


def _device() -> torch.device:
    # NCCL moves only CUDA tensors; gloo takes CPU tensors.
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def average_gradients(
    params: Sequence[torch.Tensor], extra: torch.Tensor | None = None
) -> torch.Tensor | None:
    """Replace every gradient in ``params`` by its mean over the ranks, in one all-reduce.

    Parameters without a gradient are left alone (every rank runs the same graph, so they are
    the same on every rank). ``extra`` (e.g. the loss) rides along in the same buffer and comes
    back averaged. The reduction hands every rank the same sums and each divides them the same
    way, so the ranks' gradients, and hence parameters and optimizer states, agree to the bit.

    Args:
        params: The parameters one optimizer step will update.
        extra: Optional values to average with the gradients.

    Returns:
        ``extra`` averaged over the ranks (``extra`` itself outside DDP).
    """
    if not is_distributed():
        return extra
    grads = [p.grad for p in params if p.grad is not None]
    dtype = grads[0].dtype if grads else torch.float32
    parts = [g.reshape(-1).to(dtype) for g in grads]
    if extra is not None:
        parts.append(extra.detach().reshape(-1).to(dtype))
    if not parts:
        return None
    flat = torch.cat(parts).to(_device())
    dist.all_reduce(flat)
    flat.div_(dist.get_world_size())
    offset = 0
    for grad in grads:
        grad.copy_(flat[offset : offset + grad.numel()].view_as(grad))
        offset += grad.numel()
    if extra is None:
        return None
    return flat[offset:].view_as(extra).to(device=extra.device, dtype=extra.dtype)


def all_ranks(flag: bool) -> bool:
    """True when ``flag`` is true on every rank (a skip anywhere is a skip everywhere)."""
    if not is_distributed():
        return flag
    value = torch.tensor(int(flag), device=_device())
    dist.all_reduce(value, op=dist.ReduceOp.MIN)
    return bool(value)


def any_rank(flag: bool) -> bool:
    """True when ``flag`` is true on at least one rank."""
    return not all_ranks(not flag)


AGREEMENT_SLICE_S = 0.1
"""Longest wait of one round of :func:`wait_on_every_rank`: how late a rank that has its data
learns of another rank's stop request, and how often it enters the round's all-reduce."""


def wait_on_every_rank(wait: Callable[[float], bool], stopping: Callable[[], bool]) -> bool:
    """Wait until every rank's condition holds (``True``) or a stop request ends the wait (``False``).

    ``wait(seconds)`` waits at most ``seconds`` for this rank's condition (its data), returns
    early on a stop request, says whether the condition holds, and raises its own failures and
    timeouts; ``stopping()`` is this rank's stop request. Once true, a condition stays true.

    Outside DDP: ``wait`` until the condition holds or ``stopping()``. Under DDP the ranks wait in
    rounds of at most :data:`AGREEMENT_SLICE_S`, each closed by one all-reduce of (not ready,
    stopping): every rank leaves in the same round, so the iteration's collectives that follow
    line up. A rank whose data is there waits in the rounds' all-reduces, returning from each
    within a slice, so a signal that reaches it (its handler runs between two rounds) ends
    the other ranks' waits too. When every rank is ready the result is ``True`` even with a
    stop request: that iteration trains and the stop is agreed after it, as without DDP.
    """
    if not is_distributed():
        while not wait(AGREEMENT_SLICE_S):
            if stopping():
                return False
        return True
    ready = False
    while True:
        ready = ready or wait(AGREEMENT_SLICE_S)
        flags = torch.tensor([int(not ready), int(stopping())], device=_device())
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        waiting, stop = flags.tolist()
        if not waiting:
            return True
        if stop:
            return False


def mean_over_ranks(values: torch.Tensor) -> torch.Tensor:
    """Element-wise mean of ``values`` over the ranks (``values`` itself outside DDP)."""
    if not is_distributed():
        return values
    buffer = values.detach().to(_device(), copy=True)
    dist.all_reduce(buffer)
    return buffer.div_(dist.get_world_size()).to(values.device)


def reduce_over_ranks(values: torch.Tensor, op: str) -> torch.Tensor:
    """Element-wise ``"sum"``, ``"max"`` or ``"min"`` of ``values`` over the ranks.

    Raises:
        ValueError: for another ``op``.
    """
    ops = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}
    check_arg(op in ops, "op", op, f"one of {sorted(ops)}")
    if not is_distributed():
        return values
    buffer = values.detach().to(_device(), copy=True)
    dist.all_reduce(buffer, op=ops[op])
    return buffer.to(values.device)


def stack_over_ranks(values: torch.Tensor) -> torch.Tensor:
    """Every rank's ``values`` stacked in rank order, ``[W, *values.shape]``, in one all-gather
    (``values[None]`` outside DDP)."""
    if not is_distributed():
        return values[None]
    buffer = values.detach().to(_device())
    gathered = [torch.empty_like(buffer) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, buffer)
    return torch.stack(gathered).to(values.device)


def mean_std_over_ranks(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and unbiased standard deviation of the union of every rank's ``x``.

    Outside DDP exactly ``x.mean(), x.std()``. Across ranks: two all-reduces, first of the sum
    and count, then of the squared deviations from the global mean (the two-pass formula, as
    precise as ``x.std()`` on the concatenated data).
    """
    if not is_distributed():
        return x.mean(), x.std()
    sums = reduce_over_ranks(torch.stack((x.sum(), x.new_tensor(float(x.numel())))), "sum")
    mean = sums[0] / sums[1]
    squares = reduce_over_ranks((x - mean).square().sum(), "sum")
    return mean, (squares / (sums[1] - 1)).sqrt()


def moments_of_every_rank(
    batch: torch.Tensor,
) -> list[tuple[torch.Tensor, torch.Tensor, float]]:
    """Mean, population variance and size of each rank's ``batch [n, size]``, in rank order.

    One ``all_gather`` of ``[mean, var, n]`` per rank; every rank receives the same list, so
    folding it in order (Chan's exact merge) gives every rank the same statistics, those of the
    union of all ranks' batches. Ranks with an empty batch contribute ``n = 0`` (they must still
    take part). Outside DDP the list holds this process's batch alone (none when it is empty).
    """
    n = batch.shape[0]
    if n:
        var, mean = torch.var_mean(batch, dim=0, correction=0)
    else:
        mean = var = batch.new_zeros(batch.shape[1:])
    if not is_distributed():
        return [(mean, var, float(n))] if n else []
    packed = torch.cat((mean, var, mean.new_tensor([float(n)]))).to(_device())
    gathered = [torch.empty_like(packed) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, packed)
    size = mean.numel()
    return [
        (g[:size].to(batch.device), g[size : 2 * size].to(batch.device), float(g[-1]))
        for g in gathered
        if float(g[-1]) > 0
    ]


def gather_to_rank_zero(obj: Any) -> list[Any] | None:
    """Every rank's ``obj`` in rank order on rank 0, ``None`` elsewhere (``[obj]`` outside DDP)."""
    if not is_distributed():
        return [obj]
    out: list[Any] | None = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
    dist.gather_object(obj, out, dst=0)
    return out


def gather_to_every_rank(obj: Any) -> list[Any]:
    """Every rank's ``obj`` in rank order, on every rank (``[obj]`` outside DDP)."""
    if not is_distributed():
        return [obj]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def broadcast_from_rank_zero(obj: Any) -> Any:
    """Rank 0's ``obj`` on every rank (``obj`` itself outside DDP); other ranks pass anything."""
    if not is_distributed():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def ranks_per_node(trainer: Trainer) -> int:
    """Learner processes sharing this machine's cores (the trainer's devices on this node)."""
    return max(1, trainer.num_devices) if trainer.world_size > 1 else 1
