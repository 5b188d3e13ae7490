"""Synchronous APPO collection: the learner releases rollouts one at a time.

The learner releases rollout ``k + 1`` when it asks for its next batch, which is after every
``on_train_batch_end`` of iteration ``k`` (weights and statistics published). The collector starts
a rollout only once it is released, and pulls weights right then, so rollout ``k`` is always acted
by the weights of iteration ``k`` and a run is a function of its seeds, not of timing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from unilab_lit.ipc.block import BlockLayout, ShmBlock, ShmHandle
from unilab_lit.ipc.futex import CounterWatch


def _layout() -> BlockLayout:
    layout = BlockLayout()
    layout.add("released", (1,), torch.int64)
    return layout


@dataclass(frozen=True)
class RolloutGateHandle:
    """Picklable handle: attach with :meth:`attach`."""

    block: ShmHandle

    def attach(self) -> RolloutGate:
        """Map the gate in this process (non-owner)."""
        return RolloutGate(_attach=self.block)


class RolloutGate:
    """One shared counter: rollouts the learner has released (single writer: the learner)."""

    def __init__(self, _attach: ShmHandle | None = None) -> None:
        if _attach is None:
            self._block = ShmBlock.create(_layout().nbytes, "rollout_gate")
        else:
            self._block = ShmBlock.attach(_attach)
        self._released = _layout().views(self._block)["released"]
        self._watch = CounterWatch(self._released.data_ptr())

    @staticmethod
    def required_bytes() -> int:
        """Shared-memory bytes of a gate."""
        return _layout().nbytes

    def handle(self) -> RolloutGateHandle:
        """Picklable handle a spawn child uses to attach."""
        return RolloutGateHandle(self._block.handle)

    def __reduce__(self) -> tuple[Callable[..., RolloutGate], tuple[RolloutGateHandle]]:
        # Pickling sends the handle: the receiving process attaches and never owns.
        return RolloutGateHandle.attach, (self.handle(),)

    @property
    def released(self) -> int:
        """Rollouts released so far."""
        return int(self._released[0])

    def release(self) -> None:
        """Let the collector produce one more rollout (learner side)."""
        self._released[0] += 1
        self._watch.wake()

    def wait_release(self, count: int, timeout_s: float) -> None:
        """Block until more than ``count`` rollouts are released, at most ``timeout_s``
        (collector side; the caller re-checks)."""
        seen = self._watch.value
        if seen <= count:
            self._watch.wait(seen, timeout_s)

    def unlink(self) -> None:
        """Remove the block from /dev/shm (owner only; idempotent)."""
        self._block.unlink()
