"""Every Lightning callback of the library, by ``class_path``: ``unilab_lit.callbacks.WeightSync``.

The folder is the top-level ``callbacks/``; it installs and imports only as ``unilab_lit.callbacks``
(``unilab_lit/callbacks`` links to it), so a user's own ``callbacks`` module shadows nothing.

Callbacks reach the running collector only through ``collector_link(trainer)``; they import no
data module, algorithm or CLI (docs/architecture.md, floors).
"""

from unilab_lit.callbacks.collector_sync import ObsNormSync, WeightSync
from unilab_lit.callbacks.env_step_budget import EnvStepBudget
from unilab_lit.callbacks.episode_stats import EpisodeStatsMonitor
from unilab_lit.callbacks.evaluation import PolicyEvaluator
from unilab_lit.callbacks.interrupt_guard import InterruptGuard
from unilab_lit.callbacks.rl_checkpoint import RLCheckpoint
from unilab_lit.callbacks.step_progress_bar import StepProgressBar
from unilab_lit.callbacks.stop_checkpoint import StopCheckpoint
from unilab_lit.callbacks.trace_capture import Tracing
from unilab_lit.callbacks.trial_pruning import TrialPruning

__all__ = [
    "EnvStepBudget",
    "EpisodeStatsMonitor",
    "InterruptGuard",
    "ObsNormSync",
    "PolicyEvaluator",
    "RLCheckpoint",
    "StepProgressBar",
    "StopCheckpoint",
    "Tracing",
    "TrialPruning",
    "WeightSync",
]
