"""A batched env's step-to-step state, copied out and put back: a resumed run continues the very
same episodes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from mujoco import batch as mj_batch

from unilab_lit.envs.episodes import EpisodeTotals
from unilab_lit.envs.randomization import Randomizer


class EnvStateDict:
    """``state_dict`` / ``load_state_dict`` of :class:`~unilab_lit.envs.base.BatchedMujocoEnv`,
    over the parts its constructor sets (annotated below)."""

    batch: mj_batch.Batch
    _elapsed: np.ndarray
    _episodes: EpisodeTotals
    _rng: np.random.Generator
    _randomizer: Randomizer | None
    _needs_reset: bool
    _all_ids: np.ndarray

    def state_dict(self) -> dict[str, Any]:
        """A copy of everything the next ``step`` depends on besides the model.

        That is the simulations' integration state (the ``Batch``'s ``mjSTATE_INTEGRATION``
        rows: time, qpos, qvel, act, the solver's warm start, ctrl, ...), the episode counters,
        the generator and, with domain randomisation, each env's drawn values (the model fields
        are rewritten from them on load) and held controls. A task that carries other per-env
        state from one step to the next must extend both methods. A collector snapshots its
        env with this so that a resumed run continues the very same episodes.

        Raises:
            RuntimeError: If ``reset`` was not called first.
        """
        if self._needs_reset:
            raise RuntimeError(f"{type(self).__name__}: call reset() before state_dict()")
        state = {
            "physics": self.batch.state.copy(),
            "elapsed": self._elapsed.copy(),
            **self._episodes.state_dict(),
            "rng": self._rng.bit_generator.state,
        }
        if self._randomizer is not None:
            state["randomization"] = self._randomizer.state_dict()
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from a :meth:`state_dict` of an env of the same task and ``num_envs``.

        Replaces ``reset``: the next ``step`` continues the saved episodes bit for bit.
        The caller keeps the observation that goes with the state (it is not recomputed).

        Raises:
            ValueError: If the saved arrays do not fit this env (another task or ``num_envs``).
        """
        expected = {
            "physics": self.batch.state.shape,
            "elapsed": self._elapsed.shape,
            **self._episodes.shapes(),
        }
        if "metric_sums" not in state:  # saved before per-step metrics existed
            expected.pop("metric_sums")
        actual = {key: np.shape(state[key]) if key in state else None for key in expected}
        randomized = self._randomizer is not None
        if randomized != ("randomization" in state):
            raise ValueError(
                f"{type(self).__name__}.load_state_dict: the state was saved "
                f"{'without' if randomized else 'with'} domain randomisation, this env runs "
                f"{'with' if randomized else 'without'} it"
            )
        if randomized:
            expected["randomization"] = self._randomizer.shapes()
            actual["randomization"] = {
                key: np.shape(value) for key, value in state["randomization"].items()
            }
        if actual != expected:
            raise ValueError(
                f"{type(self).__name__}.load_state_dict: saved shapes {actual} do not fit this "
                f"env's {expected} (another task or num_envs?)"
            )
        self.batch.state[...] = state["physics"]
        self._elapsed[:] = state["elapsed"]
        self._episodes.load_state_dict(state)
        self._rng = np.random.default_rng()
        self._rng.bit_generator.state = state["rng"]
        if self._randomizer is not None:
            self._randomizer.load_state_dict(state["randomization"])
        # Outputs (xpos, sensordata, ...) are derived from the state; hooks may read them
        # before the first step.
        self.batch.forward(self._all_ids)
        self._needs_reset = False
