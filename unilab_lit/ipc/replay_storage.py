"""Off-policy transition store: packed float32 rows in shared memory with a named column map."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from unilab_lit.ipc.block import BlockLayout, SharedStructure, ShmHandle
from unilab_lit.validation import check_arg


def replay_columns(policy_dim: int, critic_dim: int, action_dim: int) -> dict[str, int]:
    """The off-policy column map: widths of obs, next_obs, actions, reward, done, truncated, critic, next_critic."""
    return {
        "obs": policy_dim,
        "next_obs": policy_dim,
        "actions": action_dim,
        "reward": 1,
        "done": 1,
        "truncated": 1,
        "critic": critic_dim,
        "next_critic": critic_dim,
    }


def _layout(capacity: int, width: int) -> BlockLayout:
    layout = BlockLayout()
    layout.add("write_ptr", (1,), torch.int64)
    layout.add("rows", (capacity, width), torch.float32)
    return layout


@dataclass(frozen=True)
class ReplayStorageHandle:
    """Picklable handle: attach with :meth:`attach`."""

    block: ShmHandle
    capacity: int
    columns: dict[str, int]

    def attach(self) -> ReplayStorage:
        """Map the storage in this process (non-owner)."""
        return ReplayStorage(self.capacity, self.columns, _attach=self.block)


class ReplayStorage(SharedStructure):
    """A FIFO ring of ``capacity`` packed float32 rows ``[capacity, width]``.

    ``write`` appends rows at the monotone write pointer (total rows ever written),
    wrapping around and overwriting the oldest rows; ``gather`` copies given physical rows
    into a preallocated destination. The pointer is advanced after the rows are in place,
    so a reader that snapshots it sees only complete rows below it; rows the *next* write
    will overwrite can be kept out of a sample with ``sample_indices(..., guard_rows=)``.

    Args:
        capacity: rows, > 0.
        columns: column name -> width (> 0), in row order; see :func:`replay_columns`.

    Raises:
        ValueError: a non-positive capacity or column width, or no columns.
    """

    def __init__(
        self, capacity: int, columns: Mapping[str, int], _attach: ShmHandle | None = None
    ) -> None:
        check_arg(capacity > 0, "capacity", capacity, "> 0")
        if not columns:
            raise ValueError("columns must name at least one column")
        bad = {name: w for name, w in columns.items() if w <= 0}
        check_arg(not bad, "column widths", bad, "> 0")
        self.capacity = int(capacity)
        """Rows the ring holds."""
        self._columns = {name: int(w) for name, w in columns.items()}
        self._slices: dict[str, slice] = {}
        start = 0
        for name, w in self._columns.items():
            self._slices[name] = slice(start, start + w)
            start += w
        self.width = start
        """Floats per row (sum of column widths)."""
        views = self._map(_layout(self.capacity, self.width), "replay", _attach)
        # The pointer through numpy: cheap scalar access, still one aligned 8-byte load/store.
        self._ptr = views["write_ptr"].numpy()
        self.rows = views["rows"]
        """The whole ``[capacity, width]`` storage (a shared view)."""

    @staticmethod
    def required_bytes(capacity: int, columns: Mapping[str, int]) -> int:
        """Shared-memory bytes of a storage with this capacity and column map."""
        return _layout(capacity, sum(columns.values())).nbytes

    @property
    def columns(self) -> dict[str, int]:
        """Column name -> width, in row order."""
        return dict(self._columns)

    @property
    def write_ptr(self) -> int:
        """Total rows ever written (monotone)."""
        return int(self._ptr[0])

    @property
    def size(self) -> int:
        """Rows currently stored: ``min(write_ptr, capacity)``."""
        return min(self.write_ptr, self.capacity)

    def column_slice(self, name: str) -> slice:
        """The column range of ``name`` within a row.

        Raises:
            KeyError: unknown column (the message lists the columns).
        """
        try:
            return self._slices[name]
        except KeyError:
            raise KeyError(
                f"unknown replay column {name!r}; columns: {list(self._columns)}"
            ) from None

    def column(self, name: str) -> torch.Tensor:
        """``[capacity, width(name)]`` view of one column of the storage."""
        return self.rows[:, self.column_slice(name)]

    def split(self, packed: torch.Tensor) -> dict[str, torch.Tensor]:
        """Column views of any packed ``[..., width]`` tensor (e.g. a gathered batch)."""
        if packed.shape[-1] != self.width:
            raise ValueError(f"packed rows must have width {self.width}, got {tuple(packed.shape)}")
        return {name: packed[..., s] for name, s in self._slices.items()}

    def handle(self) -> ReplayStorageHandle:
        """Picklable handle a spawn child uses to attach."""
        return ReplayStorageHandle(self._block.handle, self.capacity, self.columns)

    def write(self, rows: torch.Tensor | Mapping[str, torch.Tensor]) -> int:
        """Append ``n`` rows, splitting at the end of the ring; returns the new write pointer.

        Args:
            rows: packed ``[n, width]``, or one tensor per column, ``[n, width(col)]``
                (``[n]`` allowed for width-1 columns).

        Raises:
            KeyError: the dict lacks a column or names an unknown one.
            ValueError: inconsistent row counts or widths, or ``n > capacity``.
        """
        n = self._row_count(rows)
        ptr = self.write_ptr
        start = ptr % self.capacity
        first = min(n, self.capacity - start)
        for dst, src in (
            (slice(start, start + first), slice(0, first)),
            (slice(0, n - first), slice(first, n)),
        ):
            if dst.stop <= dst.start:
                continue
            if isinstance(rows, torch.Tensor):
                self.rows[dst].copy_(rows[src])
            else:
                for name, cols in self._slices.items():
                    self.rows[dst, cols].copy_(rows[name][src].reshape(-1, cols.stop - cols.start))
        self._ptr[0] = ptr + n
        return ptr + n

    def sample_indices(
        self, count: int, generator: torch.Generator | None = None, guard_rows: int = 0
    ) -> torch.Tensor:
        """``count`` uniform physical row indices among the stored rows.

        Args:
            count: indices to draw, > 0.
            generator: CPU generator (seeded by the caller for reproducibility).
            guard_rows: leave out the oldest ``guard_rows`` rows, which a concurrent writer
                of up to that many rows per write may be overwriting.

        Raises:
            ValueError: no row is eligible.
        """
        ptr = self.write_ptr
        size = min(ptr, self.capacity)
        # Only a full ring overwrites old rows; before that, new rows land past ptr.
        guard = guard_rows if ptr >= self.capacity else 0
        eligible = size - guard
        if count <= 0 or eligible <= 0:
            raise ValueError(
                f"cannot sample {count} rows: {size} stored, {guard} guarded (need count > 0 and rows left)"
            )
        logical = torch.randint(eligible, (count,), generator=generator)
        oldest = ptr - size + guard
        return (logical + oldest) % self.capacity

    def gather(self, indices: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """Copy rows ``indices`` (int64, physical) into the preallocated ``out`` ``[len, width]``."""
        return torch.index_select(self.rows, 0, indices, out=out)

    def state_dict(self) -> dict[str, Any]:
        """The stored rows, oldest first, and the write pointer (for an opt-in checkpoint)."""
        ptr, size = self.write_ptr, self.size
        order = (torch.arange(size) + (ptr - size)) % self.capacity
        return {"rows": self.rows[order].clone(), "write_ptr": ptr, "columns": self.columns}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore rows and write pointer saved by :meth:`state_dict`.

        Raises:
            ValueError: the saved column map differs from this storage's.
        """
        if dict(state["columns"]) != self._columns:
            raise ValueError(f"saved columns {state['columns']} differ from {self._columns}")
        rows = state["rows"][-self.capacity :]
        ptr = int(state["write_ptr"])
        size = rows.shape[0]
        positions = (torch.arange(size) + (ptr - size)) % self.capacity
        self.rows[positions] = rows.to(self.rows.dtype)
        self._ptr[0] = ptr

    def _row_count(self, rows: torch.Tensor | Mapping[str, torch.Tensor]) -> int:
        if isinstance(rows, torch.Tensor):
            # Spelled out rather than check_arg: this runs on every write, and the message
            # would be formatted each time.
            if rows.dim() != 2 or rows.shape[1] != self.width:
                raise ValueError(f"packed rows must be [n, {self.width}], got {tuple(rows.shape)}")
            n = rows.shape[0]
        else:
            if rows.keys() != self._columns.keys():
                raise KeyError(
                    f"rows must have exactly the columns {list(self._columns)}; "
                    f"missing {sorted(self._columns.keys() - rows.keys())}, "
                    f"unknown {sorted(rows.keys() - self._columns.keys())}"
                )
            counts = {name: t.shape[0] for name, t in rows.items()}
            n = next(iter(counts.values()))
            if any(c != n for c in counts.values()):
                raise ValueError(f"columns disagree on the row count: {counts}")
            for name, t in rows.items():
                w = self._columns[name]
                if t.numel() != n * w:
                    raise ValueError(f"column {name!r} must be [n, {w}], got {tuple(t.shape)}")
        if n > self.capacity:
            raise ValueError(f"cannot write {n} rows at once into a capacity of {self.capacity}")
        return n
