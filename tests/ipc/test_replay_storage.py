"""ReplayStorage: wrap-around writes, the column map, sampling, gather, checkpoint round trip."""

from __future__ import annotations

import pytest
import torch

from unilab_lit.ipc import ReplayStorage, replay_columns

COLUMNS = {"obs": 2, "actions": 1, "reward": 1}


def _rows(first: int, n: int, width: int = 4) -> torch.Tensor:
    return torch.arange(first, first + n, dtype=torch.float32)[:, None].expand(n, width)


def test_write_wraps_around_splitting_the_block() -> None:
    replay = ReplayStorage(5, COLUMNS)
    assert replay.write(_rows(0, 3)) == 3 and replay.size == 3
    assert replay.write(_rows(3, 4)) == 7
    assert replay.rows[:, 0].tolist() == [5.0, 6.0, 2.0, 3.0, 4.0]
    assert (replay.write_ptr, replay.size) == (7, 5)


def test_dict_write_places_each_column_by_name_across_the_wrap() -> None:
    replay = ReplayStorage(4, COLUMNS)
    replay.write(_rows(0, 3))
    replay.write(
        {
            "obs": torch.tensor([[1.0, 2.0], [3.0, 4.0]]),
            "actions": torch.tensor([[5.0], [6.0]]),
            "reward": torch.tensor([7.0, 8.0]),  # width-1 columns may be 1-D
        }
    )
    assert replay.column("obs")[[3, 0]].tolist() == [[1.0, 2.0], [3.0, 4.0]]
    assert replay.column("actions")[[3, 0], 0].tolist() == [5.0, 6.0]
    assert replay.column("reward")[[3, 0], 0].tolist() == [7.0, 8.0]
    batch = replay.split(replay.rows[[3]])
    assert batch["obs"].tolist() == [[1.0, 2.0]] and batch["reward"].tolist() == [[7.0]]


def test_unknown_or_missing_column_errors_list_the_columns() -> None:
    replay = ReplayStorage(4, COLUMNS)
    with pytest.raises(
        KeyError, match=r"unknown replay column 'next_obs'; columns: \['obs', 'actions', 'reward'\]"
    ):
        replay.column("next_obs")
    with pytest.raises(KeyError, match=r"missing \['reward'\]"):
        replay.write({"obs": torch.zeros(1, 2), "actions": torch.zeros(1, 1)})
    with pytest.raises(ValueError, match="cannot write 5 rows at once into a capacity of 4"):
        replay.write(_rows(0, 5))
    with pytest.raises(ValueError, match=r"packed rows must be \[n, 4\]"):
        replay.write(torch.zeros(2, 3))


def test_default_column_map_orders_transition_fields() -> None:
    columns = replay_columns(policy_dim=3, critic_dim=5, action_dim=2)
    assert list(columns) == [
        "obs",
        "next_obs",
        "actions",
        "reward",
        "done",
        "truncated",
        "critic",
        "next_critic",
    ]
    replay = ReplayStorage(8, columns)
    assert replay.width == 3 + 3 + 2 + 3 + 5 + 5
    assert replay.column_slice("critic") == slice(11, 16)


def test_gather_matches_index_select_into_preallocated_out() -> None:
    replay = ReplayStorage(16, COLUMNS)
    replay.write(torch.randn(16, 4))
    indices = replay.sample_indices(32, torch.Generator().manual_seed(0))
    out = torch.empty(32, 4)
    assert replay.gather(indices, out) is out
    assert torch.equal(out, torch.index_select(replay.rows, 0, indices))


def test_sample_indices_leave_out_guarded_oldest_rows_once_full() -> None:
    replay = ReplayStorage(10, COLUMNS)
    replay.write(_rows(0, 6))
    partial = replay.sample_indices(2000, torch.Generator().manual_seed(0), guard_rows=4)
    assert set(partial.tolist()) == set(range(6))  # not full yet: nothing is being overwritten
    replay.write(_rows(6, 7))  # ptr 13: the oldest rows are physical 3, 4, 5, 6
    full = replay.sample_indices(2000, torch.Generator().manual_seed(0), guard_rows=4)
    assert set(full.tolist()) == {7, 8, 9, 0, 1, 2}
    with pytest.raises(ValueError, match="cannot sample 1 rows: 10 stored, 10 guarded"):
        replay.sample_indices(1, guard_rows=10)


def test_state_dict_round_trip_restores_rows_in_order_and_pointer() -> None:
    replay = ReplayStorage(5, COLUMNS)
    replay.write(_rows(0, 4))
    replay.write(_rows(4, 3))
    state = replay.state_dict()
    assert state["rows"][:, 0].tolist() == [2.0, 3.0, 4.0, 5.0, 6.0]
    restored = ReplayStorage(5, COLUMNS)
    restored.load_state_dict(state)
    assert torch.equal(restored.rows, replay.rows) and restored.write_ptr == 7
    restored.write(_rows(7, 1))
    replay.write(_rows(7, 1))
    assert torch.equal(restored.rows, replay.rows)
    with pytest.raises(ValueError, match="saved columns"):
        ReplayStorage(5, {"obs": 4}).load_state_dict(state)
