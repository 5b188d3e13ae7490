"""Lightning callbacks that connect the learner to the collector; usable by ``class_path``.

WeightSync, ObsNormSync and StepProgressBar live in the library (the algorithm and the CLI add
them); they are re-exported here so that ``callbacks.WeightSync`` etc. stay valid class paths.
"""

from callbacks.env_step_budget import EnvStepBudget
from callbacks.episode_stats import EpisodeStatsMonitor
from callbacks.evaluation import PolicyEvaluator
from callbacks.interrupt_guard import InterruptGuard
from callbacks.rl_checkpoint import RLCheckpoint
from callbacks.stop_checkpoint import StopCheckpoint
from callbacks.trace_capture import Tracing
from callbacks.trial_pruning import TrialPruning
from unilab_lit.app.step_progress_bar import StepProgressBar
from unilab_lit.collector.obs_norm_sync import ObsNormSync
from unilab_lit.collector.weight_sync import WeightSync

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
