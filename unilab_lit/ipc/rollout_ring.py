"""Collector → learner transport of whole rollouts: a ring of slots that never blocks the writer.

Protocol (one writer, one reader). Each slot has a stamp: the sequence number of the
rollout it holds, or ``WRITING`` while the writer fills it. The writer marks the slot
``WRITING`` in ``begin_write`` before touching it, fills the views in place, then in
``commit_write`` stamps it with its sequence number and bumps the shared write counter.
The reader copies rollout ``r`` only if slot ``r % S`` is stamped ``r`` before *and*
after the copy; otherwise the writer has lapped the reader, rollout ``r`` is lost, and it
is counted in ``dropped``. Sequence numbers never repeat, so an unchanged stamp proves the
slot was not touched during the copy. The writer never waits for the reader.

Ordering relies on x86-64 total store order, as in ``versioned.py``. A reader waiting for a
rollout blocks on the write counter (:attr:`RolloutRing.commits`, a futex); each commit wakes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

import torch

from unilab_lit.ipc.block import BlockLayout, SharedStructure, ShmHandle
from unilab_lit.ipc.futex import CounterWatch
from unilab_lit.validation import check_arg

FieldSpec = Mapping[str, tuple[tuple[int, ...], torch.dtype]]
"""Per-slot fields: name -> (shape of one slot's tensor, dtype)."""

WRITING = -1
_HEADER = ("write_count", "read_count", "dropped")


def rollout_fields(
    num_steps: int, num_envs: int, policy_dim: int, critic_dim: int, action_dim: int
) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """The per-slot fields of an APPO rollout, time-major ``[T, N, ...]``.

    ``final_critic_obs[t]`` holds the critic observation of the final (pre-reset) state
    where ``truncated[t]`` is set; ``last_critic_obs`` bootstraps after step ``T - 1``;
    ``policy_version`` is the weight version that acted.
    """
    t, n = num_steps, num_envs
    f32 = torch.float32
    return {
        "obs": ((t, n, policy_dim), f32),
        "critic_obs": ((t, n, critic_dim), f32),
        "actions": ((t, n, action_dim), f32),
        "log_prob": ((t, n), f32),
        "reward": ((t, n), f32),
        "done": ((t, n), f32),
        "truncated": ((t, n), f32),
        "final_critic_obs": ((t, n, critic_dim), f32),
        "last_critic_obs": ((n, critic_dim), f32),
        "policy_version": ((), torch.int64),
    }


def _layout(num_slots: int, fields: FieldSpec) -> BlockLayout:
    layout = BlockLayout()
    layout.add("header", (len(_HEADER),), torch.int64)
    layout.add("stamps", (num_slots,), torch.int64)
    for name, (shape, dtype) in fields.items():
        layout.add(f"field/{name}", (num_slots, *shape), dtype)
    return layout


class RingRead(NamedTuple):
    """Outcome of one successful read."""

    sequence: int
    """The rollout's sequence number (0 for the first rollout ever committed)."""
    dropped: int
    """Rollouts lost to the writer lapping the reader just before this one."""


@dataclass(frozen=True)
class RolloutRingHandle:
    """Picklable handle: attach with :meth:`attach`."""

    block: ShmHandle
    num_slots: int
    fields: dict[str, tuple[tuple[int, ...], torch.dtype]]

    def attach(self) -> RolloutRing:
        """Map the ring in this process (non-owner)."""
        return RolloutRing(self.num_slots, self.fields, _attach=self.block)


class RolloutRing(SharedStructure):
    """``num_slots`` slots, each holding one whole rollout, with monotone write/read counters.

    The writer (collector) fills a slot in place (``begin_write`` → views →
    ``commit_write``); the reader (learner) copies out committed rollouts oldest first
    (``pop_into`` / ``read_available``). A writer that laps the reader overwrites the
    oldest unread rollouts; the reader skips them and counts them in ``dropped``.

    Args:
        num_slots: slots in the ring, >= 2 (one being written while another is read).
        fields: per-slot fields, name -> (slot shape, dtype); see :func:`rollout_fields`.

    Raises:
        ValueError: fewer than 2 slots, or no fields.
    """

    def __init__(self, num_slots: int, fields: FieldSpec, _attach: ShmHandle | None = None) -> None:
        check_arg(num_slots >= 2, "num_slots", num_slots, ">= 2")
        if not fields:
            raise ValueError("fields must name at least one per-slot field")
        self._num_slots = int(num_slots)
        self._fields = {name: (tuple(shape), dtype) for name, (shape, dtype) in fields.items()}
        views = self._map(_layout(self._num_slots, self._fields), "ring", _attach)
        if _attach is None:
            views["stamps"].fill_(WRITING)
        # Control words through numpy: cheap scalar access, still one aligned 8-byte load/store.
        self._header = views["header"].numpy()
        self._stamps = views["stamps"].numpy()
        self._slots = {name: views[f"field/{name}"] for name in self._fields}
        self._writing: int | None = None
        self.commits = CounterWatch(int(self._header.ctypes.data))
        """The write counter as a futex: a reader blocks on it until the next commit."""

    @staticmethod
    def required_bytes(num_slots: int, fields: FieldSpec) -> int:
        """Shared-memory bytes of a ring with these slots and fields."""
        return _layout(num_slots, fields).nbytes

    @property
    def num_slots(self) -> int:
        """Number of slots."""
        return self._num_slots

    @property
    def fields(self) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
        """Per-slot fields, name -> (slot shape, dtype)."""
        return dict(self._fields)

    @property
    def write_count(self) -> int:
        """Rollouts committed so far (monotone)."""
        return int(self._header[0])

    @property
    def read_count(self) -> int:
        """Rollouts consumed so far, read or dropped (monotone)."""
        return int(self._header[1])

    @property
    def dropped(self) -> int:
        """Rollouts overwritten before the reader got to them (monotone)."""
        return int(self._header[2])

    def available(self) -> int:
        """Committed rollouts not consumed yet, at most ``num_slots`` (a lapped reader drops the rest)."""
        return min(self.write_count - self.read_count, self._num_slots)

    def handle(self) -> RolloutRingHandle:
        """Picklable handle a spawn child uses to attach."""
        return RolloutRingHandle(self._block.handle, self._num_slots, self.fields)

    # Writer side -------------------------------------------------------------------------

    def begin_write(self) -> dict[str, torch.Tensor]:
        """Claim the next slot and return writable views of its fields (no copy).

        The slot stops being readable at once; it becomes readable again, as the newest
        rollout, on :meth:`commit_write`. Calling it again before committing reclaims the
        same slot (the partial rollout is abandoned).
        """
        sequence = self.write_count
        slot = sequence % self._num_slots
        self._stamps[slot] = WRITING
        self._writing = sequence
        return {name: view[slot] for name, view in self._slots.items()}

    def commit_write(self) -> int:
        """Publish the slot claimed by :meth:`begin_write`; returns its sequence number.

        Raises:
            RuntimeError: no slot is claimed.
        """
        if self._writing is None:
            raise RuntimeError("commit_write() without a begin_write() in this process")
        sequence, self._writing = self._writing, None
        self._stamps[sequence % self._num_slots] = sequence
        self._header[0] = sequence + 1
        self.commits.wake()
        return sequence

    # Reader side -------------------------------------------------------------------------

    def pop_into(self, dest: Mapping[str, torch.Tensor]) -> RingRead | None:
        """Copy the oldest intact unread rollout into ``dest`` and consume it.

        Args:
            dest: one tensor per field with the field's slot shape (any device, may be a
                strided view, e.g. a column range of a staging buffer).

        Returns:
            What was read, or None when no committed rollout is left (``dest`` may then
            hold a partial copy of a rollout that was overwritten during the copy).

        Raises:
            KeyError: ``dest`` lacks a field, or names one the ring does not have.
            ValueError: a destination has the wrong shape.
        """
        self._check_dest(dest)
        read = int(self._header[1])
        dropped_before = 0
        while True:
            written = int(self._header[0])
            if read >= written:
                self._consume(read, dropped_before)
                return None
            if written - read > self._num_slots:
                # Lapped: everything older than the last num_slots commits is gone.
                dropped_before += written - self._num_slots - read
                read = written - self._num_slots
            slot = read % self._num_slots
            if int(self._stamps[slot]) == read:
                for name, view in self._slots.items():
                    dest[name].copy_(view[slot])
                if int(self._stamps[slot]) == read:
                    self._consume(read + 1, dropped_before)
                    return RingRead(read, dropped_before)
            # The writer reclaimed this slot before or during the copy.
            dropped_before += 1
            read += 1

    def read_available(
        self, max_items: int | None = None
    ) -> list[tuple[RingRead, dict[str, torch.Tensor]]]:
        """Pop up to ``max_items`` (default: all available) rollouts as fresh CPU copies."""
        items = []
        while max_items is None or len(items) < max_items:
            dest = {
                name: torch.empty(shape, dtype=dtype)
                for name, (shape, dtype) in self._fields.items()
            }
            read = self.pop_into(dest)
            if read is None:
                break
            items.append((read, dest))
        return items

    def _consume(self, read_count: int, dropped: int) -> None:
        if dropped:
            self._header[2] += dropped
        self._header[1] = read_count

    def _check_dest(self, dest: Mapping[str, torch.Tensor]) -> None:
        if dest.keys() != self._fields.keys():
            missing = sorted(self._fields.keys() - dest.keys())
            extra = sorted(dest.keys() - self._fields.keys())
            raise KeyError(
                f"dest fields do not match the ring: missing {missing}, unknown {extra}; "
                f"ring fields: {sorted(self._fields)}"
            )
        for name, (shape, _) in self._fields.items():
            if tuple(dest[name].shape) != shape:
                raise ValueError(
                    f"dest[{name!r}] has shape {tuple(dest[name].shape)}, the ring's slot shape is {shape}"
                )
