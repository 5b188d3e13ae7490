"""Off-policy writer: lock-step with the learner, transitions into ReplayStorage, a pack thread."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

import torch

from unilab_lit.collector.writer import Transition
from unilab_lit.envs.spec import CRITIC, POLICY, EnvSpec
from unilab_lit.ipc.futex import WAIT_SLICE_S
from unilab_lit.ipc.lockstep import LockstepLink, LockstepLinkHandle, PackRequest
from unilab_lit.ipc.replay_storage import ReplayStorage, ReplayStorageHandle, replay_columns
from unilab_lit.telemetry import tracing
from unilab_lit.validation import check_arg

logger = logging.getLogger(__name__)


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
