"""The collector's writers: the loop's contract (one vector step, the writer API) and its two writers.

APPO's writer is free-running and writes whole rollouts of ``num_steps`` vector steps into a
``RolloutRing``; the off-policy writer runs lock-step with the learner, writes transitions into
``ReplayStorage`` and packs sampled batches on a thread of its own.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from unilab_lit.envs.spec import CRITIC, POLICY, EnvSpec
from unilab_lit.ipc.futex import WAIT_SLICE_S
from unilab_lit.ipc.lockstep import LockstepLink, LockstepLinkHandle, PackRequest
from unilab_lit.ipc.replay_storage import ReplayStorage, ReplayStorageHandle, replay_columns
from unilab_lit.ipc.rollout_gate import RolloutGate, RolloutGateHandle
from unilab_lit.ipc.rollout_ring import RolloutRing, RolloutRingHandle, rollout_fields
from unilab_lit.telemetry import tracing
from unilab_lit.validation import check_arg

logger = logging.getLogger(__name__)


@dataclass
class Transition:
    """One vector step, as the writers receive it (numpy arrays, leading dim ``num_envs``).

    ``obs`` is the raw observation the action was taken in; ``next_obs`` the raw observation
    after auto-reset; ``final_obs`` equals ``next_obs`` except in ``done`` rows, where it holds the
    pre-reset final observation. ``policy_version`` is the weight version that acted.
    """

    obs: dict[str, np.ndarray]
    actions: np.ndarray
    log_prob: np.ndarray | None
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    done: np.ndarray
    next_obs: dict[str, np.ndarray]
    final_obs: dict[str, np.ndarray]
    policy_version: int


class Writer(Protocol):
    """Where a collector's transitions go, and when the loop may take its next step."""

    def wait_turn(self, keep_waiting: Callable[[], bool]) -> bool:
        """Block until the next step may be taken; ``False`` when ``keep_waiting()`` says stop.

        Block on the shared counter the turn depends on (a futex wait, never a sleep-poll) for
        at most ``ipc.futex.WAIT_SLICE_S`` at a time; ``keep_waiting`` records a heartbeat and checks
        the stop flag: call it before every such wait.
        """
        ...

    def sync_due(self) -> bool:
        """Whether the loop should pull newer weights and statistics before this step."""
        ...

    def write(self, transition: Transition) -> None:
        """Store one vector step."""
        ...

    def close(self) -> None:
        """Release threads and shared-memory attachments."""
        ...


@dataclass(frozen=True)
class AppoWriterSpec:
    """Recipe for an :class:`AppoWriter` in the collector process.

    Args:
        ring: Handle of the learner's ring (fields from ``rollout_fields``).
        num_steps: Rollout length T; must match the ring's slot shape.
        gate: Handle of the learner's ``RolloutGate`` for synchronous collection; ``None``
            collects freely.
    """

    ring: RolloutRingHandle
    num_steps: int
    gate: RolloutGateHandle | None = None

    def build(self, env_spec: EnvSpec) -> AppoWriter:
        gate = None if self.gate is None else self.gate.attach()
        return AppoWriter(self.ring.attach(), self.num_steps, env_spec, gate)


