"""The collector's loop, shared by every algorithm: sync → normalise → act → step → write → report.

What differs between algorithms (when to pull weights, whether to wait for the learner, where the
data goes) lives in a :class:`Writer`; the loop owns the env, the CPU actor, the weight / statistics
receivers, the heartbeat and the metrics reports.
"""

from __future__ import annotations

import itertools
import logging
import multiprocessing as mp
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from unilab_lit.collector import snapshot
from unilab_lit.collector.writers import Transition, Writer
from unilab_lit.envs.spec import POLICY
from unilab_lit.ipc.channel import EPISODES, TIMING, MetricsChannel
from unilab_lit.ipc.control import (
    STEPPING,
    WAITING_FOR_FIRST_PUBLISH,
    WAITING_FOR_LEARNER,
    ControlBlock,
)
from unilab_lit.ipc.futex import WAIT_SLICE_S
from unilab_lit.ipc.versioned import NOT_PUBLISHED
from unilab_lit.nn.normalization import normalize
from unilab_lit.telemetry import tracing

if TYPE_CHECKING:
    from torch import nn

    from unilab_lit.collector.options import CollectorConfig
    from unilab_lit.envs.base import BatchedMujocoEnv
    from unilab_lit.ipc.obs_stats import SharedObsStats
    from unilab_lit.ipc.weights import SharedWeights

logger = logging.getLogger(__name__)

# How often the loop checks that the learner process still exists (a SIGKILLed learner cannot
# stop its collector; the collector stops itself instead of becoming an orphan).
_PARENT_CHECK_S = 1.0


class _EpisodeReport:
    """Finished episodes since the last report: all counted, the newest ``keep`` kept per value."""

    def __init__(self, keep: int) -> None:
        self._keep = keep
        self._chunks: list[dict[str, np.ndarray]] = []
        self._kept = 0
        self.count = 0
        self.truncated = 0
        self.terminated = 0
        self.nonfinite_resets = 0

    def add(self, info: dict, terminated: np.ndarray, truncated: np.ndarray) -> None:
        self.nonfinite_resets += int(info["nonfinite_resets"])
        episode = info["episode"]
        finished = len(episode["return"])
        if finished == 0:
            return
        self.count += finished
        self.terminated += int(np.count_nonzero(terminated))
        self.truncated += int(np.count_nonzero(truncated))
        self._chunks.append({k: v for k, v in episode.items() if k != "env_ids"})
        self._kept += finished
        # Drop whole old chunks once the newer ones alone hold enough episodes.
        while self._kept - len(self._chunks[0]["return"]) >= self._keep:
            self._kept -= len(self._chunks.pop(0)["return"])

    def message(self, env_steps: int) -> dict:
        message = {
            "kind": EPISODES,
            "env_steps": env_steps,
            "count": self.count,
            "terminated": self.terminated,
            "truncated": self.truncated,
            "nonfinite_resets": self.nonfinite_resets,
        }
        for key in self._chunks[0] if self._chunks else ():
            message[key] = np.concatenate([c[key] for c in self._chunks])[-self._keep :]
        return message


class _PhaseTimes:
    """Nanoseconds spent in each phase of the loop since the last report."""

    PHASES = ("wait", "sync", "act", "env", "write")
    # The same phases as trace spans (the collector's main-thread track).
    SPANS = (
        "wait_for_learner",
        "sync_weights_and_stats",
        "policy_inference",
        "env_step",
        "shm_write",
    )

    def __init__(self) -> None:
        self.since = tracing.now_ns()
        self.totals = dict.fromkeys(self.PHASES, 0)
        self.steps = 0

    def add(self, stamps: list[int]) -> None:
        """Account one step from the ``tracing.now_ns`` stamps at the phase boundaries."""
        for phase, (begin, end) in zip(self.PHASES, itertools.pairwise(stamps), strict=True):
            self.totals[phase] += end - begin
        self.steps += 1


