"""Turns the collector's metrics messages into logged episode statistics and throughput."""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_only
from typing_extensions import override

from unilab_lit import distributed
from unilab_lit.collector.link import collector_link
from unilab_lit.envs.spec import METRIC_PREFIX, REWARD_PREFIX, episode_log_key
from unilab_lit.ipc.channel import EPISODES, TIMING
from unilab_lit.telemetry import metrics as keys
from unilab_lit.telemetry.log_schedule import loggers_write_this_step
from unilab_lit.validation import check_arg

logger = logging.getLogger(__name__)

_PROG_BAR_KEYS = (keys.ENV_STEPS, keys.TOTAL_FPS, keys.MEAN_REWARD)


# Figures of the job = the sum of the ranks' (each rank collects and learns its own env steps).
_SUMMED = (
    keys.ENV_STEPS,
    keys.LEARNED_ENV_STEPS,
    keys.RING_DROPPED,
    keys.METRICS_DROPPED,
    keys.NONFINITE_RESETS,
    keys.COLLECTION_FPS,
    keys.LEARN_FPS,
    keys.TOTAL_FPS,
)


def job_values(
    values: Mapping[str, float], episodes: Mapping[str, Sequence[float]]
) -> dict[str, float]:
    """The figures to log: this rank's own outside DDP, the job's under DDP, on every rank.

    Under DDP (a collective: every rank calls it at the same iteration) every rank receives
    every rank's figures: counters and rates are summed, and each episode mean is taken over the
    union of the ranks' episode windows. ``Perf/total_fps_per_rank`` keeps the mean per-rank
    rate. Every rank returns the same keys and values, so a callback that monitors one
    (``ModelCheckpoint(monitor="Train/mean_reward")``) decides the same on every rank and
    enters the same collectives, also on a rank that has not finished an episode yet.

    Args:
        values: This rank's counters and rates by metric key.
        episodes: This rank's recent per-episode values by metric key (empty series allowed).

    Returns:
        Metric key to value, episode means included.
    """
    if not distributed.is_distributed():
        return {**values, **{key: float(np.mean(s)) for key, s in episodes.items() if len(s)}}
    sums = {key: (float(np.sum(s)), len(s)) for key, s in episodes.items() if len(s)}
    ranks = distributed.gather_to_every_rank((dict(values), sums))
    out: dict[str, float] = {}
    totals: dict[str, tuple[float, int]] = {}
    for rank_values, rank_sums in ranks:
        for key, value in rank_values.items():
            # Summed figures add up; any other keeps the lowest rank's value.
            out[key] = out.get(key, 0.0) + value if key in _SUMMED else out.get(key, value)
        for key, (total, count) in rank_sums.items():
            previous = totals.get(key, (0.0, 0))
            totals[key] = (previous[0] + total, previous[1] + count)
    out.update({key: total / count for key, (total, count) in totals.items()})
    if keys.TOTAL_FPS in out:
        out[keys.TOTAL_FPS_PER_RANK] = out[keys.TOTAL_FPS] / len(ranks)
    return out


@rank_zero_only
def _warn_no_episode_yet(trainer: Trainer) -> None:
    logger.warning(
        "epoch %d ends after %d iterations, before the first episode finished: %s does not "
        "exist yet, so a callback monitoring it with strict=True (EarlyStopping's default) "
        "raises; make the epoch longer (trainer.limit_train_batches) or pass strict: false",
        trainer.current_epoch,
        trainer.num_training_batches,
        keys.MEAN_REWARD,
    )


