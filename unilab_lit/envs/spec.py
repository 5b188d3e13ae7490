"""The static description of a batched environment that the rest of the system reads."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from unilab_lit.envs.symmetry import MirrorSpec
from unilab_lit.telemetry import metrics

if TYPE_CHECKING:
    import mujoco

POLICY = "policy"
CRITIC = "critic"
# Prefixes of the episode-info keys holding an episode's sum of one reward term and its mean of
# one per-step metric (``info["episode"]``, see unilab_lit.envs.episodes.EpisodeTotals).
REWARD_PREFIX = "reward/"
METRIC_PREFIX = "metric/"


def episode_log_key(name: str) -> str | None:
    """The logged key of the episode-info entry ``name``.

    ``reward/<term>`` -> ``Episode/rew_<term>``, ``metric/<name>`` -> ``Episode/<name>``; ``None``
    for the others (return, length, env ids).
    """
    if name.startswith(REWARD_PREFIX):
        return metrics.episode_reward_term(name[len(REWARD_PREFIX) :])
    if name.startswith(METRIC_PREFIX):
        return metrics.episode_metric(name[len(METRIC_PREFIX) :])
    return None


@dataclass(frozen=True)
class EnvSpec:
    """Sizes and timing of a batched environment.

    Args:
        num_envs: Number of simulations stepped together (leading dim of every array).
        obs_sizes: Width of each observation group; always has ``"policy"`` and ``"critic"``.
        action_size: Width of the action vector.
        action_low: Lower action bound, shape ``[action_size]``.
        action_high: Upper action bound, shape ``[action_size]``.
        control_dt: Seconds of simulated time per ``step``.
        max_episode_steps: Steps after which an episode is truncated (timeout).
        reward_terms: Names of the reward terms reported as ``reward/<term>`` in episode info.
        episode_metrics: Names of the per-step metrics reported as ``metric/<name>`` in episode
            info, each the mean over the episode's steps.
        policy_obs_layout: ``(term, width)`` of each term of the policy observation, in order
            (they fill it exactly); one term ``"policy"`` when the task names none.
        mirror: The task's left-right mirror, for symmetry augmentation; ``None`` if it has none.
    """

    num_envs: int
    obs_sizes: dict[str, int]
    action_size: int
    action_low: np.ndarray = field(repr=False)
    action_high: np.ndarray = field(repr=False)
    control_dt: float
    max_episode_steps: int
    reward_terms: tuple[str, ...] = ()
    episode_metrics: tuple[str, ...] = ()
    policy_obs_layout: tuple[tuple[str, int], ...] = ()
    mirror: MirrorSpec | None = None

    def __post_init__(self) -> None:
        if not self.policy_obs_layout:
            object.__setattr__(self, "policy_obs_layout", ((POLICY, self.obs_sizes[POLICY]),))
        total = sum(width for _, width in self.policy_obs_layout)
        if total != self.obs_sizes[POLICY]:
            raise ValueError(
                f"the policy observation layout {self.policy_obs_layout} covers {total} channels, "
                f"the policy observation has {self.obs_sizes[POLICY]}"
            )
        if self.mirror is not None:
            self.mirror.check_sizes(
                self.obs_sizes[POLICY], self.obs_sizes[CRITIC], self.action_size
            )

    def policy_obs_slices(self) -> dict[str, tuple[int, int]]:
        """``{term: (start, stop)}`` of the policy observation's terms."""
        slices = {}
        start = 0
        for name, width in self.policy_obs_layout:
            slices[name] = (start, start + width)
            start += width
        return slices

    @property
    def policy_obs_size(self) -> int:
        return self.obs_sizes[POLICY]

    @property
    def critic_obs_size(self) -> int:
        return self.obs_sizes[CRITIC]

    def check_obs_shapes(self, obs: Mapping[str, np.ndarray], source: str) -> None:
        """Check that ``obs`` has exactly the spec's groups, each ``[num_envs, width]``.

        Raises:
            RuntimeError: If not; the message names ``source`` (the env) and both layouts.
        """
        expected = {g: (self.num_envs, s) for g, s in self.obs_sizes.items()}
        actual = {g: v.shape for g, v in obs.items()}
        if actual != expected:
            raise RuntimeError(
                f"{source}: observation groups {actual} do not match the spec {expected}"
            )


def action_bounds(
    model: mujoco.MjModel,
    action_low: np.ndarray | None,
    action_high: np.ndarray | None,
    owner: str,
) -> tuple[np.ndarray, np.ndarray]:
    """The action bounds a task gave, each ``[action_size]`` float32; a bound not given is the
    actuators' ``ctrlrange``.

    Raises:
        ValueError: If a bound is not given and an actuator has no ``ctrlrange``, or the bounds
            differ in shape or are not low < high; the message starts with ``owner``.
    """
    if action_low is None or action_high is None:
        if not model.actuator_ctrllimited.all():
            raise ValueError(
                f"{owner}: every actuator needs a ctrlrange when action bounds are not given"
            )
        bounds = model.actuator_ctrlrange.astype(np.float32)
        action_low = bounds[:, 0] if action_low is None else action_low
        action_high = bounds[:, 1] if action_high is None else action_high
    action_low = np.asarray(action_low, dtype=np.float32).reshape(-1)
    action_high = np.asarray(action_high, dtype=np.float32).reshape(-1)
    if action_low.shape != action_high.shape or not np.all(action_low < action_high):
        raise ValueError(
            f"{owner}: action bounds must have equal shapes and low < high, "
            f"got low={action_low}, high={action_high}"
        )
    return action_low, action_high
