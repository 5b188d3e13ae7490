"""Every Lightning callback of the library; usable by ``class_path`` (``callbacks.WeightSync``).

Callbacks reach the running collector only through ``collector_link(trainer)``; they import no
data module, algorithm or CLI (docs/architecture.md, floors).
"""

from callbacks.collector_sync import ObsNormSync, WeightSync
from callbacks.env_step_budget import EnvStepBudget
from callbacks.episode_stats import EpisodeStatsMonitor
from callbacks.evaluation import PolicyEvaluator
from callbacks.interrupt_guard import InterruptGuard
from callbacks.rl_checkpoint import RLCheckpoint
from callbacks.step_progress_bar import StepProgressBar
from callbacks.stop_checkpoint import StopCheckpoint
from callbacks.trace_capture import Tracing
from callbacks.trial_pruning import TrialPruning

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
