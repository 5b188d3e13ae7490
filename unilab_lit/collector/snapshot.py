"""The collector's resumable state (env, current observation, RNG, exploration state) as one file.

A checkpoint asks the running collector for this state; a resumed run hands it to the new collector
before its first reset, so the same episodes continue with the same random streams. Files rather
than the metrics channel: the state of thousands of envs does not fit a channel slot, and nothing
in ``/dev/shm`` has to be sized for it. Arrays travel as torch tensors, so a checkpoint holding the
state still loads with ``torch.load(weights_only=True)``, Lightning's default.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

if TYPE_CHECKING:
    from torch import nn

logger = logging.getLogger(__name__)

# Written by the collector on a snapshot request, read and removed by the learner.
SNAPSHOT_FILE = "snapshot.pt"
# Written by the learner before the first weights publish, read by the collector before its reset.
RESTORE_FILE = "restore.pt"


def capture(
    env: Any, obs: dict[str, np.ndarray] | None, policy: nn.Module, env_steps: int
) -> dict[str, Any] | None:
    """The collector's state between two steps, or ``None`` before its first reset.

    ``env`` is ``None`` in the result when the env cannot save its state (it has no
    ``state_dict``, e.g. a gymnasium env); a resume then starts from a reset.

    The policy's plain tensor attributes (not parameters or buffers, which come from the learner)
    are its collector-side state, e.g. per-env exploration noise scales.
    """
    if obs is None:
        return None
    save_env = getattr(env, "state_dict", None)
    return {
        "env": None if save_env is None else _to_torch(save_env()),
        "obs": _to_torch(obs),
        "torch_rng": torch.get_rng_state(),
        "policy": {k: v.clone() for k, v in vars(policy).items() if isinstance(v, torch.Tensor)},
        "env_steps": env_steps,
    }


def restore(state: dict[str, Any], env: Any, policy: nn.Module) -> dict[str, np.ndarray] | None:
    """Put a :func:`capture` result back; returns the observation to act on next.

    Returns ``None`` (nothing restored) when the saved state has no env state or this env
    cannot load one; the caller resets the env then.
    """
    load_env = getattr(env, "load_state_dict", None)
    if state["env"] is None or load_env is None:
        logger.warning(
            "the collector's env state was not saved or cannot be loaded by %s; the resumed "
            "collector starts from a reset",
            type(env).__name__,
        )
        return None
    load_env(_to_numpy(state["env"]))
    torch.set_rng_state(state["torch_rng"])
    for name, value in state["policy"].items():
        setattr(policy, name, value)
    return _to_numpy(state["obs"])


def _to_torch(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value.copy())
    if isinstance(value, dict):
        return {key: _to_torch(item) for key, item in value.items()}
    return value


def _to_numpy(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.numpy()
    if isinstance(value, dict):
        return {key: _to_numpy(item) for key, item in value.items()}
    return value


def write(path: Path, state: dict[str, Any] | None) -> None:
    """Save atomically: a reader never sees a half-written file."""
    partial = path.with_suffix(".partial")
    torch.save(state, partial)
    os.replace(partial, path)


def read(path: Path) -> dict[str, Any] | None:
    """Load a file :func:`write` wrote (numpy arrays and the RNG state need full unpickling)."""
    return torch.load(path, weights_only=False)
