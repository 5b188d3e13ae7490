"""Evaluates the deterministic policy on its own envs during fit and logs ``Eval/*``."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.loggers import Logger, TensorBoardLogger
from tensorboard.compat.proto.summary_pb2 import Summary
from typing_extensions import override

from unilab_lit import distributed
from unilab_lit.collector.link import collector_link, has_collector_link
from unilab_lit.envs.policy_episodes import (
    EpisodeResults,
    FrameRecording,
    policy_actions,
    run_episodes,
)
from unilab_lit.envs.task_spec import TaskSpec
from unilab_lit.telemetry import metrics, tracing, video
from unilab_lit.telemetry.lightning_compat import logger_step, write_tensorboard_summary
from unilab_lit.validation import check_arg

log = logging.getLogger(__name__)


class PolicyEvaluator(Callback):
    """Runs whole episodes of the deterministic policy every ``every_n_steps`` iterations.

    The episodes run in the learner process on an env batch of their own (built once, reset
    with ``seed`` at every evaluation, so successive evaluations start from the same states),
    with the deterministic action and the learner's current normaliser. They never touch the
    collector, which keeps running in its own process. Logged, on the loggers' step axis:
    ``Eval/mean_reward``, ``Eval/mean_episode_length``, ``Eval/rew_<term>`` (mean per-episode
    sum of each reward term) and ``Eval/<name>`` (mean of each of the task's per-episode
    metrics, e.g. a joystick task's tracking errors). On a joystick task (QuadrupedJoystick,
    Go1Joystick, G1Walk) each tracking error also goes out as a multiple of standing still's
    on the same episodes' commands, ``Eval/tracking_error_lin_vel_vs_standing`` and
    ``Eval/tracking_error_ang_vel_vs_standing`` (see
    :func:`~unilab_lit.envs.policy_episodes.run_episodes`): the deterministic policy's
    tracking, where ``Episode/*`` is the exploring one's. The values also go into
    ``trainer.callback_metrics``, so ``ModelCheckpoint(monitor="Eval/mean_reward",
    mode="max")`` keeps the best policy; give it ``every_n_train_steps`` equal to
    ``every_n_steps``.

    With ``every_n_video_steps`` set, the evaluation on those iterations also renders env 0
    (offscreen) and logs up to ``video_frames`` frames as an animated clip under ``Eval/video``
    to every logger that takes one: ``TensorBoardLogger`` and ``WandbLogger`` (its
    ``log_video``); the others are named once at the start.

    Under DDP the episodes run on rank 0 only (its env batch is the only one built) and the
    values are broadcast, so every rank logs the same ``Eval/*`` and a checkpoint that monitors
    one decides the same on every rank; rank 0 writes the curves and the clips.

    A stop request (``unilab_lit.callbacks.InterruptGuard``, through the collector link) abandons
    the evaluation running at that moment: nothing is logged for it and training stops.

    The schedule (next evaluation and video step) is in ``state_dict``, so a resumed run keeps it.

    Args:
        every_n_steps: Iterations between evaluations (>= 1).
        episodes: Episodes per evaluation, spread over the envs (>= 1).
        num_envs: Envs of the evaluation batch (>= 1).
        seed: Seed of the evaluation envs' reset (apart from the collector's).
        task: Task to evaluate on (a name or ``{class_path, init_args}``, checked as the data
            module's is); ``None`` takes the data module's task.
        every_n_video_steps: Iterations between clips; ``None`` (default) logs none. Clips come
            from evaluations, so it should be a multiple of ``every_n_steps``.
        video_frames: Longest clip, in frames (>= 1).
        video_width: Clip width in pixels (>= 1).
        video_height: Clip height in pixels (>= 1).

    Raises:
        ValueError: If a count or size is out of range.
    """

    def __init__(
        self,
        every_n_steps: int = 100,
        episodes: int = 16,
        num_envs: int = 16,
        seed: int = 1_000_003,
        task: TaskSpec | None = None,
        every_n_video_steps: int | None = None,
        video_frames: int = 200,
        video_width: int = 320,
        video_height: int = 240,
    ) -> None:
        for name, value in (
            ("every_n_steps", every_n_steps),
            ("episodes", episodes),
            ("num_envs", num_envs),
            ("video_frames", video_frames),
            ("video_width", video_width),
            ("video_height", video_height),
        ):
            check_arg(value >= 1, f"PolicyEvaluator.{name}", value, ">= 1")
        check_arg(
            every_n_video_steps is None or every_n_video_steps >= 1,
            "PolicyEvaluator.every_n_video_steps",
            every_n_video_steps,
            ">= 1 or null",
        )
        self.every_n_steps = every_n_steps
        self.episodes = episodes
        self.num_envs = num_envs
        self.seed = seed
        self.task = None if task is None else TaskSpec.of(task)
        self.every_n_video_steps = every_n_video_steps
        self.video_frames = video_frames
        self.video_width = video_width
        self.video_height = video_height
        self._next_step: int | None = None
        self._next_video_step: int | None = None
        self._env: Any = None

    @override
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        step = trainer.global_step
        # Restored by load_state_dict on a resume; else the first multiple after this step.
        if self._next_step is None:
            self._next_step = _next_multiple(step, self.every_n_steps)
        if self._next_video_step is None and self.every_n_video_steps is not None:
            self._next_video_step = _next_multiple(step, self.every_n_video_steps)
        if self._env is None and trainer.is_global_zero:
            self._env = self._make_env(trainer)
            if self.every_n_video_steps is not None:
                self._say_which_loggers_take_clips(trainer)

    @override
    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        step = trainer.global_step
        if self._next_step is None or step < self._next_step:
            return
        with_video = self._next_video_step is not None and step >= self._next_video_step
        results, frames = None, []
        if trainer.is_global_zero:
            with tracing.span("PolicyEvaluator.evaluate"):
                results, frames = self._evaluate(trainer, pl_module, with_video)
        # Every rank reaches this step: one broadcast, entered by all of them.
        values = distributed.broadcast_from_rank_zero(
            None if results is None else results.eval_metrics()
        )
        if values is None:
            log.info("evaluation at step %d abandoned: training stops", step)
        else:
            # callback_metrics (ModelCheckpoint, EarlyStopping) through self.log, on every rank.
            pl_module.log_dict(values, on_step=True, on_epoch=False, logger=False, batch_size=1)
        if results is not None:
            self._write(trainer, values, frames)
        self._next_step = _next_multiple(step, self.every_n_steps)
        if with_video:
            self._next_video_step = _next_multiple(step, self.every_n_video_steps)

    @override
    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None

    @override
    def state_dict(self) -> dict[str, Any]:
        return {"next_step": self._next_step, "next_video_step": self._next_video_step}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # Checkpoints without this callback's state keep the schedule of a fresh run.
        self._next_step = state_dict.get("next_step", self._next_step)
        self._next_video_step = state_dict.get("next_video_step", self._next_video_step)

    def _make_env(self, trainer: Trainer) -> Any:
        task = self.task if self.task is not None else collector_link(trainer).options.task
        if self.every_n_video_steps is not None:
            task = task.with_frames()
        return task.build(self.num_envs, seed=self.seed)

    def _evaluate(
        self, trainer: Trainer, pl_module: LightningModule, with_video: bool
    ) -> tuple[EpisodeResults | None, list[np.ndarray]]:
        # A clip of at most video_frames frames, kept for the loggers (W&B takes the array).
        frames: list[np.ndarray] = []
        record = (
            FrameRecording(
                frames.append, self.video_width, self.video_height, max_frames=self.video_frames
            )
            if with_video
            else None
        )
        link = collector_link(trainer) if has_collector_link(trainer) else None
        was_training = pl_module.training
        pl_module.eval()
        try:
            results = run_episodes(
                self._env,
                policy_actions(pl_module, deterministic=True),
                self.episodes,
                seed=self.seed,
                device=pl_module.device,
                record=record,
                stop=None if link is None else lambda: link.stop_requested,
            )
            return results, frames
        finally:
            pl_module.train(was_training)

    def _write(self, trainer: Trainer, values: dict[str, float], frames: list[np.ndarray]) -> None:
        # The curves straight to the loggers, because Lightning writes step metrics only every
        # log_every_n_steps.
        step = logger_step(trainer)
        for logger in trainer.loggers:
            logger.log_metrics(values, step=step)
        if frames:
            self._log_clip(trainer, frames, step)

    @staticmethod
    def _say_which_loggers_take_clips(trainer: Trainer) -> None:
        """One line at the start naming the loggers that get no clip (not one at every clip)."""
        without = [type(lg).__name__ for lg in trainer.loggers if not _takes_clips(lg)]
        if len(without) == len(trainer.loggers):
            log.warning(
                "PolicyEvaluator: no logger takes clips (TensorBoardLogger and WandbLogger "
                "do); the clips every_n_video_steps asks for go nowhere"
            )
        elif without:
            log.info("PolicyEvaluator: clips go to every logger but %s", ", ".join(without))

    def _log_clip(self, trainer: Trainer, frames: list[np.ndarray], step: int) -> None:
        fps = 1.0 / self._env.spec.control_dt
        for logger in trainer.loggers:
            if isinstance(logger, TensorBoardLogger):
                height, width, _ = frames[0].shape
                image = Summary.Image(
                    height=height,
                    width=width,
                    colorspace=3,
                    encoded_image_string=video.gif_bytes(frames, fps),
                )
                summary = Summary(value=[Summary.Value(tag=metrics.EVAL_VIDEO, image=image)])
                # What SummaryWriter.add_video writes, without its moviepy dependency.
                write_tensorboard_summary(logger.experiment, summary, step)
            elif _takes_clips(logger):
                # W&B's Video takes [T, C, H, W] frames.
                clip = np.stack(frames).transpose(0, 3, 1, 2)
                logger.log_video(metrics.EVAL_VIDEO, [clip], step=step, fps=[fps], format=["gif"])


def _takes_clips(logger: Logger) -> bool:
    # TensorBoard through its summary protocol; any other logger with W&B's log_video API.
    return isinstance(logger, TensorBoardLogger) or callable(getattr(logger, "log_video", None))


def _next_multiple(step: int, every: int) -> int:
    return (step // every + 1) * every
