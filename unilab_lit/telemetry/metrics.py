"""Every logged metric key, in one place.

Names are rsl-rl-lib 5.5's (``rsl_rl.utils.logger``) where a metric means the same thing
(``Train/mean_reward``, ``Train/mean_episode_length``, ``Episode/<term>``, ``Loss/value``,
``Loss/surrogate``, ``Loss/entropy``, ``Loss/learning_rate``, ``Policy/mean_std``,
``Perf/total_fps``), so a lab's dashboards line up; our own names only where rsl_rl has none.
docs/configs.md lists the mapping.
"""

from __future__ import annotations

# Episode statistics reported by the collector.
MEAN_REWARD = "Train/mean_reward"
MEAN_EPISODE_LENGTH = "Train/mean_episode_length"
EPISODE_REWARD_TERM = "Episode/rew_{term}"
# Mean over an episode's steps of a task's per-step metric (``EnvSpec.episode_metrics``), e.g.
# QuadrupedJoystick's Episode/tracking_error_lin_vel (m/s) and Episode/tracking_error_ang_vel
# (rad/s): |commanded - actual| planar velocity and yaw rate.
EPISODE_METRIC = "Episode/{name}"
# Env steps the collector delivered to the learner: APPO, every rollout drained from the ring into
# the staging pool, including rollouts that newer ones pushed out of the pool (it keeps the newest
# staging_capacity) before any batch used them, but not the rollouts the ring dropped
# (RING_DROPPED); off-policy, every transition written to the replay. Restored on resume.
ENV_STEPS = "Train/env_steps"
# Env steps of the rollouts a learner batch contained at least once (off-policy: every transition
# in the replay, so equal to ENV_STEPS). Throughput in learned steps is LEARNED_ENV_STEPS / time.
LEARNED_ENV_STEPS = "Train/learned_env_steps"
NONFINITE_RESETS = "Train/nonfinite_resets"
# Share of unilab_lit.callbacks.EnvStepBudget's budget spent (learned env steps / max_env_steps), in
# callback_metrics only (not sent to loggers): the progress bar's total and ETA come from it.
BUDGET_SPENT = "Train/env_step_budget_spent"

# Evaluation of the deterministic policy on its own envs (unilab_lit.callbacks.PolicyEvaluator).
EVAL_MEAN_REWARD = "Eval/mean_reward"
EVAL_MEAN_EPISODE_LENGTH = "Eval/mean_episode_length"
EVAL_REWARD_TERM = "Eval/rew_{term}"
EVAL_METRIC = "Eval/{name}"
# A joystick task's Eval/<tracking error> as a multiple of standing still's on the same commands
# (unilab_lit.envs.policy_episodes.run_episodes), e.g. Eval/tracking_error_lin_vel_vs_standing.
EVAL_METRIC_VS_STANDING_STILL = "Eval/{name}_vs_standing"
EVAL_VIDEO = "Eval/video"

# Throughput.
COLLECTION_FPS = "Perf/collection_fps"
LEARN_FPS = "Perf/learn_fps"
TOTAL_FPS = "Perf/total_fps"
TOTAL_FPS_PER_RANK = "Perf/total_fps_per_rank"  # DDP: the job's total_fps / ranks
# Rollouts the collector overwrote in the ring before the learner read them (APPO).
RING_DROPPED = "Perf/ring_dropped_rollouts"
METRICS_DROPPED = "Perf/metrics_dropped"

# Policy-gradient losses and diagnostics.
LOSS_SURROGATE = "Loss/surrogate"
LOSS_VALUE = "Loss/value"
LOSS_ENTROPY = "Loss/entropy"
APPROX_KL = "Policy/approx_kl"
CLIP_FRACTION = "Policy/clip_fraction"
# V-trace (APPO): share of steps whose importance weight rho exceeds rho-bar (clipped), share whose
# trace coefficient min(c-bar, rho) is below 1 (the trace back from later steps shrinks there), and
# the mean trace coefficient lambda * min(c-bar, rho) (1: the full n-step return propagates).
RHO_CLIP_FRACTION = "Policy/rho_clip_fraction"
TRACE_CUT_FRACTION = "Policy/trace_cut_fraction"
MEAN_TRACE_COEF = "Policy/mean_trace_coef"
GRAD_NORM = "Policy/grad_norm"
LEARNING_RATE = "Loss/learning_rate"
POLICY_LAG = "Policy/lag"
ACTION_STD = "Policy/mean_std"
NONFINITE_SKIPS = "Loss/nonfinite_skips"

# Off-policy (FastTD3 / FastSAC) losses and diagnostics.
LOSS_CRITIC = "Loss/critic"
LOSS_ACTOR = "Loss/actor"
LOSS_TEMPERATURE = "Loss/temperature"
CRITIC_GRAD_NORM = "Policy/critic_grad_norm"
ACTOR_GRAD_NORM = "Policy/actor_grad_norm"
Q_TARGET_MEAN = "Policy/q_target_mean"
Q_TARGET_MAX = "Policy/q_target_max"
Q_TARGET_MIN = "Policy/q_target_min"
TEMPERATURE = "Policy/temperature"
POLICY_ENTROPY = "Policy/entropy"
# Under DDP a learner term is the mean over the ranks, except these extremes of each rank's batch.
MAX_OVER_RANKS = frozenset({Q_TARGET_MAX})
MIN_OVER_RANKS = frozenset({Q_TARGET_MIN})


def episode_reward_term(term: str) -> str:
    """Key under which the per-episode sum of one reward term is logged."""
    return EPISODE_REWARD_TERM.format(term=term)


def episode_metric(name: str) -> str:
    """Key under which the mean over recent episodes of one per-episode metric is logged."""
    return EPISODE_METRIC.format(name=name)


def eval_metric(name: str) -> str:
    """Key under which the evaluation's mean of one per-episode metric is logged."""
    return EVAL_METRIC.format(name=name)


def eval_metric_vs_standing_still(name: str) -> str:
    """Key under which the evaluation's mean of one tracking error, as a multiple of standing
    still's, is logged."""
    return EVAL_METRIC_VS_STANDING_STILL.format(name=name)


def eval_reward_term(term: str) -> str:
    """Key under which the evaluation's mean per-episode sum of one reward term is logged."""
    return EVAL_REWARD_TERM.format(term=term)
