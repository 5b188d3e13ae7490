"""Lightning callbacks that connect the learner to the collector; usable by ``class_path``."""

from callbacks.episode_stats import EpisodeStatsMonitor
from callbacks.evaluation import PolicyEvaluator
from callbacks.interrupt_guard import InterruptGuard
from callbacks.obs_norm_sync import ObsNormSync
from callbacks.rl_checkpoint import RLCheckpoint
from callbacks.tracing import Tracing
from callbacks.weight_sync import WeightSync

__all__ = [
    "EpisodeStatsMonitor",
    "InterruptGuard",
    "ObsNormSync",
    "PolicyEvaluator",
    "RLCheckpoint",
    "Tracing",
    "WeightSync",
]
