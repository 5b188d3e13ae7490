"""The contract between the collector loop and its writers: one vector step, and the writer API."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np


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
