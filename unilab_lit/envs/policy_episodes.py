"""Whole episodes of a trained policy on a batched env: returns, lengths, reward terms, frames,
and on a joystick task its tracking errors against standing still's on the same commands.

Shared by ``python -m unilab_lit.app.play`` and the ``PolicyEvaluator`` callback.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch
from lightning.pytorch import LightningModule

from unilab_lit.envs.base import BatchedMujocoEnv
from unilab_lit.envs.joystick import TRACKING_METRICS
from unilab_lit.envs.spec import METRIC_PREFIX, POLICY, REWARD_PREFIX, EnvSpec
from unilab_lit.telemetry import metrics
from unilab_lit.validation import check_arg

if TYPE_CHECKING:
    from unilab_lit.envs.gym_adapter import GymnasiumVectorAdapter

Act = Callable[[torch.Tensor], torch.Tensor]
"""Raw policy observations ``[N, obs_size]`` -> actions ``[N, action_size]``."""

COMMAND_TERM = "command"
"""The policy observation term of a joystick task's ``(vx, vy, yaw_rate)`` command."""
_LIN_VEL, _ANG_VEL = TRACKING_METRICS


def policy_actions(model: LightningModule, deterministic: bool = True) -> Act:
    """How ``model`` acts on raw observations.

    Args:
        model: An algorithm module with ``inference_policy()`` (deterministic action, normaliser
            folded in) and the collector contract (``obs_normalizer``, ``collector_policy()``).
        deterministic: The deterministic action; ``False`` samples as the collector does.
    """
    if deterministic:
        return model.inference_policy()
    normalizer = model.obs_normalizer
    actor = model.collector_policy()
    return lambda obs: actor.act(normalizer(obs))["actions"]


@dataclass(frozen=True)
class FrameRecording:
    """Which frames :func:`run_episodes` renders: env 0's, one every ``stride`` steps of its episodes.

    Each frame goes to ``sink`` as soon as it is rendered (an encoder streams it to a file; see
    :class:`unilab_lit.telemetry.video.ClipWriter`), so ``run_episodes`` keeps none of them.
    Rendering dominates a filmed run under software OpenGL, so ``stride`` and ``max_frames``
    are what keep a clip of a slow-to-draw robot cheap.

    Args:
        sink: Called with each frame ``[H, W, 3]`` (uint8), in order.
        width: Frame width in pixels.
        height: Frame height in pixels.
        max_frames: Stop recording after this many frames; ``None`` records env 0's episodes
            in full.
        stride: Render every ``stride``-th control step (>= 1), starting with the first.
        camera: A camera of the task's model; ``None`` takes the env's default.
    """

    sink: Callable[[np.ndarray], None]
    width: int = 320
    height: int = 240
    max_frames: int | None = None
    stride: int = 1
    camera: str | None = None

    def __post_init__(self) -> None:
        check_arg(self.stride >= 1, "stride", self.stride, ">= 1")


@dataclass
class EpisodeResults:
    """Finished episodes, in the order they finished.

    Args:
        returns: Undiscounted return of each episode.
        lengths: Steps of each episode.
        terms: Per-episode sum of each reward term, by term name.
        metrics: Per-episode mean of each of the task's step metrics, by metric name.
        standing_still: On a joystick task, per episode, the mean of each tracking error that a
            base that never moves would have scored on the episode's own commands, by metric
            name (see :func:`run_episodes`); empty on other tasks.
        frames_recorded: Env 0's frames handed to the recording's sink.
    """

    returns: np.ndarray
    lengths: np.ndarray
    terms: dict[str, np.ndarray] = field(default_factory=dict)
    metrics: dict[str, np.ndarray] = field(default_factory=dict)
    standing_still: dict[str, np.ndarray] = field(default_factory=dict)
    frames_recorded: int = 0

    @property
    def mean_return(self) -> float:
        return float(np.mean(self.returns))

    @property
    def mean_length(self) -> float:
        return float(np.mean(self.lengths))

    def vs_standing_still(self, name: str) -> float | None:
        """The mean of tracking error ``name`` over the episodes as a multiple of standing
        still's mean on the same episodes' commands.

        A ratio of means, not a mean of per-episode ratios, which an episode commanded to stand
        (a reference near 0) would dominate. ``None`` where the task gives no reference or
        every command was zero.
        """
        reference = self.standing_still.get(name)
        if reference is None or not np.mean(reference) > 0:
            return None
        return float(np.mean(self.metrics[name]) / np.mean(reference))

    def eval_metrics(self) -> dict[str, float]:
        """The means under their ``Eval/`` keys (see :mod:`unilab_lit.telemetry.metrics`)."""
        values = {
            metrics.EVAL_MEAN_REWARD: self.mean_return,
            metrics.EVAL_MEAN_EPISODE_LENGTH: self.mean_length,
        }
        for term, sums in self.terms.items():
            values[metrics.eval_reward_term(term)] = float(np.mean(sums))
        for name, means in self.metrics.items():
            values[metrics.eval_metric(name)] = float(np.mean(means))
        for name in self.standing_still:
            ratio = self.vs_standing_still(name)
            if ratio is not None:
                values[metrics.eval_metric_vs_standing_still(name)] = ratio
        return values


