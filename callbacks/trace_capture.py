"""One Perfetto timeline per run: the learner's phases and the collector's spans in one trace file."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from torch.utils.hooks import RemovableHandle
from typing_extensions import override

from unilab_lit.collector.link import CollectorLink, collector_link, has_collector_link
from unilab_lit.telemetry import metrics as keys
from unilab_lit.telemetry import tracing
from unilab_lit.telemetry.trace_file import TraceStore
from unilab_lit.validation import check_arg

log = logging.getLogger(__name__)

# Logged values sampled as counters (when the run logs them).
_COUNTER_KEYS = {keys.POLICY_LAG: "policy_lag"}
_PROCESS_ORDER = ("learner", "collector")
# The learner's own events move into the store in batches this large (a drain costs ~0.1 ms).
_DRAIN_EVENTS = 4096


class Tracing(Callback):
    """Writes a Chrome/Perfetto trace-event JSON with the learner's and the collector's tracks.

    While fitting, the learner process records into a ``unilab_lit.telemetry.tracing.TraceRecorder``
    installed as the process's current recorder, so library code adds its own spans
    (``wait_for_data`` and ``stage_to_device`` in the data set, ``WeightSync.publish``, a
    pipeline thread's copies). This callback adds ``training_step`` (from
    ``on_train_batch_start`` to ``on_train_batch_end``), ``backward`` (every
    ``manual_backward`` or automatic backward) and ``optimizer_step`` (every ``step()`` of each
    optimizer, also the ones a manual-optimization module takes on the raw optimizer; with
    several optimizers the name carries the index), and samples ``policy_lag`` when the module
    logs it, every ``log_every_n_steps`` iterations (reading logged values makes Lightning
    compute every logged metric: about a millisecond, too much to pay each iteration).

    With a data module that runs a collector (``collector_link``) the collector records too
    (env step, policy inference, shared-memory write, weight/statistics sync, wait for the
    learner, the pack thread, and ``env_steps_per_s`` / ``replay_size`` counters) and ships
    batches over its metrics channel; they are merged after every iteration. Timestamps of both processes come from the same
    system-wide monotonic clock. Without this callback nothing is recorded anywhere.

    The file is written at the end of ``fit`` and when ``fit`` fails.

    Args:
        path: Output file; ``None`` writes ``trace.json`` into ``trainer.log_dir`` (the
            logger's directory, else ``default_root_dir``), ``trace_rank<r>.json`` per rank
            when there are several.
        max_events: Most events kept (>= 1); a longer run keeps its newest ones (the file
            grows by about 100 bytes an event).
        collector_timeout_s: How long the end of ``fit`` waits for the collector's last batch
            (>= 0).

    Raises:
        ValueError: if ``max_events`` or ``collector_timeout_s`` is out of range.
    """

    def __init__(
        self,
        path: str | None = None,
        max_events: int = 1_000_000,
        collector_timeout_s: float = 2.0,
    ) -> None:
        check_arg(max_events >= 1, "Tracing.max_events", max_events, ">= 1")
        check_arg(
            collector_timeout_s >= 0, "Tracing.collector_timeout_s", collector_timeout_s, ">= 0"
        )
        self.path = path
        self.max_events = max_events
        self.collector_timeout_s = collector_timeout_s
        self._recorder: tracing.TraceRecorder | None = None
        self._store: TraceStore | None = None
        self._link: CollectorLink | None = None  # the collector that records too, if any
        self._path: Path | None = None
        self._hooks: list[RemovableHandle] = []
        self._batch_began = 0
        self._backward_began = 0
        self._step_began: dict[int, int] = {}

    @override
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage == "fit":
            self._start_recording(trainer)

    @override
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._hook_optimizers(trainer.optimizers)

    @override
    def on_train_batch_start(
        self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._batch_began = tracing.now_ns()

    @override
    def on_before_backward(
        self, trainer: Trainer, pl_module: LightningModule, loss: torch.Tensor
    ) -> None:
        self._backward_began = tracing.now_ns()

    @override
    def on_after_backward(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._recorder is not None:
            self._recorder.add_span("backward", self._backward_began, tracing.now_ns())

    @override
    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self._recorder is None:
            return
        self._recorder.add_span("training_step", self._batch_began, tracing.now_ns())
        if trainer.global_step % trainer.log_every_n_steps == 0:
            self._sample_counters(trainer)
        self._collect(final=False)

    @override
    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._finish()

    @override
    def on_exception(
        self, trainer: Trainer, pl_module: LightningModule, exception: BaseException
    ) -> None:
        try:
            self._finish()
        except Exception:
            # Raising here would replace the exception that stopped the run.
            log.exception("Tracing: could not write the trace after the run failed")

    @override
    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        self._stop_recording()

    def _start_recording(self, trainer: Trainer) -> None:
        # Resolved now, on every rank: trainer.log_dir broadcasts, which a rank alone on an
        # exception path would wait in forever.
        self._path = self._output_path(trainer)
        name = "learner" if trainer.world_size == 1 else f"learner{trainer.global_rank}"
        self._recorder = tracing.TraceRecorder(name)
        self._recorder.name_thread("main")
        self._store = TraceStore(self.max_events)
        tracing.install(self._recorder)
        if has_collector_link(trainer):
            self._link = collector_link(trainer)
            self._link.inbox.start_trace()
        else:
            log.info(
                "Tracing: the data module runs no collector; the trace has learner tracks only"
            )

    def _hook_optimizers(self, optimizers: list[torch.optim.Optimizer]) -> None:
        # torch's own step hooks see every step(), also those that bypass Lightning's
        # optimizer wrapper (APPO steps the raw optimizer for all but its last minibatch).
        for index, optimizer in enumerate(optimizers):
            name = "optimizer_step" if len(optimizers) == 1 else f"optimizer_step/{index}"
            self._hooks.append(optimizer.register_step_pre_hook(self._step_pre_hook(index)))
            self._hooks.append(optimizer.register_step_post_hook(self._step_post_hook(index, name)))

    def _step_pre_hook(self, index: int) -> Any:
        def hook(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
            self._step_began[index] = tracing.now_ns()

        return hook

    def _step_post_hook(self, index: int, name: str) -> Any:
        def hook(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
            if self._recorder is not None:
                self._recorder.add_span(name, self._step_began[index], tracing.now_ns())

        return hook

    def _sample_counters(self, trainer: Trainer) -> None:
        assert self._recorder is not None
        for key, name in _COUNTER_KEYS.items():
            value = trainer.callback_metrics.get(key)
            if value is not None:
                self._recorder.counter(name, float(value))

    def _collect(self, final: bool) -> None:
        """Move the learner's new events and the collector's shipped batches into the store."""
        assert self._recorder is not None and self._store is not None
        if final or self._recorder.pending >= _DRAIN_EVENTS:
            self._store.add(self._recorder.drain())
        link = self._link
        if link is not None:
            inbox = link.inbox
            batches = (
                inbox.stop_trace(self.collector_timeout_s) if final else inbox.drain_trace()[0]
            )
            for batch in batches:
                self._store.add(batch)

    def _finish(self) -> None:
        if self._recorder is None or self._store is None or self._path is None:
            return
        self._collect(final=True)
        path = self._path
        self._store.write(path, first_processes=_PROCESS_ORDER)
        if self._store.dropped_events:
            log.warning(
                "Tracing: kept the newest %d events, dropped %d older ones (raise max_events)",
                self._store.num_events,
                self._store.dropped_events,
            )
        log.info("Tracing: wrote %d events to %s", self._store.num_events, path)
        self._stop_recording()

    def _output_path(self, trainer: Trainer) -> Path:
        if self.path is not None:
            return Path(self.path)
        name = "trace.json" if trainer.world_size == 1 else f"trace_rank{trainer.global_rank}.json"
        return Path(trainer.log_dir or trainer.default_root_dir) / name

    def _stop_recording(self) -> None:
        for handle in self._hooks:
            handle.remove()
        self._hooks.clear()
        if self._recorder is not None and tracing.current() is self._recorder:
            tracing.install(None)
        self._recorder = None
        self._store = None
        self._link = None
        self._path = None
