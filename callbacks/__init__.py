"""Lightning callbacks that connect the learner to the collector; usable by ``class_path``."""

from callbacks.env_step_budget import EnvStepBudget
from callbacks.episode_stats import EpisodeStatsMonitor
from callbacks.evaluation import PolicyEvaluator
from callbacks.interrupt_guard import InterruptGuard
from callbacks.obs_norm_sync import ObsNormSync
from callbacks.rl_checkpoint import RLCheckpoint
from callbacks.step_progress_bar import StepProgressBar
from callbacks.stop_checkpoint import StopCheckpoint
from callbacks.tracing import Tracing
from callbacks.weight_sync import WeightSync

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
    "WeightSync",
]
