"""The user-facing collector options (``data.init_args.collector``), carried unchanged into the child."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from unilab_lit.envs.task_spec import TaskSpec
from unilab_lit.validation import check_arg


@dataclass(frozen=True)
class CollectorOptions:
    """The collector's task, env batch, seed, threads and timeouts (``data.init_args.collector``).

    Validated here, once: the data module, the learner-side session and the collector child
    (inside :class:`~unilab_lit.collector.config.CollectorConfig`) read this same object.

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
