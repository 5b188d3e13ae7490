"""What the fit benches share: config overrides, the lifted env-step budget and the timing callback.

Imported inside the benches' functions, never at their module level: the collector is a spawn
child that re-imports the bench script before its first line.
"""

from __future__ import annotations

import time
from typing import Any

from lightning.pytorch import Callback, LightningModule, Trainer

from unilab_lit.callbacks import EnvStepBudget
from unilab_lit.collector.link import collector_link
from unilab_lit.collector.options import CollectorOptions
from unilab_lit.telemetry import metrics

_COLLECTOR_KEYS = {field.name for field in CollectorOptions.__dataclass_fields__.values()}


def data_overrides(values: dict[str, Any]) -> list[str]:
    """``--data.init_args...`` overrides for ``values`` that are not ``None``; collector options
    (``task``, ``num_envs``, ...) go into ``data.init_args.collector``."""
    return [
        f"--data.init_args.{'collector.' if key in _COLLECTOR_KEYS else ''}{key}={value}"
        for key, value in values.items()
        if value is not None
    ]


def lift_env_step_budget(callbacks: list[Callback]) -> None:
    """Drop the config's ``EnvStepBudget`` from a trainer's ``callbacks``: the bench stops fit
    itself (threshold, clock), as it lifts ``max_steps``."""
    callbacks[:] = [c for c in callbacks if not isinstance(c, EnvStepBudget)]


class FitMeter(Callback):
    """Times ``seconds`` of ``fit`` from the end of its first iteration, then stops it.

    Per iteration it adds the iteration's wall time (batch start to batch end) and the data
    set's wait for that batch (``FeedStats.last_wait_s``); the learner's own time is their
    difference. When time is up, :attr:`result` holds:

    - ``seconds``, ``iterations``, ``iterations_per_s``;
    - ``env_steps_per_s``: growth of the env-step counter (data the learner consumed) per second;
    - ``learner_ms``: the learner's own time per iteration; ``learner_busy``: its share of the
      wall time; ``wait_share``: the wait's share of the iterations' time;
    - ``dropped``: rollouts the ring dropped meanwhile;
    - ``collector_reported`` and ``policy_lag``: the latest logged values (``nan`` if none).

    :attr:`stopped_at` is the ``perf_counter`` time of the stop.

    Args:
        seconds: Length of the timed window (> 0).
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.result: dict[str, float] = {}
        self.stopped_at = 0.0
        self._began: float | None = None
        self._batch_began = 0.0
        self._iteration_s = 0.0
        self._wait_s = 0.0
        self._iterations = 0
        self._steps0 = 0
        self._dropped0 = 0

    def on_train_batch_start(
        self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._batch_began = time.perf_counter()

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        now = time.perf_counter()
        link = collector_link(trainer)
        if self._began is None:  # the first iteration holds start-up and warm-up
            self._began, self._steps0, self._dropped0 = (
                now,
                link.feed.env_steps,
                link.transport.dropped,
            )
            return
        self._iteration_s += now - self._batch_began
        self._wait_s += link.feed.last_wait_s
        self._iterations += 1
        elapsed = now - self._began
        if elapsed < self.seconds:
            return
        learner_s = self._iteration_s - self._wait_s
        self.result = {
            "seconds": elapsed,
            "iterations": self._iterations,
            "iterations_per_s": self._iterations / elapsed,
            "env_steps_per_s": (link.feed.env_steps - self._steps0) / elapsed,
            "learner_ms": 1e3 * learner_s / self._iterations,
            "learner_busy": learner_s / elapsed,
            "wait_share": self._wait_s / self._iteration_s,
            "dropped": link.transport.dropped - self._dropped0,
            "collector_reported": _logged(trainer, metrics.COLLECTION_FPS),
            "policy_lag": _logged(trainer, metrics.POLICY_LAG),
        }
        self.stopped_at = time.perf_counter()
        trainer.should_stop = True


def _logged(trainer: Trainer, key: str) -> float:
    value = trainer.callback_metrics.get(key)
    return float("nan") if value is None else float(value)