class AppoWriter:
    """Writes step ``t`` of the current rollout straight into a claimed ring slot.

    Weights and statistics are pulled only at the start of a rollout, so a whole rollout is
    acted by one policy version, recorded in the slot's ``policy_version``. Observations are
    stored raw: the learner normalises with its own (newer) statistics and updates them from
    this data. Without a gate the writer never waits: a learner that falls behind loses the
    oldest rollouts (counted by the ring). With a gate it starts rollout ``r`` (counted from 0)
    only once the learner has released ``r + 1`` rollouts (synchronous collection).

    Args:
        ring: The attached ring.
        num_steps: Rollout length T (>= 1).
        env_spec: The collector env's spec; its sizes must match the ring's fields.
        gate: The attached gate for synchronous collection, or ``None``.

    Raises:
        ValueError: if the ring's fields do not match ``rollout_fields`` for these sizes.
    """

    def __init__(
        self,
        ring: RolloutRing,
        num_steps: int,
        env_spec: EnvSpec,
        gate: RolloutGate | None = None,
    ) -> None:
        expected = rollout_fields(
            num_steps,
            env_spec.num_envs,
            env_spec.obs_sizes[POLICY],
            env_spec.obs_sizes[CRITIC],
            env_spec.action_size,
        )
        if ring.fields != expected:
            raise ValueError(
                f"ring fields {ring.fields} do not match this collector's rollout "
                f"(num_steps={num_steps}, env spec {env_spec}): expected {expected}"
            )
        self._ring = ring
        self._gate = gate
        self._num_steps = num_steps
        self._t = 0
        self._slot: dict[str, torch.Tensor] = {}
        self.rollouts_written = 0

    def wait_turn(self, keep_waiting: Callable[[], bool]) -> bool:
        if self._gate is None or self._t > 0:
            return True
        while self._gate.released <= self.rollouts_written:
            if not keep_waiting():
                return False
            self._gate.wait_release(self.rollouts_written, WAIT_SLICE_S)
        return True

    def sync_due(self) -> bool:
        return self._t == 0

    def write(self, transition: Transition) -> None:
        if transition.log_prob is None:
            raise KeyError(
                "APPO needs behaviour log-probs: the collector policy's act() must return "
                "'log_prob' next to 'actions'"
            )
        t = self._t
        if t == 0:
            self._slot = self._ring.begin_write()
            self._slot["policy_version"].fill_(transition.policy_version)
        slot = self._slot
        slot["obs"][t].copy_(torch.from_numpy(transition.obs[POLICY]))
        slot["critic_obs"][t].copy_(torch.from_numpy(transition.obs[CRITIC]))
        slot["actions"][t].copy_(torch.from_numpy(transition.actions))
        slot["log_prob"][t].copy_(torch.from_numpy(transition.log_prob))
        slot["reward"][t].copy_(torch.from_numpy(transition.reward))
        slot["done"][t].copy_(torch.from_numpy(transition.done))
        slot["truncated"][t].copy_(torch.from_numpy(transition.truncated))
        # The whole final observation (it equals next_obs outside done rows): one contiguous copy
        # instead of a masked scatter; the learner reads it only where truncated.
        slot["final_critic_obs"][t].copy_(torch.from_numpy(transition.final_obs[CRITIC]))
        self._t = t + 1
        if self._t == self._num_steps:
            slot["last_critic_obs"].copy_(torch.from_numpy(transition.next_obs[CRITIC]))
            self._ring.commit_write()
            self.rollouts_written += 1
            self._t = 0
            self._slot = {}

    def close(self) -> None:
        self._slot = {}


@dataclass(frozen=True)
class OffPolicyWriterSpec:
    """Recipe for an :class:`OffPolicyWriter` in the collector process.

    Args:
        replay: Handle of the learner's ``ReplayStorage`` (columns from ``replay_columns``).
        link: Handle of the learner's ``LockstepLink``.
        env_steps_per_sync: Vector steps per released tick (>= 1).
    """

    replay: ReplayStorageHandle
    link: LockstepLinkHandle
    env_steps_per_sync: int = 1

    def build(self, env_spec: EnvSpec) -> OffPolicyWriter:
        return OffPolicyWriter(
            self.replay.attach(), self.link.attach(), self.env_steps_per_sync, env_spec
        )