@torch.no_grad()
def run_episodes(
    env: BatchedMujocoEnv | GymnasiumVectorAdapter,
    act: Act,
    episodes: int,
    *,
    seed: int,
    device: torch.device | str = "cpu",
    record: FrameRecording | None = None,
    stop: Callable[[], bool] | None = None,
) -> EpisodeResults | None:
    """Run ``episodes`` whole episodes spread over the env's batch and collect their statistics.

    The env is reset with ``seed`` and without staggered timeouts, so every episode is a full
    one. Env ``i`` contributes its first ``episodes // N (+1 for i < episodes % N)`` episodes and
    is ignored after them, so that envs with short episodes do not crowd out long ones (every
    env still steps, the batch moves as a whole).

    On a joystick task (one that reports ``tracking_error_lin_vel`` and ``tracking_error_ang_vel``
    and shows its command in a ``command`` term of the policy observation), each episode also
    gets standing still's errors on its own commands: the errors ``|cmd_xy - v_xy|`` and
    ``|cmd_yaw - w_z|`` of a base that never moves (``v = 0``), so ``|cmd_xy|`` and ``|cmd_yaw|``,
    with ``cmd`` the command each step is judged against (the one the observation showed before
    it), averaged over the episode's steps as the task averages its errors. It is the
    reference, not a simulated zero action: it needs no second run, it meets exactly the
    policy's commands even where a fall or a reset shifts the env's random stream, and a robot
    that cannot stand on a zero action (the G1) still has one. A command noised in the
    observation (``randomization.obs_noise`` on ``command``) would be read noised.

    Args:
        env: A batched env (any task, the gymnasium adapter included).
        act: Maps raw policy observations to actions (see :func:`policy_actions`).
        episodes: Episodes to finish (>= 1).
        seed: Seed of the env's reset.
        device: Where ``act`` expects its input.
        record: Render env 0 while its episodes run; ``None`` renders nothing.
        stop: Polled before every env step: once true, the episodes are abandoned.

    Returns:
        The episodes' statistics; ``None`` if ``stop()`` abandoned them.

    Raises:
        ValueError: If ``episodes`` is smaller than 1.
    """
    check_arg(episodes >= 1, "episodes", episodes, ">= 1")
    num_envs = env.num_envs
    quota = np.array([episodes // num_envs + (i < episodes % num_envs) for i in range(num_envs)])
    done_count = np.zeros(num_envs, dtype=np.int64)
    returns: list[np.ndarray] = []
    lengths: list[np.ndarray] = []
    terms: dict[str, list[np.ndarray]] = {}
    episode_metrics: dict[str, list[np.ndarray]] = {}
    frames = 0
    standing = _StandingStill.of(env.spec)
    obs = env.reset(seed=seed, stagger=False)
    step = 0
    while (done_count < quota).any():
        if stop is not None and stop():
            return None
        if record is not None and done_count[0] < quota[0] and _films(record, step, frames):
            record.sink(env.render([0], record.width, record.height, record.camera)[0])
            frames += 1
        step += 1
        if standing is not None:
            standing.add_step(obs[POLICY])
        policy_obs = torch.as_tensor(obs[POLICY], device=device)
        actions = act(policy_obs).float().cpu().numpy()
        obs, _, _, _, info = env.step(actions)
        episode = info["episode"]
        ids = episode["env_ids"]
        if len(ids) == 0:
            continue
        counted = done_count[ids] < quota[ids]
        done_count[ids] += 1
        if standing is not None:
            standing.end_episodes(ids, episode["length"], counted)
        returns.append(episode["return"][counted])
        lengths.append(episode["length"][counted])
        for key, value in episode.items():
            if key.startswith(REWARD_PREFIX):
                terms.setdefault(key[len(REWARD_PREFIX) :], []).append(value[counted])
            elif key.startswith(METRIC_PREFIX):
                name = key[len(METRIC_PREFIX) :]
                episode_metrics.setdefault(name, []).append(value[counted])
    return EpisodeResults(
        returns=np.concatenate(returns),
        lengths=np.concatenate(lengths),
        terms={term: np.concatenate(parts) for term, parts in terms.items()},
        metrics={name: np.concatenate(parts) for name, parts in episode_metrics.items()},
        standing_still={} if standing is None else standing.episode_means(),
        frames_recorded=frames,
    )


class _StandingStill:
    """Standing still's tracking errors, summed per env over its episode's steps (see
    :func:`run_episodes`)."""

    def __init__(self, command: slice, num_envs: int) -> None:
        self._command = command
        self._sums = {name: np.zeros(num_envs) for name in TRACKING_METRICS}
        self._means: dict[str, list[np.ndarray]] = {name: [] for name in TRACKING_METRICS}

    @classmethod
    def of(cls, spec: EnvSpec) -> _StandingStill | None:
        """For a task that reports the tracking errors and shows its command; else ``None``."""
        slices = spec.policy_obs_slices()
        if not set(TRACKING_METRICS) <= set(spec.episode_metrics) or COMMAND_TERM not in slices:
            return None
        return cls(slice(*slices[COMMAND_TERM]), spec.num_envs)

    def add_step(self, policy_obs: np.ndarray) -> None:
        """Add the errors of standing still on the commands ``policy_obs`` shows."""
        command = policy_obs[:, self._command].astype(np.float64)
        self._sums[_LIN_VEL] += np.linalg.norm(command[:, :2], axis=1)
        self._sums[_ANG_VEL] += np.abs(command[:, 2])

    def end_episodes(self, ids: np.ndarray, lengths: np.ndarray, counted: np.ndarray) -> None:
        """Keep the means of the ``counted`` ones of the episodes ``ids`` ended; start anew."""
        for name, sums in self._sums.items():
            self._means[name].append((sums[ids] / lengths)[counted])
            sums[ids] = 0.0

    def episode_means(self) -> dict[str, np.ndarray]:
        return {name: np.concatenate(parts) for name, parts in self._means.items()}


def _films(record: FrameRecording, step: int, frames: int) -> bool:
    if step % record.stride:
        return False
    return record.max_frames is None or frames < record.max_frames
