"""Lightning callbacks that connect the learner to the collector; usable by ``class_path``."""

from callbacks.episode_stats import EpisodeStatsMonitor
from callbacks.obs_norm_sync import ObsNormSync
from callbacks.tracing import Tracing
from callbacks.weight_sync import WeightSync

__all__ = ["EpisodeStatsMonitor", "ObsNormSync", "Tracing", "WeightSync"]
