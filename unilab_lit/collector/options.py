"""The collector's options (``data.init_args.collector``) and the picklable config the child builds from.

``CollectorOptions`` are what the user sets; ``CollectorConfig`` carries them unchanged into the
child with the shared blocks' handles, the policy recipe and the writer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import torch

from unilab_lit.envs.task_spec import TaskSpec
from unilab_lit.validation import check_arg

if TYPE_CHECKING:
    from torch import nn

    from unilab_lit.collector.writers import Writer
    from unilab_lit.envs.spec import EnvSpec
    from unilab_lit.ipc.obs_stats import SharedObsStatsHandle
    from unilab_lit.ipc.weights import SharedWeightsHandle


@dataclass(frozen=True)
class CollectorOptions:
    """The collector's task, env batch, seed, threads and timeouts (``data.init_args.collector``).

    Validated here, once: the data module, the learner-side session and the collector child
    (inside :class:`~unilab_lit.collector.options.CollectorConfig`) read this same object.

    Args:
        task: The task: a built-in name, ``gym:<EnvId>`` or ``{class_path, init_args}``
            (``unilab_lit.envs.task_spec.TaskSpec``; Python callers may pass the name).
        num_envs: Environments the collector steps together (>= 1).
        seed: Seed of the collector's env and policy sampling (and of the replay sampling).
            ``None`` (the default): the CLI's ``seed_everything``, so ``--seed_everything N``
            reseeds the envs too; 0 where there is none (a Python caller, ``seed_everything:
            false``). A number set here wins over ``seed_everything``.
        physics_threads: MuJoCo threads in the collector (>= 1).
        collector_torch_threads: Torch intra-op threads in the collector (>= 1); one keeps actor
            inference from competing with the physics threads.
        stall_timeout_s: A collector without progress for this long is an error (> 0). Waiting
            for the learner counts as progress; only a stuck loop stalls.
        data_timeout_s: Longest wait for the next batch before failing (> 0).
        startup_timeout_s: Longest wait for the collector to report ready (> 0).
        learner_torch_threads: Torch intra-op threads of the learner process; ``None`` gives
            it the cores the collector does not use (at least one): a learner thread on a core
            the collector also runs on stalls every parallel op at its barrier, which costs
            more than the second thread gains (the cores do not share vector units; measured
            with ``bench/learner_speed.py``, ``core_sharing.py``, ``fit_threads.py``, in
            bench/README.md).

    Raises:
        ValueError: if an option is out of range.
    """

    task: TaskSpec
    num_envs: int
    seed: int | None = None
    physics_threads: int = 1
    collector_torch_threads: int = 1
    stall_timeout_s: float = 30.0
    data_timeout_s: float = 120.0
    startup_timeout_s: float = 120.0
    learner_torch_threads: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "task", TaskSpec.of(self.task))
        threads = self.learner_torch_threads
        check_arg(threads is None or threads >= 1, "learner_torch_threads", threads, ">= 1 or null")
        for name in ("num_envs", "physics_threads", "collector_torch_threads"):
            check_arg(getattr(self, name) >= 1, name, getattr(self, name), ">= 1")
        for name in ("stall_timeout_s", "data_timeout_s", "startup_timeout_s"):
            value = getattr(self, name)
            check_arg(value > 0 and math.isfinite(value), name, value, "a finite number > 0")

    @property
    def base_seed(self) -> int:
        """The seed the collector starts from: ``seed``, or 0 where nothing set it."""
        return 0 if self.seed is None else self.seed


# Data modules save their options in every checkpoint's hyper-parameters (play and export rebuild
# the task from them); Lightning loads checkpoints with torch's weights-only unpickler. Checkpoints
# written before the options moved from unilab_lit/data/ name them by their old path.
torch.serialization.add_safe_globals(
    [CollectorOptions, TaskSpec, (CollectorOptions, "unilab_lit.data.options.CollectorOptions")]
)


class PolicyBuilder(Protocol):
    """What the collector needs of a policy spec (``unilab_lit.nn.policies.PolicySpec`` fits)."""

    def build(self) -> nn.Module: ...


class WriterSpec(Protocol):
    """A picklable recipe for the writer that puts collected steps into shared memory."""

    def build(self, env_spec: EnvSpec) -> Writer: ...


@dataclass(frozen=True)
class CollectorConfig:
    """Everything the collector child needs; it is pickled into the child at spawn time.

    The user's :class:`~unilab_lit.collector.options.CollectorOptions` travel inside it
    unchanged (validated once, where they were built); the rest are the run-time handles and
    the learner's normaliser settings.

    Args:
        options: The user's collector options: task, ``num_envs``, seed, threads, timeouts.
        policy: Recipe for the CPU actor; its ``act(obs)`` gets the normalised policy observation.
        writer: Recipe for the writer (``AppoWriterSpec`` or ``OffPolicyWriterSpec``).
        rank: Global rank of the learner that owns the collector; each rank's collector steps
            its own envs with its own noise (:attr:`seed`).
        weights: Handle of the learner's ``SharedWeights``; ``None`` keeps the policy's own
            initial weights (tests, scripted policies).
        obs_stats: Handle of the learner's ``SharedObsStats``; ``None`` disables normalisation.
        obs_norm_eps: ``eps`` of the learner's normaliser (the collector must use the same one).
        obs_norm_clip: ``clip`` of the learner's normaliser (``None``: unclipped).
        report_interval_s: Seconds between metrics messages (> 0).
        max_episodes_per_report: Most recent finished episodes whose per-episode values one
            metrics message carries (>= 1); counts always cover every episode.
        state_dir: Private directory where the collector writes its state on request and reads
            the state to continue from (``unilab_lit.collector.snapshot``); ``None`` disables both.

    Raises:
        ValueError: if a numeric argument is out of range.
    """

    options: CollectorOptions
    policy: PolicyBuilder
    writer: WriterSpec
    rank: int = 0
    weights: SharedWeightsHandle | None = None
    obs_stats: SharedObsStatsHandle | None = None
    obs_norm_eps: float = 1e-8
    obs_norm_clip: float | None = 10.0
    report_interval_s: float = 1.0
    max_episodes_per_report: int = 256
    state_dir: str | None = None

    def __post_init__(self) -> None:
        check_arg(self.rank >= 0, "rank", self.rank, ">= 0")
        episodes = self.max_episodes_per_report
        check_arg(episodes >= 1, "max_episodes_per_report", episodes, ">= 1")
        interval = self.report_interval_s
        check_arg(
            interval > 0 and math.isfinite(interval),
            "report_interval_s",
            interval,
            "a finite number > 0",
        )
        check_arg(self.obs_norm_eps > 0, "obs_norm_eps", self.obs_norm_eps, "> 0")
        # None leaves the normalised observation unbounded.
        clip = self.obs_norm_clip
        check_arg(clip is None or clip > 0, "obs_norm_clip", clip, "> 0 or None")

    @property
    def seed(self) -> int:
        """This rank's seed: ``options.seed`` itself on rank 0 (see ``distributed.rank_seed``)."""
        # Imported here: a spawn child imports this module before its first line, so it stays light.
        from unilab_lit.distributed import rank_seed

        return rank_seed(self.options.base_seed, self.rank)
