"""DoubleBufferPipeline: tick order, sampled rows, warm-up and errors (scripted peer and a real collector)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest
import torch

from unilab_lit.collector.options import CollectorConfig, CollectorOptions
from unilab_lit.collector.process import CollectorError, CollectorProcess
from unilab_lit.collector.writers import OffPolicyWriterSpec
from unilab_lit.data.double_buffer import DoubleBufferPipeline, sample_seed
from unilab_lit.envs.cartpole import CartpoleSwingup
from unilab_lit.envs.task_spec import TaskSpec
from unilab_lit.ipc import ReplayStorage, SharedWeights, flat_size, list_segments, replay_columns
from unilab_lit.ipc.lockstep import LockstepLink
from unilab_lit.nn.offpolicy_nets import DeterministicActor
from unilab_lit.nn.policies import PolicySpec

OBS = CartpoleSwingup.OBS_SIZE
ACT = 1
N = 4
STEPS_PER_SYNC = 2
ROWS_PER_TICK = N * STEPS_PER_SYNC
SAMPLES = 24
SEED = 3
_HIDDEN = {"hidden_dims": [8]}
ACTOR = {"obs_size": OBS, "action_size": ACT, **_HIDDEN}


class _Alive:
    """Collector stand-in for scripted tests: always alive; ``fail`` makes ``check`` raise."""

    def __init__(self) -> None:
        self.fail: BaseException | None = None

    def check(self) -> None:
        if self.fail is not None:
            raise self.fail


@pytest.fixture
def blocks() -> Iterator[tuple[ReplayStorage, LockstepLink]]:
    replay = ReplayStorage(256, replay_columns(OBS, OBS, ACT))
    link = LockstepLink(SAMPLES, replay.width)
    try:
        yield replay, link
    finally:
        link.unlink()
        replay.unlink()


def _pipeline(replay, link, collector, **kwargs) -> DoubleBufferPipeline:
    kwargs = {"rows_per_tick": ROWS_PER_TICK, "warmup_rows": 1, "device": "cpu", **kwargs}
    return DoubleBufferPipeline(link, replay, collector, seed=SEED, **kwargs)


def _serve_once(link: LockstepLink, reply) -> threading.Thread:
    """A peer thread that answers the first pack request with ``reply(request)``."""

    def serve() -> None:
        deadline = time.monotonic() + 10
        while (request := link.pending_request()) is None and time.monotonic() < deadline:
            time.sleep(0.001)
        if request is not None:
            reply(request)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def _copier_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "replay-h2d"]


# ------------------------------------------------------------------------- scripted peer
def test_sample_seed_is_a_function_of_seed_and_tick():
    assert sample_seed(1, 5) == sample_seed(1, 5)
    seeds = {sample_seed(s, t) for s in (0, 1) for t in (1, 2, 3)}
    assert len(seeds) == 6
    assert all(0 <= s < 2**63 for s in seeds)


def test_first_request_releases_warmup_ticks_and_seeds_from_offset_plus_tick(blocks):
    replay, link = blocks
    pipeline = _pipeline(
        replay, link, _Alive(), warmup_rows=3 * ROWS_PER_TICK - 1, tick_offset=7, timeout_s=0.2
    )
    try:
        with pytest.raises(TimeoutError):  # nobody answers; the request is inspected instead
            pipeline.next()
        request = link.pending_request()
        assert pipeline.warmup_ticks == 2
        assert link.released == 3
        assert (request.tick, request.slot) == (3, 1)
        assert request.seed == sample_seed(SEED, 7 + 3)
        assert request.min_write_ptr == 3 * ROWS_PER_TICK
    finally:
        pipeline.close()


def test_stop_request_ends_the_wait_for_a_batch_and_every_later_next_returns_none(blocks):
    replay, link = blocks
    stop = threading.Event()
    pipeline = _pipeline(replay, link, _Alive(), timeout_s=60, stop_requested=stop.is_set)
    try:
        threading.Timer(0.2, stop.set).start()  # nobody answers the pack request
        assert pipeline.next() is None
        assert pipeline.next() is None
        assert pipeline.tick == 0
    finally:
        pipeline.close()


def test_pack_completed_for_another_tick_raises_tick_mismatch(blocks):
    replay, link = blocks
    pipeline = _pipeline(replay, link, _Alive(), timeout_s=10)
    _serve_once(link, lambda request: link.mark_pack_done(request._replace(tick=request.tick + 1)))
    try:
        with pytest.raises(RuntimeError, match="tick 1 failed") as info:
            pipeline.next()
        assert "tick mismatch: waiting for tick 1, packed tick 2" in str(info.value.__cause__)
        with pytest.raises(RuntimeError, match="after a failure at tick 1"):
            pipeline.next()
    finally:
        pipeline.close()


def test_no_pack_and_no_replay_progress_raises_timeout_instead_of_hanging(blocks):
    replay, link = blocks
    pipeline = _pipeline(replay, link, _Alive(), timeout_s=0.3)
    began = time.monotonic()
    try:
        with pytest.raises(TimeoutError, match="no replay batch for tick 1"):
            pipeline.next()
        assert time.monotonic() - began < 5
    finally:
        pipeline.close()


def test_collector_failure_while_waiting_raises_its_error(blocks):
    replay, link = blocks
    collector = _Alive()
    pipeline = _pipeline(replay, link, collector)
    threading.Timer(0.2, lambda: setattr(collector, "fail", CollectorError("boom"))).start()
    try:
        with pytest.raises(CollectorError, match="boom"):
            pipeline.next()
    finally:
        pipeline.close()


def test_next_after_close_raises_and_close_is_idempotent_and_stops_the_copier(blocks):
    replay, link = blocks
    pipeline = _pipeline(replay, link, _Alive())
    assert len(_copier_threads()) == 1
    pipeline.close()
    pipeline.close()
    assert pipeline.closed
    assert _copier_threads() == []
    with pytest.raises(RuntimeError, match=r"next\(\) after close\(\)"):
        pipeline.next()


def test_constructor_rejects_warmup_beyond_capacity(blocks):
    replay, link = blocks
    with pytest.raises(ValueError, match="warmup_rows must be in"):
        _pipeline(replay, link, _Alive(), warmup_rows=replay.capacity + 1)


# ------------------------------------------------------------------------ real collector
def _gone(pid: int) -> bool:
    return all(child.pid != pid for child in multiprocessing.active_children()) and not (
        os.path.exists(f"/proc/{pid}")
    )


@pytest.fixture
def start_collector() -> Iterator:
    """``start_collector(weights=None) -> (collector, replay, link)``; all released at teardown.

    Without ``weights`` the actor keeps its seeded initial weights and steps at once; with a
    ``SharedWeights`` that is never published it waits for weights and never steps.
    """
    before = set(list_segments(os.getpid()))
    collectors: list[CollectorProcess] = []
    blocks: list[ReplayStorage | LockstepLink] = []

    def start(weights: SharedWeights | None = None):
        replay = ReplayStorage(1024, replay_columns(OBS, OBS, ACT))
        link = LockstepLink(SAMPLES, replay.width)
        blocks.extend([replay, link])
        collector = CollectorProcess(
            CollectorConfig(
                CollectorOptions(
                    TaskSpec("CartpoleSwingup", {"max_episode_steps": 20}), N, seed=SEED
                ),
                policy=PolicySpec(f"{DeterministicActor.__module__}:DeterministicActor", ACTOR),
                writer=OffPolicyWriterSpec(replay.handle(), link.handle(), STEPS_PER_SYNC),
                weights=None if weights is None else weights.handle(),
            )
        )
        collectors.append(collector)
        collector.start(timeout=120)
        return collector, replay, link

    try:
        yield start
    finally:
        for collector in collectors:
            collector.stop()
        for block in blocks:
            block.unlink()
    assert set(list_segments(os.getpid())) == before
    assert all(_gone(collector.pid) for collector in collectors)


def _rows_sampled_for(replay: ReplayStorage, tick: int, seed: int) -> torch.Tensor:
    """The rows the collector packs for ``tick``: indices drawn over the replay as of that tick."""
    snapshot = ReplayStorage(replay.capacity, replay.columns)
    try:
        snapshot.write(replay.rows[: tick * ROWS_PER_TICK])
        indices = snapshot.sample_indices(SAMPLES, torch.Generator().manual_seed(seed))
    finally:
        snapshot.unlink()
    return replay.rows[indices]


def test_batches_arrive_in_tick_order_holding_the_rows_sampled_for_each_tick(start_collector):
    collector, replay, link = start_collector()
    warmup_rows = 5 * ROWS_PER_TICK - 3  # not a whole number of ticks: rounds up to 5
    pipeline = _pipeline(replay, link, collector, warmup_rows=warmup_rows)
    try:
        for tick in range(5, 9):
            batch = pipeline.next()
            assert pipeline.tick == tick
            # Trains on tick t while tick t + 1 is released, and nothing beyond it.
            assert link.released == tick + 1
            # The snapshot includes the rows of tick t itself (drawn over tick * rows rows).
            expected = _rows_sampled_for(replay, tick, sample_seed(SEED, tick))
            torch.testing.assert_close(batch, expected, rtol=0, atol=0)
        assert pipeline.warmup_ticks == 4
    finally:
        pipeline.close()


def test_collector_killed_while_the_learner_waits_raises_collector_error_within_5s(
    start_collector,
):
    weights = SharedWeights(flat_size(DeterministicActor(OBS, ACT, **_HIDDEN)))
    try:
        collector, replay, link = start_collector(weights)  # waits for weights: never steps
        pipeline = _pipeline(replay, link, collector)
        killed_at: list[float] = []

        def kill() -> None:
            killed_at.append(time.monotonic())
            os.kill(collector.pid, signal.SIGKILL)

        threading.Timer(0.5, kill).start()
        try:
            with pytest.raises(CollectorError, match="SIGKILL"):
                pipeline.next()
            assert time.monotonic() - killed_at[0] < 5
        finally:
            pipeline.close()
    finally:
        weights.unlink()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_pipeline_pins_host_slots_and_copies_on_a_side_stream(start_collector):
    collector, replay, link = start_collector()
    pipeline = _pipeline(replay, link, collector, device="cuda", warmup_rows=2 * ROWS_PER_TICK)
    try:
        assert link.slot(0).is_pinned() and link.slot(1).is_pinned()
        for tick in range(2, 6):
            batch = pipeline.next()
            assert batch.device.type == "cuda"
            # Kernels on the learner's stream see the copy: the stream waited for its event.
            checksum = (batch * 1.0).sum(dim=1).cpu()
            expected = _rows_sampled_for(replay, tick, sample_seed(SEED, tick))
            torch.testing.assert_close(batch.cpu(), expected, rtol=0, atol=0)
            torch.testing.assert_close(checksum, expected.sum(dim=1))
    finally:
        pipeline.close()
    assert not link.slot(0).is_pinned()
