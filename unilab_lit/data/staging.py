"""Bounded learner-side pool of the newest rollouts, combined into one time-major batch."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from tensordict import TensorDict

from unilab_lit.ipc.rollout_ring import RolloutRing

VERSION_FIELD = "policy_version"


class StagingPool:
    """Holds up to ``capacity`` rollouts on the learner device; the batch is their union.

    Each staged rollout occupies ``num_envs`` columns of preallocated ``[T, capacity * N, ...]``
    tensors; when full, the oldest rollout's columns are overwritten (FIFO). A rollout is
    therefore trained on in up to ``capacity`` consecutive iterations, with targets recomputed
    each time by the learner.

    Args:
        capacity: Number of rollouts kept (>= 1).
        num_steps: Rollout length T.
        num_envs: Environments per rollout N.
        step_fields: Per-step fields: name -> (trailing shape, dtype); stored ``[T, M, *shape]``.
        env_fields: Per-rollout, per-env fields: name -> (trailing shape, dtype); stored ``[M, *shape]``.
        device: Learner device the pool lives on.

    Raises:
        ValueError: if ``capacity`` is smaller than 1.
    """

    def __init__(
        self,
        capacity: int,
        num_steps: int,
        num_envs: int,
        step_fields: Mapping[str, tuple[tuple[int, ...], torch.dtype]],
        env_fields: Mapping[str, tuple[tuple[int, ...], torch.dtype]],
        device: torch.device | str = "cpu",
    ) -> None:
        if capacity < 1:
            raise ValueError(f"staging_capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.num_steps = num_steps
        self.num_envs = num_envs
        cols = capacity * num_envs
        self._steps = {
            k: torch.zeros((num_steps, cols, *shape), dtype=dtype, device=device)
            for k, (shape, dtype) in step_fields.items()
        }
        self._envs = {
            k: torch.zeros((cols, *shape), dtype=dtype, device=device)
            for k, (shape, dtype) in env_fields.items()
        }
        self._version = torch.zeros(cols, dtype=torch.int64, device=device)
        self._version_scratch = torch.zeros((), dtype=torch.int64)
        self._fresh = torch.zeros(cols, dtype=torch.bool, device=device)
        self._next = 0
        self.active = 0
        self.staged_total = 0

    def stage_from(self, ring: RolloutRing) -> bool:
        """Move the oldest unread rollout of ``ring`` straight into the pool (one copy).

        The ring must have a ``policy_version`` field and the pool's other fields.

        Returns:
            False when the ring had no committed rollout left (the pool is unchanged: with
            two or more ring slots, a copy interrupted by the writer always falls back to a
            newer intact rollout, so a failed read never leaves a partial copy behind).
        """
        if ring.pop_into(self._slot_views()) is None:
            return False
        self._commit(int(self._version_scratch))
        return True

    def _slot_views(self) -> dict[str, torch.Tensor]:
        cols = slice(self._next * self.num_envs, (self._next + 1) * self.num_envs)
        views = {k: v[:, cols] for k, v in self._steps.items()}
        views.update({k: v[cols] for k, v in self._envs.items()})
        views[VERSION_FIELD] = self._version_scratch
        return views

    def _commit(self, policy_version: int) -> None:
        cols = slice(self._next * self.num_envs, (self._next + 1) * self.num_envs)
        self._version[cols] = policy_version
        self._fresh[cols] = True
        self._next = (self._next + 1) % self.capacity
        self.active = min(self.active + 1, self.capacity)
        self.staged_total += 1

    def state_dict(self) -> dict[str, Any]:
        """The staged rollouts (copied to CPU) and the FIFO position.

        A resumed run then trains on the same rollouts in its next iterations as the
        uninterrupted run would have.
        """
        return {
            "steps": {k: v.detach().cpu().clone() for k, v in self._steps.items()},
            "envs": {k: v.detach().cpu().clone() for k, v in self._envs.items()},
            "version": self._version.cpu().clone(),
            "fresh": self._fresh.cpu().clone(),
            "next": self._next,
            "active": self.active,
            "staged_total": self.staged_total,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a :meth:`state_dict` of a pool with the same capacity, sizes and fields.

        Raises:
            ValueError: if the saved tensors do not fit this pool.
        """
        saved = {**state["steps"], **state["envs"]}
        mine = {**self._steps, **self._envs}
        shapes = {k: tuple(v.shape) for k, v in saved.items()}
        expected = {k: tuple(v.shape) for k, v in mine.items()}
        if shapes != expected:
            raise ValueError(
                f"saved staging pool {shapes} does not fit this pool {expected} "
                "(staging_capacity, num_steps, num_envs and the task must not change on resume)"
            )
        for key, value in saved.items():
            mine[key].copy_(value)
        self._version.copy_(state["version"])
        self._fresh.copy_(state["fresh"])
        self._next = int(state["next"])
        self.active = int(state["active"])
        self.staged_total = int(state["staged_total"])

    def batch(self) -> TensorDict:
        """The :func:`rollout_batch` of every active rollout (views, valid until the next stage).

        ``fresh`` marks the columns staged since the last call.

        Raises:
            RuntimeError: if nothing has been staged yet.
        """
        if self.active == 0:
            raise RuntimeError("StagingPool.batch() called before any rollout was staged")
        m = self.active * self.num_envs
        columns = {k: v[:m] for k, v in self._envs.items()}
        columns[VERSION_FIELD] = self._version[:m]
        columns["fresh"] = self._fresh[:m].clone()
        self._fresh.zero_()
        return rollout_batch({k: v[:, :m] for k, v in self._steps.items()}, columns)


def rollout_batch(
    steps: Mapping[str, torch.Tensor], columns: Mapping[str, torch.Tensor]
) -> TensorDict:
    """One APPO item: a ``TensorDict`` of batch size ``[T, M]`` on the device of its tensors.

    Args:
        steps: Per-step entries ``[T, M, ...]``.
        columns: Per-column entries ``[M, ...]`` (the bootstrap observation, the policy version,
            the fresh mask). They enter as stride-0 views ``[T, M, ...]``, the same row at every
            ``t``: nothing is copied, and indexing, masking or splitting the batch keeps each
            column's entries with its steps.
    """
    first = next(iter(steps.values()))
    num_steps = first.shape[0]
    entries = dict(steps)
    entries.update({k: v.expand(num_steps, *v.shape) for k, v in columns.items()})
    return TensorDict(entries, batch_size=first.shape[:2], device=first.device)