class EpisodeStatsMonitor(Callback):
    """Logs ``Train/mean_reward``, ``Train/mean_episode_length``, ``Episode/*`` and throughput.

    Episode means are over the last ``window`` finished episodes (as rsl_rl does), so a
    curve does not jump with the number of episodes that happen to end in one iteration.
    ``Episode/rew_<term>`` is the mean per-episode sum of a reward term, ``Episode/<name>`` the
    mean of a task's per-episode metric (e.g. a tracking error).
    Throughput: ``Perf/collection_fps`` is the collector's own env-steps/s;
    ``Perf/learn_fps`` the env steps of one iteration over the iteration's time without
    the wait for data; ``Perf/total_fps`` the env steps delivered to the learner per
    wall-clock second since training started. ``Train/env_steps`` is the data module's
    counter (restored on resume) of env steps delivered to the learner, ``Train/learned_env_steps``
    of those a batch contained (APPO's staging pool drops the oldest of the rollouts it drains at
    once). ``Perf/ring_dropped_rollouts`` counts rollouts the collector overwrote unread,
    ``Perf/metrics_dropped`` collector messages lost before the learner drained them (both since
    the collector started).

    The episode means exist from the first iteration after the first finished episode (the
    collector reports its first episodes at once), and every key is logged on an epoch's last
    batch (``trainer.limit_train_batches`` is the epoch length), so ``EarlyStopping`` and
    ``ModelCheckpoint`` monitoring ``Train/mean_reward`` have a value at each epoch end; an
    epoch that ends before any episode finished logs one warning saying so.

    Args:
        window: Finished episodes the means are taken over (>= 1).
        prog_bar: Also show env steps, env-steps/s and mean reward in the progress bar (APPO
            puts its policy lag there).

    Raises:
        ValueError: if ``window`` is smaller than 1.
    """

    def __init__(self, window: int = 100, prog_bar: bool = True) -> None:
        check_arg(window >= 1, "EpisodeStatsMonitor.window", window, ">= 1")
        self.window = window
        self.prog_bar = prog_bar
        self._episodes: dict[str, deque[float]] = {}
        self._collection_fps: float | None = None
        self._nonfinite_resets = 0
        self._fit_began = 0.0
        self._fit_env_steps0 = 0
        self._batch_began = 0.0
        self._batch_env_steps0 = 0

    @override
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._fit_began = time.perf_counter()
        self._fit_env_steps0 = collector_link(trainer).feed.env_steps

    @override
    def on_train_batch_start(
        self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._batch_began = time.perf_counter()
        self._batch_env_steps0 = collector_link(trainer).feed.env_steps

    @override
    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        link = collector_link(trainer)
        for message in link.inbox.drain_metrics():
            self._absorb(message)
        now = time.perf_counter()
        feed = link.feed
        env_steps = feed.env_steps
        values = {
            keys.ENV_STEPS: float(env_steps),
            keys.LEARNED_ENV_STEPS: float(feed.learned_env_steps),
            keys.NONFINITE_RESETS: float(self._nonfinite_resets),
            keys.RING_DROPPED: float(link.transport.dropped),
            keys.METRICS_DROPPED: float(link.inbox.dropped),
        }
        learn_s = now - self._batch_began - feed.last_wait_s
        if learn_s > 0:
            values[keys.LEARN_FPS] = (env_steps - self._batch_env_steps0) / learn_s
        if now > self._fit_began:
            values[keys.TOTAL_FPS] = (env_steps - self._fit_env_steps0) / (now - self._fit_began)
        if self._collection_fps is not None:
            values[keys.COLLECTION_FPS] = self._collection_fps
        # Under DDP the job's figures (counters and rates summed over ranks, episode means over
        # every rank's episodes), the same on every rank.
        values = job_values(
            values, {self._episode_key(name): series for name, series in self._episodes.items()}
        )
        shown = {k: values.pop(k) for k in _PROG_BAR_KEYS if self.prog_bar and k in values}
        # Each logged key costs ~1 ms on a busy CPU: the progress-bar keys every iteration, the
        # rest only when the loggers write (as Lightning's LearningRateMonitor does) and on an
        # epoch's last batch, where EarlyStopping and ModelCheckpoint read what was logged.
        epoch_end = batch_idx + 1 >= trainer.num_training_batches
        if epoch_end and keys.MEAN_REWARD not in values and keys.MEAN_REWARD not in shown:
            _warn_no_episode_yet(trainer)
        if loggers_write_this_step(trainer) or epoch_end:
            pl_module.log_dict(values, batch_size=1)
        pl_module.log_dict(shown, prog_bar=True, batch_size=1)

    @override
    def state_dict(self) -> dict[str, Any]:
        return {
            "episodes": {name: list(series) for name, series in self._episodes.items()},
            "nonfinite_resets": self._nonfinite_resets,
        }

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # A key an older checkpoint lacks starts from its initial value (as Lightning's Timer).
        self._episodes = {
            name: deque(series, maxlen=self.window)
            for name, series in state_dict.get("episodes", {}).items()
        }
        self._nonfinite_resets = int(state_dict.get("nonfinite_resets", 0))

    def _absorb(self, message: dict[str, Any]) -> None:
        kind = message.get("kind")
        if kind == EPISODES:
            self._nonfinite_resets += int(message.get("nonfinite_resets", 0))
            per_episode = (k for k in message if k.startswith((REWARD_PREFIX, METRIC_PREFIX)))
            for name in ("return", "length", *per_episode):
                series = self._episodes.setdefault(name, deque(maxlen=self.window))
                series.extend(np.asarray(message[name], dtype=np.float64).ravel().tolist())
        elif kind == TIMING:
            self._collection_fps = float(message["env_steps_per_s"])

    @staticmethod
    def _episode_key(name: str) -> str:
        if name == "return":
            return keys.MEAN_REWARD
        if name == "length":
            return keys.MEAN_EPISODE_LENGTH
        return episode_log_key(name)
