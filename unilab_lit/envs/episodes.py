"""Per-env running episode totals and the ``info["episode"]`` record of finished episodes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from unilab_lit.envs.spec import METRIC_PREFIX, REWARD_PREFIX

# The totals' keys in an env's ``state_dict`` (flat, next to the env's own keys).
_STATE_KEYS = ("length", "return", "term_sums", "metric_sums")


def columns(
    values: Mapping[str, np.ndarray], names: Sequence[str], num_rows: int, owner: object, hook: str
) -> np.ndarray:
    """``values[name]`` of each of ``names`` as the columns of one float64 ``[num_rows, names]``.

    Raises:
        KeyError: If ``values`` lacks a name; the message names the hook that returned
            ``values`` (``hook`` of ``owner``'s class) and what it returned.
    """
    stacked = np.empty((num_rows, len(names)), dtype=np.float64)
    for column, name in enumerate(names):
        if name not in values:
            raise KeyError(
                f"{type(owner).__name__}.{hook} did not return {name!r}; "
                f"it returned {sorted(values)}"
            )
        stacked[:, column] = values[name]
    return stacked


class EpisodeTotals:
    """Length, return, reward-term sums and per-step metric sums of each env's running episode.

    A batched env adds every step's values with :meth:`add` and, for the envs whose episode
    ended, reads the ``info["episode"]`` record with :meth:`finished` and starts them over with
    :meth:`clear`. The record holds ``return``, ``length`` and ``env_ids``, ``reward/<term>``
    (the episode's sum of each reward term) and ``metric/<name>`` (the episode's mean of each
    per-step metric).

    Args:
        num_envs: Number of envs (>= 1).
        reward_terms: Names of the reward terms, in the columns' order of :meth:`add`.
        episode_metrics: Names of the per-step metrics, in the columns' order of :meth:`add`.
    """

    def __init__(
        self, num_envs: int, reward_terms: Sequence[str] = (), episode_metrics: Sequence[str] = ()
    ) -> None:
        self.reward_terms = tuple(reward_terms)
        self.episode_metrics = tuple(episode_metrics)
        self.length = np.zeros(num_envs, dtype=np.int64)
        self.total = np.zeros(num_envs, dtype=np.float64)
        self.term_sums = np.zeros((num_envs, len(self.reward_terms)), dtype=np.float64)
        self.metric_sums = np.zeros((num_envs, len(self.episode_metrics)), dtype=np.float64)

    def add(
        self,
        reward: np.ndarray,
        terms: np.ndarray | None = None,
        metrics: np.ndarray | None = None,
    ) -> None:
        """One step of every env: ``reward [N]``, ``terms [N, terms]``, ``metrics [N, metrics]``."""
        self.length += 1
        self.total += reward
        if terms is not None:
            self.term_sums += terms
        if metrics is not None:
            self.metric_sums += metrics

    def clear(self, ids: np.ndarray | slice) -> None:
        """Start the episodes of ``ids`` over."""
        self.length[ids] = 0
        self.total[ids] = 0.0
        self.term_sums[ids] = 0.0
        self.metric_sums[ids] = 0.0

    def finished(self, ids: np.ndarray) -> dict[str, np.ndarray]:
        """The ``info["episode"]`` record of the envs ``ids`` (an empty ``ids`` gives empty arrays)."""
        episode = {
            "return": self.total[ids].astype(np.float32),
            "length": self.length[ids].astype(np.float32),
            "env_ids": ids.astype(np.int64),
        }
        for column, term in enumerate(self.reward_terms):
            episode[REWARD_PREFIX + term] = self.term_sums[ids, column].astype(np.float32)
        # A finished episode has at least one step; the empty selection divides nothing.
        lengths = np.maximum(self.length[ids], 1)
        for column, name in enumerate(self.episode_metrics):
            mean = self.metric_sums[ids, column] / lengths
            episode[METRIC_PREFIX + name] = mean.astype(np.float32)
        return episode

    def state_dict(self) -> dict[str, np.ndarray]:
        """Copies of the totals, under the keys an env's ``state_dict`` has always used."""
        arrays = (self.length, self.total, self.term_sums, self.metric_sums)
        return {key: array.copy() for key, array in zip(_STATE_KEYS, arrays, strict=True)}

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """The shape :meth:`load_state_dict` expects under each key."""
        return {key: value.shape for key, value in self.state_dict().items()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from :meth:`state_dict`; the caller has checked the shapes.

        A state saved before per-step metrics existed has no ``metric_sums``: the running
        episodes' metric sums then start from zero.
        """
        self.length[:] = state["length"]
        self.total[:] = state["return"]
        self.term_sums[:] = state["term_sums"]
        self.metric_sums[:] = state.get("metric_sums", 0.0)
