"""Replay sidecar: chunked save/load from shared memory restores the storage exactly."""

from __future__ import annotations

import pytest
import torch

from unilab_lit.ipc import replay_sidecar
from unilab_lit.ipc.replay_storage import ReplayStorage

COLUMNS = {"obs": 3, "reward": 1}


@pytest.fixture
def storages():
    made: list[ReplayStorage] = []

    def make(capacity: int = 10, columns: dict[str, int] = COLUMNS) -> ReplayStorage:
        made.append(ReplayStorage(capacity, columns))
        return made[-1]

    yield make
    for storage in made:
        storage.unlink()


@pytest.mark.parametrize("written", [7, 23])  # partly filled; wrapped around twice
def test_load_restores_rows_write_pointer_and_samples_in_small_chunks(
    storages, tmp_path, monkeypatch, written
):
    monkeypatch.setattr(replay_sidecar, "_CHUNK_BYTES", 3 * 4 * 4)  # three rows per chunk
    source = storages()
    for rows in torch.arange(written * 4, dtype=torch.float32).reshape(written, 4).split(5):
        source.write(rows)
    path = tmp_path / "replay.bin"
    replay_sidecar.save_replay(source, path)
    restored = storages()
    replay_sidecar.load_replay(restored, path)
    assert restored.write_ptr == source.write_ptr and restored.size == source.size
    assert torch.equal(restored.rows[: source.size], source.rows[: source.size])
    indices = [s.sample_indices(5, torch.Generator().manual_seed(1)) for s in (source, restored)]
    assert torch.equal(indices[0], indices[1])
    assert [p.name for p in tmp_path.iterdir()] == ["replay.bin"]  # no partial file left


def test_load_rejects_a_storage_of_another_capacity(storages, tmp_path):
    source = storages(capacity=10)
    source.write(torch.ones(4, 4))
    replay_sidecar.save_replay(source, tmp_path / "replay.bin")
    with pytest.raises(ValueError, match="capacity 10 .* this run's replay has capacity 12"):
        replay_sidecar.load_replay(storages(capacity=12), tmp_path / "replay.bin")


def test_load_rejects_a_truncated_file(storages, tmp_path):
    source = storages()
    source.write(torch.ones(6, 4))
    path = tmp_path / "replay.bin"
    replay_sidecar.save_replay(source, path)
    path.write_bytes(path.read_bytes()[:-4])
    with pytest.raises(ValueError, match="truncated"):
        replay_sidecar.load_replay(storages(), path)
