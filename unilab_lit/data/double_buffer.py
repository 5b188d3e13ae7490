"""Off-policy double buffer: tick i+1 is packed and copied to the device while the learner trains on tick i."""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from collections.abc import Callable

import numpy as np
import torch

from unilab_lit import distributed
from unilab_lit.collector.process import CollectorProcess
from unilab_lit.ipc.futex import WAIT_SLICE_S
from unilab_lit.ipc.lockstep import NUM_SLOTS, LockstepLink
from unilab_lit.ipc.replay_storage import ReplayStorage
from unilab_lit.telemetry import tracing

log = logging.getLogger(__name__)

# Interval of the warm-up progress messages.
_WARMUP_LOG_S = 2.0
# How long close() waits for the copier thread (it never blocks on anything but a copy).
_JOIN_S = 5.0


def sample_seed(seed: int, tick: int) -> int:
    """Seed of the replay indices drawn for ``tick``: a hash of the run's seed and the tick.

    Fits the link's int64 request field; distinct ticks give unrelated index streams.
    """
    state = np.random.SeedSequence([seed % 2**64, tick]).generate_state(1, np.uint64)
    return int(state[0]) >> 1


class DoubleBufferPipeline:
    """Two host slots (in the ``LockstepLink``) and two device slots, hot and cold.

    Tick ``t`` is the learner iteration that trains on the batch packed after the collector
    took the ``t``-th step release. :meth:`next` waits until the batch of tick ``t`` is in its
    device slot (``t % 2``), makes it hot, and before returning releases the steps of tick
    ``t + 1`` and requests its pack into the other host slot (``min_write_ptr`` = the rows of
    tick ``t + 1``, so the batch includes them). While the learner trains on tick ``t``, the
    collector steps, its pack thread gathers tick ``t + 1``, and this object's copier thread
    copies it into the cold device slot as soon as the pack completes.

    On CUDA the host slots are page-locked in place (``cudaHostRegister``) and the copy runs on
    a side stream: it waits for an event the learner's stream records when the slot is given
    back (so queued kernels that still read tick ``t - 1`` finish first), and the learner's
    stream waits for the copy's event before using a slot. Elsewhere the copy is a plain
    ``copy_`` in the copier thread.

    The first :meth:`next` releases the warm-up ticks at once, so the collector fills the replay
    to ``warmup_rows`` without waiting for the learner; the first batch is packed after them.
    Indices are drawn by the collector from ``sample_seed(seed, tick_offset + t)`` over the
    rows stored at pack time, which the lock step fixes: the batches are a function of the seed,
    the tick and the replay contents.

    Errors, none of which leave a wait unbounded: a dead, failed or stalled collector raises its
    ``CollectorError``; a pack completed for another tick raises ``RuntimeError`` ("tick
    mismatch"); no replay progress and no batch within ``timeout_s`` raises ``TimeoutError``;
    after any of them, and after :meth:`close`, :meth:`next` raises ``RuntimeError``. Once
    ``stop_requested()`` is true, a wait for a batch ends and :meth:`next` returns ``None``
    from then on (training stops).

    Args:
        link: The learner's ``LockstepLink``; its ``sample_count`` rows make one batch.
        replay: The learner's ``ReplayStorage`` the collector writes into.
        collector: The started collector (liveness checks while waiting).
        rows_per_tick: Replay rows one tick adds, ``num_envs × env_steps_per_sync`` (>= 1).
        warmup_rows: Rows the replay holds before the first batch is packed (>= 1).
        device: Device of the slots the learner reads.
        seed: Seed of the replay sampling.
        timeout_s: Longest wait without replay progress before :meth:`next` fails (> 0).
        tick_offset: Ticks taken in earlier runs of a resumed fit; seeds continue after them.
        synchronous: Release tick ``t + 1`` only when the learner asks for its batch (after
            iteration ``t`` has published its weights) instead of while it trains on tick ``t``:
            no overlap, but the collector always acts with the weights of the iteration before,
            so a run depends only on its seeds, and between iterations the collector is idle
            with exactly the ticks trained on in the replay (an exact checkpoint).
        stop_requested: Polled while the learner waits: a stop request ends the wait.

    Raises:
        ValueError: if a size, the timeout or the offset is out of range, or ``link`` and
            ``replay`` disagree on the row width.
        RuntimeError: if CUDA cannot page-lock the host slots.
    """

    def __init__(
        self,
        link: LockstepLink,
        replay: ReplayStorage,
        collector: CollectorProcess,
        rows_per_tick: int,
        warmup_rows: int,
        device: torch.device,
        seed: int = 0,
        timeout_s: float = 120.0,
        tick_offset: int = 0,
        synchronous: bool = False,
        stop_requested: Callable[[], bool] | None = None,
    ) -> None:
        if rows_per_tick < 1:
            raise ValueError(f"rows_per_tick must be >= 1, got {rows_per_tick}")
        if not 1 <= warmup_rows <= replay.capacity:
            raise ValueError(
                f"warmup_rows must be in [1, replay capacity {replay.capacity}], got {warmup_rows}"
            )
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        if tick_offset < 0:
            raise ValueError(f"tick_offset must be >= 0, got {tick_offset}")
        if link.width != replay.width:
            raise ValueError(f"link width {link.width} differs from replay width {replay.width}")
        self._link = link
        self._replay = replay
        self._collector = collector
        self.rows_per_tick = rows_per_tick
        self.warmup_rows = warmup_rows
        self.device = torch.device(device)
        self.seed = seed
        self.timeout_s = timeout_s
        self.tick_offset = tick_offset
        self.synchronous = synchronous
        self._stop_requested = stop_requested
        self._stopped = False
        self.tick = 0  # tick of the batch last returned; 0 before the first
        self.warmup_ticks = 0
        self.last_wait_s = 0.0
        self._base_ptr = 0
        self._closed = False
        self._failure: BaseException | None = None
        self._cuda = self.device.type == "cuda"
        shape = (link.sample_count, link.width)
        self._device_slots = [torch.empty(shape, device=self.device) for _ in range(NUM_SLOTS)]
        self._copy_stream = torch.cuda.Stream(self.device) if self._cuda else None
        self._copied = [torch.cuda.Event() for _ in range(NUM_SLOTS)] if self._cuda else []
        self._released = [torch.cuda.Event() for _ in range(NUM_SLOTS)] if self._cuda else []
        self._pinned_ptr: int | None = None
        if self._cuda:
            self._pin_host_slots()
        # Copier state: ticks to copy in, the newest copied tick out (``_done`` announces it).
        self._jobs: queue.SimpleQueue[int | None] = queue.SimpleQueue()
        self._done = threading.Event()
        self._copied_tick = 0
        self._copier_error: BaseException | None = None
        self._stop = threading.Event()
        self._copier = threading.Thread(target=self._copy_loop, name="replay-h2d", daemon=True)
        self._copier.start()

    @property
    def sample_count(self) -> int:
        """Rows of one batch."""
        return self._link.sample_count

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has run."""
        return self._closed

    def next(self) -> torch.Tensor | None:
        """The packed batch of the next tick, ``[sample_count, width]`` on ``device``.

        The tensor is a device slot: valid until the following call, which hands the slot back
        to the copier. The first call runs the warm-up. ``None`` once a stop request ended a
        wait.

        Raises:
            RuntimeError: after :meth:`close` or an earlier failure, or on a tick mismatch.
            CollectorError: the collector failed, died or stalled.
            TimeoutError: no replay progress and no batch within ``timeout_s``.
        """
        if self._closed:
            raise RuntimeError("DoubleBufferPipeline.next() after close()")
        if self._failure is not None:
            raise RuntimeError(
                f"DoubleBufferPipeline.next() after a failure at tick {self.tick + 1}"
            ) from self._failure
        if self._stopped:
            return None
        try:
            return self._advance()
        except BaseException as exc:
            self._failure = exc
            raise

    def close(self) -> None:
        """Stop the copier, wait for copies in flight, unpin the host slots. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self._jobs.put(None)
        self._copier.join(_JOIN_S)
        if self._copier.is_alive():
            log.warning("replay copier thread did not stop within %.0f s", _JOIN_S)
        if self._copy_stream is not None:
            self._copy_stream.synchronize()
        if self._pinned_ptr is not None:
            torch.cuda.cudart().cudaHostUnregister(self._pinned_ptr)
            self._pinned_ptr = None

    # ------------------------------------------------------------------------ learner side
    def _advance(self) -> torch.Tensor | None:
        with tracing.timed("wait_for_data") as wait:
            if self.tick == 0:
                tick = self._start()
            else:
                tick = self.tick + 1
                if self.synchronous:
                    self._request(tick)
            self._stopped = not self._wait_copied(tick)
        self.last_wait_s = wait.seconds
        if self._stopped:
            return None
        slot = tick % NUM_SLOTS
        if self._cuda:
            torch.cuda.current_stream(self.device).wait_event(self._copied[slot])
        self.tick = tick
        if not self.synchronous:
            with tracing.span("request_next_pack"):
                self._request(tick + 1)
        return self._device_slots[slot]

    def _start(self) -> int:
        """Release the warm-up ticks and request the first batch; returns its tick."""
        self._base_ptr = self._replay.write_ptr
        missing = max(self.warmup_rows - self._replay.size, 1)
        first = math.ceil(missing / self.rows_per_tick)
        self.warmup_ticks = first - 1
        if self.warmup_ticks:
            log.info(
                "replay warm-up: %d ticks (%d rows) before the first batch",
                self.warmup_ticks,
                self.warmup_ticks * self.rows_per_tick,
            )
        for tick in range(1, first):
            self._link.release_steps(tick)
        self._request(first)
        return first

    def _request(self, tick: int) -> None:
        """Release the steps of ``tick`` and ask for its pack into slot ``tick % 2``."""
        slot = tick % NUM_SLOTS
        if self._cuda:
            # The device slot held tick - 2: everything queued so far on the learner's stream
            # may still read it; the copy into it waits for this point.
            self._released[slot].record(torch.cuda.current_stream(self.device))
            # The host slot's copy of tick - 2 must be done before the collector refills it.
            self._copied[slot].synchronize()
        self._link.release_steps(tick)
        self._done.clear()
        self._link.request_pack(
            tick,
            slot,
            seed=sample_seed(self.seed, self.tick_offset + tick),
            min_write_ptr=self._base_ptr + tick * self.rows_per_tick,
        )
        self._jobs.put(tick)

    def _wait_copied(self, tick: int) -> bool:
        """Wait until ``tick`` is in its device slot; ``False`` if a stop request came first.

        Under DDP the ranks wait together (``unilab_lit.distributed.wait_on_every_rank``): a
        stop request on any rank ends the wait of every rank whenever one of them has no batch.
        """
        warming_up = tick == self.warmup_ticks + 1 and self.warmup_ticks > 0
        progress_ptr = self._replay.write_ptr
        progress_at = next_log = time.monotonic()

        def wait(seconds: float) -> bool:
            nonlocal progress_ptr, progress_at, next_log
            until = time.monotonic() + seconds
            # Between two collector liveness checks the learner blocks on the copier's event.
            while not self._done.wait(WAIT_SLICE_S):
                if self._stopping():
                    return False
                self._collector.check()
                now = time.monotonic()
                ptr = self._replay.write_ptr
                if ptr != progress_ptr:
                    progress_ptr, progress_at = ptr, now
                elif now - progress_at > self.timeout_s:
                    raise TimeoutError(
                        f"no replay batch for tick {tick} and no new replay rows within "
                        f"{self.timeout_s} s while the collector is alive; raise "
                        "data.init_args.data_timeout_s for slow tasks"
                    )
                if warming_up and now >= next_log:
                    next_log = now + _WARMUP_LOG_S
                    log.info("replay warm-up: %d/%d rows", self._replay.size, self.warmup_rows)
                if now >= until:
                    return False
            return True

        if not distributed.wait_on_every_rank(wait, self._stopping):
            return False
        if self._copier_error is not None:
            raise RuntimeError(f"replay batch for tick {tick} failed") from self._copier_error
        if self._copied_tick != tick:
            raise RuntimeError(
                f"tick mismatch: waiting for tick {tick}, copied tick {self._copied_tick}"
            )
        if warming_up:
            log.info("replay warm-up done: %d rows; training starts", self._replay.size)
        return True

    def _stopping(self) -> bool:
        return self._stop_requested is not None and self._stop_requested()

    def _pin_host_slots(self) -> None:
        first, last = self._link.slot(0), self._link.slot(NUM_SLOTS - 1)
        start = first.data_ptr()
        nbytes = last.data_ptr() + last.numel() * last.element_size() - start
        error = int(torch.cuda.cudart().cudaHostRegister(start, nbytes, 0))
        if error != 0:
            raise RuntimeError(
                f"cudaHostRegister of the {nbytes}-byte replay pack slots failed (cudaError "
                f"{error}); the host-to-device copies cannot run asynchronously"
            )
        if not (first.is_pinned() and last.is_pinned()):
            torch.cuda.cudart().cudaHostUnregister(start)
            raise RuntimeError("the replay pack slots are not reported pinned after registration")
        self._pinned_ptr = start

    # ------------------------------------------------------------------------- copier side
    def _copy_loop(self) -> None:
        try:
            while (tick := self._jobs.get()) is not None:
                with tracing.span("wait_for_pack"):
                    while not self._link.pack_done(tick):
                        if self._stop.is_set():
                            return
                        self._link.wait_pack(WAIT_SLICE_S)
                # On CUDA this is the submission of the copy on the side stream.
                with tracing.span("device_copy"):
                    self._copy(tick % NUM_SLOTS)
                self._copied_tick = tick
                self._done.set()
        except BaseException as exc:
            self._copier_error = exc
            self._done.set()

    def _copy(self, slot: int) -> None:
        host, device = self._link.slot(slot), self._device_slots[slot]
        if self._copy_stream is None:
            device.copy_(host)
            return
        with torch.cuda.stream(self._copy_stream):
            self._copy_stream.wait_event(self._released[slot])
            device.copy_(host, non_blocking=True)
            self._copied[slot].record(self._copy_stream)
