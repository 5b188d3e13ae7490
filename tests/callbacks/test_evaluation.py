"""PolicyEvaluator: Eval/* at the scheduled steps, a clip when asked, the schedule across a resume."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from lightning.pytorch import Trainer, seed_everything
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger, Logger, TensorBoardLogger
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.collector_fits import collector_trainer
from unilab_lit.algos.appo import APPO
from unilab_lit.callbacks import PolicyEvaluator
from unilab_lit.collector.options import CollectorOptions
from unilab_lit.data.rollout import RolloutDataModule
from unilab_lit.envs.joystick import TRACKING_METRICS
from unilab_lit.envs.task_spec import TaskSpec
from unilab_lit.telemetry import metrics

TASK_KWARGS = {"max_episode_steps": 20}
CARTPOLE = TaskSpec("CartpoleSwingup", TASK_KWARGS)


def _fit(
    root: Path,
    evaluator: PolicyEvaluator,
    max_steps: int,
    checkpoint: ModelCheckpoint,
    ckpt_path: Path | None = None,
    logger: Logger | list[Logger] | None = None,
    task: TaskSpec = CARTPOLE,
) -> Trainer:
    seed_everything(0)
    data = RolloutDataModule(
        CollectorOptions(task, 8, learner_torch_threads=1),
        num_steps=8,
    )
    spec = data.env_spec
    model = APPO(
        policy_obs_size=spec.policy_obs_size,
        critic_obs_size=spec.critic_obs_size,
        action_size=spec.action_size,
        actor_hidden_dims=(16,),
        critic_hidden_dims=(16,),
        num_learning_epochs=1,
        num_mini_batches=1,
    )
    trainer = collector_trainer(
        max_steps,
        evaluator,
        checkpoint,
        logger=TensorBoardLogger(root, name="run", version=0) if logger is None else logger,
        log_every_n_steps=100,  # Eval/* must reach the logger whatever this says
        enable_checkpointing=True,
    )
    trainer.fit(model, datamodule=data, ckpt_path=ckpt_path)
    return trainer


def _events(root: Path) -> EventAccumulator:
    accumulator = EventAccumulator(str(root / "run" / "version_0"), size_guidance={"images": 0})
    accumulator.Reload()
    return accumulator


def _steps(accumulator: EventAccumulator, tag: str) -> list[int]:
    return [event.step for event in accumulator.Scalars(tag)]


def test_evaluator_logs_eval_metrics_and_clip_at_its_steps_and_feeds_model_checkpoint(tmp_path):
    evaluator = PolicyEvaluator(
        every_n_steps=3,
        episodes=3,
        num_envs=2,
        every_n_video_steps=6,
        video_frames=4,
        video_width=32,
        video_height=24,
    )
    best = ModelCheckpoint(
        dirpath=tmp_path / "ckpt",
        monitor=metrics.EVAL_MEAN_REWARD,
        mode="max",
        every_n_train_steps=3,
    )
    trainer = _fit(tmp_path, evaluator, max_steps=7, checkpoint=best)

    events = _events(tmp_path)
    # Iterations 3 and 6 end at logger steps 2 and 5 (the x-axis every other metric uses).
    assert _steps(events, metrics.EVAL_MEAN_REWARD) == [2, 5]
    lengths = [event.value for event in events.Scalars(metrics.EVAL_MEAN_EPISODE_LENGTH)]
    assert lengths == [20.0, 20.0], "every evaluation episode runs to its time limit"
    for term in ("upright", "centered", "small_control", "small_velocity"):
        assert _steps(events, metrics.eval_reward_term(term)) == [2, 5]
    clips = events.Images(metrics.EVAL_VIDEO)
    assert [clip.step for clip in clips] == [5]
    assert clips[0].encoded_image_string[:6] == b"GIF89a"
    assert (clips[0].width, clips[0].height) == (32, 24)
    assert best.best_model_score is not None and Path(best.best_model_path).is_file()
    # "best" is the better of the two evaluations, not the latest one.
    evaluated = [event.value for event in events.Scalars(metrics.EVAL_MEAN_REWARD)]
    assert float(best.best_model_score) == pytest.approx(max(evaluated))
    assert float(trainer.callback_metrics[metrics.EVAL_MEAN_REWARD]) == pytest.approx(evaluated[-1])


def test_evaluator_logs_a_joystick_tasks_tracking_against_standing_still(tmp_path):
    evaluator = PolicyEvaluator(every_n_steps=2, episodes=2, num_envs=2)
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt")
    task = TaskSpec("QuadrupedJoystick", TASK_KWARGS)
    trainer = _fit(tmp_path, evaluator, max_steps=2, checkpoint=checkpoint, task=task)

    events = _events(tmp_path)
    for name in TRACKING_METRICS:
        assert _steps(events, metrics.eval_metric(name)) == [1]
        (ratio,) = events.Scalars(metrics.eval_metric_vs_standing_still(name))
        # An untrained policy moves little: about standing still's error, on the same commands.
        assert ratio.step == 1 and 0.5 < ratio.value < 2.0
        logged = trainer.callback_metrics[metrics.eval_metric_vs_standing_still(name)]
        assert float(logged) == pytest.approx(ratio.value)


class _VideoLogger(CSVLogger):
    """A logger with W&B's ``log_video`` API that records what it was given."""

    def __init__(self, root: Path) -> None:
        super().__init__(root, name="videos")
        self.videos: list[tuple[str, int, tuple, list]] = []

    def log_video(self, key, videos, step=None, **kwargs) -> None:
        self.videos.extend((key, step, v.shape, kwargs["fps"]) for v in videos)


