"""APPO writer: free-running, whole rollouts of ``num_steps`` vector steps into a ``RolloutRing``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from unilab_lit.collector.writer import Transition
from unilab_lit.envs.spec import CRITIC, POLICY, EnvSpec
from unilab_lit.ipc.futex import WAIT_SLICE_S
from unilab_lit.ipc.rollout_gate import RolloutGate, RolloutGateHandle
from unilab_lit.ipc.rollout_ring import RolloutRing, RolloutRingHandle, rollout_fields


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