class OffPolicyWriter:
    """Takes ``env_steps_per_sync`` steps per released tick and serves pack requests in a thread.

    Each vector step becomes ``num_envs`` replay rows with raw observations; ``next_obs`` /
    ``next_critic`` hold the true final observation in rows whose episode ended (the env's
    ``final_obs``), so the learner bootstraps truncated episodes from the right state. Weights
    and statistics are pulled before every step.

    The pack thread gathers a requested batch into a host slot while the main thread may be
    stepping physics; a lock keeps a gather and a replay write from interleaving. An exception
    in the thread is re-raised in the collector's main thread, which reports it to the learner.

    Args:
        replay: The attached replay storage.
        link: The attached lock-step link.
        env_steps_per_sync: Vector steps per released tick (>= 1).
        env_spec: The collector env's spec; its sizes must match the replay's columns.

    Raises:
        ValueError: if the replay's columns, capacity or the link's width do not fit the env.
    """

    def __init__(
        self,
        replay: ReplayStorage,
        link: LockstepLink,
        env_steps_per_sync: int,
        env_spec: EnvSpec,
    ) -> None:
        check_arg(env_steps_per_sync >= 1, "env_steps_per_sync", env_steps_per_sync, ">= 1")
        expected = replay_columns(
            env_spec.obs_sizes[POLICY], env_spec.obs_sizes[CRITIC], env_spec.action_size
        )
        if replay.columns != expected:
            raise ValueError(
                f"replay columns {replay.columns} do not match this collector's env: {expected}"
            )
        if replay.capacity < env_spec.num_envs:
            raise ValueError(
                f"replay capacity {replay.capacity} is smaller than one step of "
                f"num_envs={env_spec.num_envs} rows"
            )
        if link.width != replay.width:
            raise ValueError(f"link width {link.width} differs from replay width {replay.width}")
        self._replay = replay
        self._link = link
        self._steps_per_sync = env_steps_per_sync
        self._tick = link.steps_done
        self._steps_in_tick = 0
        self._replay_lock = threading.Lock()
        self._closing = threading.Event()
        self._error: BaseException | None = None
        self._last_packed_tick: int | None = None
        self._packer = threading.Thread(target=self._serve_packs, name="pack", daemon=True)
        self._packer.start()

    def wait_turn(self, keep_waiting: Callable[[], bool]) -> bool:
        if self._steps_in_tick == 0:
            while self._link.released <= self._tick:
                self._raise_pack_error()
                if not keep_waiting():
                    return False
                self._link.wait_release(self._tick, WAIT_SLICE_S)
        self._raise_pack_error()
        return True

    def sync_due(self) -> bool:
        return True

    def write(self, transition: Transition) -> None:
        rows = {
            "obs": torch.from_numpy(transition.obs[POLICY]),
            "next_obs": torch.from_numpy(transition.final_obs[POLICY]),
            "actions": torch.from_numpy(transition.actions),
            "reward": torch.from_numpy(transition.reward),
            "done": torch.from_numpy(transition.done),
            "truncated": torch.from_numpy(transition.truncated),
            "critic": torch.from_numpy(transition.obs[CRITIC]),
            "next_critic": torch.from_numpy(transition.final_obs[CRITIC]),
        }
        with self._replay_lock:
            self._replay.write(rows)
        self._steps_in_tick += 1
        if self._steps_in_tick == self._steps_per_sync:
            self._tick += 1
            self._steps_in_tick = 0
            self._link.mark_steps_done(self._tick)

    def close(self) -> None:
        self._closing.set()
        self._packer.join()  # it looks at the flag at least every WAIT_SLICE_S

    def _raise_pack_error(self) -> None:
        if self._error is not None:
            raise RuntimeError("the collector's pack thread failed") from self._error

    def _serve_packs(self) -> None:
        try:
            while not self._closing.is_set():
                steps_done = self._link.steps_done
                request = self._link.pending_request()
                if request is None:
                    self._link.wait_request(WAIT_SLICE_S)
                    continue
                if self._replay.write_ptr < request.min_write_ptr:
                    # The main thread marks steps done after writing a tick's rows.
                    self._link.steps_done_watch.wait(steps_done, WAIT_SLICE_S)
                    continue
                with tracing.span("pack"):
                    self._pack(request)
                tracing.counter("replay_size", self._replay.size)
        except BaseException as exc:
            logger.exception("pack thread failed")
            self._error = exc

    def _pack(self, request: PackRequest) -> None:
        if self._last_packed_tick is not None and request.tick <= self._last_packed_tick:
            raise RuntimeError(
                f"tick mismatch: pack requested for tick {request.tick} after tick "
                f"{self._last_packed_tick} was packed; ticks must increase"
            )
        out = self._link.slot(request.slot)
        with self._replay_lock:
            if request.seed is None:
                indices = self._link.request_indices()
                size = self._replay.size
                if int(indices.min()) < 0 or int(indices.max()) >= size:
                    raise ValueError(
                        f"pack indices for tick {request.tick} must lie in [0, {size}) "
                        f"(rows stored), got [{int(indices.min())}, {int(indices.max())}]"
                    )
            else:
                generator = torch.Generator().manual_seed(request.seed)
                indices = self._replay.sample_indices(self._link.sample_count, generator)
            self._replay.gather(indices, out)
        self._last_packed_tick = request.tick
        self._link.mark_pack_done(request)