def _clip_evaluator() -> PolicyEvaluator:
    return PolicyEvaluator(
        every_n_steps=3, episodes=1, num_envs=1, every_n_video_steps=3, video_frames=4,
        video_width=32, video_height=24,
    )  # fmt: skip


def test_clips_reach_loggers_with_log_video_and_the_others_are_named_once(tmp_path, caplog):
    takes, skips = _VideoLogger(tmp_path), CSVLogger(tmp_path, name="plain")
    best = ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=100)
    with caplog.at_level(logging.INFO, logger="unilab_lit.callbacks.evaluation"):
        _fit(tmp_path, _clip_evaluator(), max_steps=7, checkpoint=best, logger=[takes, skips])
    # Frames [T, C, H, W] at logger steps 2 and 5 (iterations 3 and 6).
    assert [(k, s, shape[1:]) for k, s, shape, _ in takes.videos] == [
        (metrics.EVAL_VIDEO, 2, (3, 24, 32)),
        (metrics.EVAL_VIDEO, 5, (3, 24, 32)),
    ]
    said = [r.getMessage() for r in caplog.records if "clips" in r.getMessage()]
    assert said == ["PolicyEvaluator: clips go to every logger but CSVLogger"]


def test_clips_reach_wandb_offline(tmp_path, monkeypatch):
    pytest.importorskip("wandb", reason="wandb is not installed (pip install wandb)")
    from lightning.pytorch.loggers import WandbLogger

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    logger = WandbLogger(save_dir=str(tmp_path), project="unilab_lit_test")
    best = ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=100)
    _fit(tmp_path, _clip_evaluator(), max_steps=4, checkpoint=best, logger=logger)
    logger.experiment.finish()
    assert list(tmp_path.rglob("*.gif")), os.listdir(tmp_path)


def test_evaluator_keeps_its_schedule_across_a_resume(tmp_path):
    checkpoints = tmp_path / "ckpt"
    first = PolicyEvaluator(every_n_steps=3, episodes=2, num_envs=2)
    _fit(
        tmp_path / "first",
        first,
        max_steps=4,
        checkpoint=ModelCheckpoint(dirpath=checkpoints, every_n_train_steps=4, save_top_k=-1),
    )
    assert first.state_dict() == {"next_step": 6, "next_video_step": None}

    # A different interval on resume: the saved schedule (next at 6) still decides the first.
    resumed = PolicyEvaluator(every_n_steps=5, episodes=2, num_envs=2)
    _fit(
        tmp_path / "resumed",
        resumed,
        max_steps=11,
        checkpoint=ModelCheckpoint(dirpath=tmp_path / "unused", every_n_train_steps=100),
        ckpt_path=checkpoints / "epoch=0-step=4.ckpt",
    )
    assert _steps(_events(tmp_path / "resumed"), metrics.EVAL_MEAN_REWARD) == [5, 9]


def test_evaluator_takes_its_own_task_as_a_name_or_a_class_path_spec():
    spec = {"class_path": "unilab_lit.envs.cartpole.CartpoleSwingup", "init_args": TASK_KWARGS}
    assert PolicyEvaluator(task=spec).task == TaskSpec.of(spec)
    assert PolicyEvaluator(task="CartpoleSwingup").task == TaskSpec("CartpoleSwingup")