class CollectorLoop:
    """Steps the env with the CPU actor and hands every transition to a writer.

    Args:
        env: The batched env (reset by :meth:`run`).
        policy: CPU actor with ``act(obs) -> {"actions", "log_prob"?}``.
        writer: Destination of the transitions; decides when to sync and when to wait.
        control: Shared control block (stop flag, heartbeat, phase).
        metrics: Channel for episode statistics and timings.
        config: The collector's config (seed, normalisation, report settings).
        weights: Attached ``SharedWeights``; ``None`` keeps the policy's own weights.
        obs_stats: Attached ``SharedObsStats``; ``None`` feeds raw observations to the policy.
    """

    def __init__(
        self,
        env: BatchedMujocoEnv,
        policy: nn.Module,
        writer: Writer,
        control: ControlBlock,
        metrics: MetricsChannel,
        config: CollectorConfig,
        weights: SharedWeights | None = None,
        obs_stats: SharedObsStats | None = None,
    ) -> None:
        self.env = env
        self.policy = policy
        # Policies with per-episode collector-side state (FastTD3's per-env exploration scales)
        # expose reset_episodes(done); it is not part of the published weights.
        self._reset_episodes = getattr(policy, "reset_episodes", None)
        self.writer = writer
        self.control = control
        self.metrics = metrics
        self.config = config
        self.weights = weights
        self.obs_stats = obs_stats
        self.weights_version = NOT_PUBLISHED
        self.stats_version = NOT_PUBLISHED
        size = env.spec.obs_sizes[POLICY]
        # Statistics never published (a collector without weights to wait for, as in the benches)
        # normalise like a fresh learner-side normaliser (mean 0, var 1).
        self._mean = torch.zeros(size)
        self._var = torch.ones(size)
        self._parent = mp.parent_process()
        self._next_parent_check = 0.0
        self.env_steps = 0
        self._report_ns = int(config.report_interval_s * 1e9)
        # Tracing state; the recorder exists only while the learner's trace switch is on.
        self._trace: tracing.TraceRecorder | None = None
        self._trace_batch_events = 0
        self._trace_shipped = 0
        self._trace_env_steps = 0
        # The observation the next action is taken in: part of a snapshot (None before the reset).
        self._obs: dict[str, np.ndarray] | None = None
        self._state_dir = None if config.state_dir is None else Path(config.state_dir)

    def run(self) -> None:
        """Collect until the learner asks to stop (or disappears); closes writer and env."""
        try:
            if self.weights is None or self._wait_for_first_publish():
                self._collect()
        finally:
            self.close()

    def _collect(self) -> None:
        obs = self._restored_obs() or self.env.reset(seed=self.config.seed)
        self._obs = obs
        episodes = _EpisodeReport(self.config.max_episodes_per_report)
        timing = _PhaseTimes()
        reported = False
        while self._keep_running():
            stamps = [tracing.now_ns()]
            self.control.set_phase(WAITING_FOR_LEARNER)
            if not self.writer.wait_turn(self._keep_waiting):
                break
            self.control.set_phase(STEPPING)
            stamps.append(tracing.now_ns())
            if self.writer.sync_due():
                self._pull_weights()
                self._pull_obs_stats()
            stamps.append(tracing.now_ns())
            actions, log_prob = self._act(obs[POLICY])
            stamps.append(tracing.now_ns())
            next_obs, reward, terminated, truncated, info = self.env.step(actions)
            stamps.append(tracing.now_ns())
            self.writer.write(
                Transition(
                    obs=obs,
                    actions=actions,
                    log_prob=log_prob,
                    reward=reward,
                    terminated=terminated,
                    truncated=truncated,
                    done=info["done"],
                    next_obs=next_obs,
                    final_obs=info["final_obs"],
                    policy_version=self.weights_version,
                )
            )
            stamps.append(tracing.now_ns())
            timing.add(stamps)
            if self._trace is not None:
                self._trace.add_phases(_PhaseTimes.SPANS, stamps)
            if self._reset_episodes is not None and info["done"].any():
                self._reset_episodes(torch.from_numpy(info["done"]))
            obs = self._obs = next_obs
            self.env_steps += self.env.num_envs
            episodes.add(info, terminated, truncated)
            self.control.beat()
            due = stamps[-1] - timing.since >= self._report_ns
            # The first finished episodes go out at once, not at the next report: the learner
            # then logs Train/mean_reward from its first iteration after them, so a callback
            # that monitors it has a value at the end of a short first epoch.
            if (due or not reported) and (episodes.count or episodes.nonfinite_resets):
                self.metrics.send(episodes.message(self.env_steps))
                episodes = _EpisodeReport(self.config.max_episodes_per_report)
                reported = True
            if due:
                self.metrics.send(self._timing_message(timing, stamps[-1]))
                timing = _PhaseTimes()

    def close(self) -> None:
        """Close the writer and the env."""
        try:
            self.writer.close()
        finally:
            self.env.close()

    def _timing_message(self, timing: _PhaseTimes, now: int) -> dict:
        return {
            "kind": TIMING,
            "env_steps": self.env_steps,
            "env_steps_per_s": timing.steps * self.env.num_envs * 1e9 / (now - timing.since),
            "weights_version": self.weights_version,
            "obs_stats_version": self.stats_version,
            **{
                f"{phase}_ms": 1e-6 * total / timing.steps for phase, total in timing.totals.items()
            },
        }

    def _keep_running(self) -> bool:
        if self.control.stop_requested:
            return False
        # Called between steps (and on every idle poll), where the state is consistent.
        if self.control.snapshot_request != self.control.snapshot_done:
            self._write_snapshot()
        # Tracing off costs this one shared-memory read per step (or per idle poll).
        if self._trace is not None or self.control.trace_requested:
            self._update_trace()
        now = time.monotonic()
        if self._parent is not None and now >= self._next_parent_check:
            self._next_parent_check = now + _PARENT_CHECK_S
            if not self._parent.is_alive():
                logger.error("the learner process is gone; collector pid %d stops", os.getpid())
                return False
        return True

    def _update_trace(self) -> None:
        """Start, ship or finish recording as the learner's trace switch says."""
        now = tracing.now_ns()
        if self._trace is None:
            self._trace = tracing.TraceRecorder("collector")
            self._trace.name_thread("main")
            self._trace_batch_events = tracing.max_batch_events(self.metrics.slot_bytes)
            self._trace_shipped, self._trace_env_steps = now, self.env_steps
            tracing.install(self._trace)  # library code (the pack thread) records through it
        elif not self.control.trace_requested:
            tracing.install(None)
            self._ship_trace(now, final=True)
            self._trace = None
        elif (
            self._trace.pending >= self._trace_batch_events
            or now - self._trace_shipped >= self._report_ns
        ):
            self._ship_trace(now, final=False)

    def _ship_trace(self, now: int, final: bool) -> None:
        """Send what was recorded as one metrics message (at most one channel slot's worth)."""
        assert self._trace is not None
        elapsed = now - self._trace_shipped
        if elapsed > 0:
            rate = (self.env_steps - self._trace_env_steps) * 1e9 / elapsed
            self._trace.counter("env_steps_per_s", rate, now)
        self.metrics.send(tracing.message(self._trace.drain(), final))
        self._trace_shipped, self._trace_env_steps = now, self.env_steps

    def _write_snapshot(self) -> None:
        request = self.control.snapshot_request
        if self._state_dir is not None:
            state = snapshot.capture(self.env, self._obs, self.policy, self.env_steps)
            snapshot.write(self._state_dir / snapshot.SNAPSHOT_FILE, state)
        self.control.mark_snapshot_done(request)

    def _restored_obs(self) -> dict[str, np.ndarray] | None:
        """Continue from the learner's restore file, if it left one; ``None``: reset instead."""
        if self._state_dir is None or not self.control.restore_requested:
            return None
        state = snapshot.read(self._state_dir / snapshot.RESTORE_FILE)
        if state is None:
            return None
        obs = snapshot.restore(state, self.env, self.policy)
        if obs is not None:
            self.env_steps = int(state["env_steps"])
        return obs

    def _keep_waiting(self) -> bool:
        """Heartbeat + stop check between two blocking waits for the learner."""
        self.control.beat()
        return self._keep_running()

    def _wait_for_first_publish(self) -> bool:
        # Acting with the actor's own random initialisation, or normalising with statistics the
        # learner never had (WeightSync and ObsNormSync publish one after the other, in either
        # order), would write data whose behaviour policy the learner never had; wait for the
        # learner's first publish of both instead.
        self.control.set_phase(WAITING_FOR_FIRST_PUBLISH)
        while True:
            weights_ready, stats_ready = self._pull_weights(), self._pull_obs_stats()
            if weights_ready and stats_ready:
                return True
            if not self._keep_waiting():
                return False
            if not weights_ready:
                self.weights.wait_newer(self.weights_version, WAIT_SLICE_S)
            else:
                self.obs_stats.wait_newer(self.stats_version, WAIT_SLICE_S)

    def _pull_weights(self) -> bool:
        """Load newer weights if any; returns whether weights are (now) the learner's."""
        if self.weights is None:
            return False
        version = self.weights.load_module_if_newer(self.policy, self.weights_version)
        if version is not None:
            self.weights_version = version
        return self.weights_version != NOT_PUBLISHED

    def _pull_obs_stats(self) -> bool:
        """Load newer statistics if any; returns whether the policy's input is normalised as the
        learner's (statistics published, or no normalisation)."""
        if self.obs_stats is None:
            return True
        snapshot = self.obs_stats.read_if_newer(self.stats_version)
        if snapshot is not None:
            self.stats_version = snapshot.version
            self._mean = snapshot.mean.to(torch.float32)
            self._var = snapshot.var.to(torch.float32)
        return self.stats_version != NOT_PUBLISHED

    def _act(self, policy_obs: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        with torch.inference_mode():
            x = torch.from_numpy(policy_obs)
            if self.obs_stats is not None:
                x = normalize(
                    x, self._mean, self._var, self.config.obs_norm_eps, self.config.obs_norm_clip
                )
            out = self.policy.act(x)
        log_prob = out.get("log_prob")
        return out["actions"].numpy(), None if log_prob is None else log_prob.numpy()


def build_loop(
    config: CollectorConfig, control: ControlBlock, metrics: MetricsChannel
) -> CollectorLoop:
    """Build policy, env, receivers and writer in the collector process."""
    options, seed = config.options, config.seed
    torch.manual_seed(seed)
    policy = config.policy.build().eval()
    env = options.task.build(options.num_envs, seed=seed, num_threads=options.physics_threads)
    try:
        writer = config.writer.build(env.spec)
        weights = None if config.weights is None else config.weights.attach()
        obs_stats = None if config.obs_stats is None else config.obs_stats.attach()
    except BaseException:
        env.close()
        raise
    return CollectorLoop(env, policy, writer, control, metrics, config, weights, obs_stats)
