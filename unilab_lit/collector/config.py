"""Picklable description of everything the collector subprocess builds."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from unilab_lit.envs.task_spec import TaskSpec

if TYPE_CHECKING:
    from torch import nn

    from unilab_lit.collector.writer import Writer
    from unilab_lit.envs.spec import EnvSpec
    from unilab_lit.ipc.obs_stats import SharedObsStatsHandle
    from unilab_lit.ipc.weights import SharedWeightsHandle


class PolicyBuilder(Protocol):
    """What the collector needs of a policy spec (``unilab_lit.nn.policies.PolicySpec`` fits)."""

    def build(self) -> nn.Module: ...


class WriterSpec(Protocol):
    """A picklable recipe for the writer that puts collected steps into shared memory."""

    def build(self, env_spec: EnvSpec) -> Writer: ...


@dataclass(frozen=True)
class CollectorConfig:
    """Everything the collector child needs; it is pickled into the child at spawn time.

    Args:
        task: The task the child builds (``TaskSpec.build``; a name is taken as one): the child
            imports the task's class itself.
        num_envs: Environments stepped together (>= 1).
        policy: Recipe for the CPU actor; its ``act(obs)`` gets the normalised policy observation.
        writer: Recipe for the writer (``AppoWriterSpec`` or ``OffPolicyWriterSpec``).
        seed: Seed of the env's first reset and of the collector's torch generator.
        physics_threads: MuJoCo batch threads of the env (>= 1).
        torch_threads: Intra-op threads of the collector's torch (>= 1); one keeps actor inference
            from competing with the physics threads.
        weights: Handle of the learner's ``SharedWeights``; ``None`` keeps the policy's own
            initial weights (tests, scripted policies).
        obs_stats: Handle of the learner's ``SharedObsStats``; ``None`` disables normalisation.
        obs_norm_eps: ``eps`` of the learner's normaliser (the collector must use the same one).
        obs_norm_clip: ``clip`` of the learner's normaliser (``None``: unclipped).
        stall_timeout_s: The learner reports a stall after this many seconds without a heartbeat
            (> 0). Waiting for the learner counts as progress; only a stuck loop stalls.
        report_interval_s: Seconds between metrics messages (> 0).
        max_episodes_per_report: Most recent finished episodes whose per-episode values one
            metrics message carries (>= 1); counts always cover every episode.
        state_dir: Private directory where the collector writes its state on request and reads
            the state to continue from (``unilab_lit.collector.snapshot``); ``None`` disables both.

    Raises:
        ValueError: if a numeric argument is out of range.
    """

    task: TaskSpec
    num_envs: int
    policy: PolicyBuilder
    writer: WriterSpec
    seed: int = 0
    physics_threads: int = 1
    torch_threads: int = 1
    weights: SharedWeightsHandle | None = None
    obs_stats: SharedObsStatsHandle | None = None
    obs_norm_eps: float = 1e-8
    obs_norm_clip: float | None = 10.0
    stall_timeout_s: float = 30.0
    report_interval_s: float = 1.0
    max_episodes_per_report: int = 256
    state_dir: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "task", TaskSpec.of(self.task))
        for name in ("num_envs", "physics_threads", "torch_threads", "max_episodes_per_report"):
            value = getattr(self, name)
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        for name in ("stall_timeout_s", "report_interval_s"):
            value = getattr(self, name)
            if not (value > 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be a finite number > 0, got {value}")
        if not self.obs_norm_eps > 0:
            raise ValueError(f"obs_norm_eps must be > 0, got {self.obs_norm_eps}")
        # None leaves the normalised observation unbounded.
        if self.obs_norm_clip is not None and not self.obs_norm_clip > 0:
            raise ValueError(f"obs_norm_clip must be > 0 or None, got {self.obs_norm_clip}")
