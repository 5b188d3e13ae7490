"""Lightning loggers, profilers and the progress bar with the real pipeline."""

from __future__ import annotations

import csv
import json
import os

import pytest
import torch
import yaml
from lightning.pytorch import Callback
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.collector_fits import collector_trainer, tiny_appo
from tests.test_cli import SMOKE_OVERRIDES, assert_no_leftovers, run_cli
from unilab_lit.app.unilab_cli import UnilabCLI
from unilab_lit.callbacks import EpisodeStatsMonitor
from unilab_lit.collector.options import CollectorOptions
from unilab_lit.data.rollout import RolloutDataModule
from unilab_lit.envs.task_spec import TaskSpec
from unilab_lit.ipc import list_segments
from unilab_lit.telemetry import metrics

# Short episodes, so that finished episodes (and the mean reward) arrive within a few iterations.
FAST = [
    "--data.init_args.collector.num_envs=8",
    "--data.init_args.num_steps=8",
    "--data.init_args.collector.task={class_path: CartpoleSwingup, init_args: {max_episode_steps: 16}}",
    "--trainer.log_every_n_steps=1",
]


def _scalar_steps(run_dir, tag: str) -> list[int]:
    accumulator = EventAccumulator(str(run_dir))
    accumulator.Reload()
    return [event.step for event in accumulator.Scalars(tag)]


def test_cli_resume_continues_tensorboard_and_csv_curves_in_their_run_directories(
    tmp_path, marked_env
):
    env, mark = marked_env
    runs = tmp_path / "runs"
    loggers = tmp_path / "loggers.yaml"
    loggers.write_text(
        yaml.safe_dump(
            {
                "trainer": {
                    "logger": [
                        {
                            "class_path": "lightning.pytorch.loggers.TensorBoardLogger",
                            "init_args": {"save_dir": str(runs), "name": "appo"},
                        },
                        {
                            "class_path": "unilab_lit.telemetry.loggers.ResumableCSVLogger",
                            "init_args": {"save_dir": str(runs), "name": "appo"},
                        },
                    ]
                }
            }
        )
    )
    common = ["fit", "--config", "configs/appo.yaml", "--config", str(loggers)]
    common += [a for a in SMOKE_OVERRIDES if not a.startswith("--trainer.max_steps")]
    common += ["--trainer.log_every_n_steps=1"]
    first = run_cli([*common, "--trainer.max_steps=3"], env)
    assert first.returncode == 0, first.stderr[-4000:]
    version_dirs = sorted(p.name for p in (runs / "appo").iterdir())
    resumed = run_cli([*common, "--trainer.max_steps=6", "--ckpt_path=last"], env)
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert "Restored all states from the checkpoint" in resumed.stderr
    # Lightning's note on a non-empty checkpoint directory is about fresh runs, not a resume.
    assert "exists and is not empty" not in resumed.stderr
    # No new version directory: each logger went on in the one it had.
    assert sorted(p.name for p in (runs / "appo").iterdir()) == version_dirs
    (tb_dir,) = {p.parent for p in runs.rglob("events.out.tfevents*")}
    assert len(list(tb_dir.glob("events.out.tfevents*"))) == 2
    assert _scalar_steps(tb_dir, metrics.ENV_STEPS) == list(range(6))
    assert _scalar_steps(tb_dir, metrics.LEARNING_RATE) == list(range(6))
    (csv_file,) = runs.rglob("metrics.csv")
    with open(csv_file, newline="") as file:
        rows = [row for row in csv.DictReader(file) if row[metrics.ENV_STEPS]]
    assert [int(row["step"]) for row in rows] == list(range(6))
    env_steps = [float(row[metrics.ENV_STEPS]) for row in rows]
    assert env_steps == sorted(env_steps)  # the counter continued, it did not restart
    (last,) = runs.rglob("last.ckpt")
    assert torch.load(last, weights_only=True)["global_step"] == 6
    assert_no_leftovers(resumed, mark)


# The off-policy pipeline (FastTD3 + ReplayDataModule), as small as it goes.
OFFPOLICY_CONFIG = {
    "trainer": {
        "accelerator": "cpu",
        "logger": False,
        "enable_checkpointing": False,
        "callbacks": [
            {"class_path": "unilab_lit.callbacks.WeightSync"},
            {"class_path": "unilab_lit.callbacks.ObsNormSync"},
            {"class_path": "unilab_lit.callbacks.EpisodeStatsMonitor"},
        ],
    },
    "model": {
        "class_path": "unilab_lit.algos.fast_td3.FastTD3",
        "init_args": {
            "actor_hidden_dims": [16],
            "critic_hidden_dims": [16],
            "offpolicy": {"num_atoms": 11, "updates_per_step": 2},
        },
    },
    "data": {
        "class_path": "unilab_lit.data.replay.ReplayDataModule",
        "init_args": {
            "collector": {"task": "CartpoleSwingup", "num_envs": 4},
            "batch_size": 8,
            "buffer_size": 64,
            "learning_starts": 4,
        },
    },
}

PROFILERS = {
    "simple": ("lightning.pytorch.profilers.SimpleProfiler", "training_step"),
    "advanced": ("lightning.pytorch.profilers.AdvancedProfiler", "ncalls"),
    "pytorch": ("lightning.pytorch.profilers.PyTorchProfiler", "Self CPU time total"),
}


@pytest.mark.parametrize("pipeline", ["appo", "offpolicy"])
@pytest.mark.parametrize("name", sorted(PROFILERS))
def test_profiler_from_yaml_profiles_the_pipeline(name, pipeline, tmp_path):
    class_path, expected = PROFILERS[name]
    if pipeline == "appo":
        base = [
            "configs/appo.yaml",
            *FAST,
            f"--trainer.logger.init_args.save_dir={tmp_path / 'runs'}",
        ]
    else:
        (tmp_path / "offpolicy.yaml").write_text(yaml.safe_dump(OFFPOLICY_CONFIG))
        base = [str(tmp_path / "offpolicy.yaml"), f"--trainer.default_root_dir={tmp_path}"]
    config = tmp_path / "profiler.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "trainer": {
                    "profiler": {
                        "class_path": class_path,
                        "init_args": {"dirpath": str(tmp_path / "prof"), "filename": "prof"},
                    }
                }
            }
        )
    )
    cli = UnilabCLI(
        args=[
            "fit",
            "--config",
            *base,
            "--config",
            str(config),
            "--trainer.max_steps=3",
            "--trainer.enable_progress_bar=false",
        ]
    )
    assert cli.trainer.global_step == 3
    report = (tmp_path / "prof" / "fit-prof.txt").read_text()
    assert expected in report
    if name == "pytorch":
        (trace,) = (tmp_path / "prof").glob("*training_step*.pt.trace.json")
        assert json.loads(trace.read_text())["traceEvents"]
    assert list_segments(os.getpid()) == []


class _StopWhenShown(Callback):
    """Ends the run once the bar shows all three numbers (the reward needs finished episodes)."""

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        shown = trainer.progress_bar_callback.get_metrics(trainer, pl_module)
        if {metrics.MEAN_REWARD, metrics.TOTAL_FPS, metrics.POLICY_LAG} <= shown.keys():
            trainer.should_stop = True


def test_progress_bar_shows_reward_fps_and_lag_counting_iterations_to_max_steps():
    data = RolloutDataModule(
        CollectorOptions(TaskSpec("CartpoleSwingup", {"max_episode_steps": 16}), 8), num_steps=8
    )
    model = tiny_appo(
        data,
        num_learning_epochs=1,
        num_mini_batches=2,
    )
    max_steps = 2000  # a bound: the callback stops the run as soon as the bar is complete
    trainer = collector_trainer(
        max_steps, EpisodeStatsMonitor(), _StopWhenShown(), enable_progress_bar=True
    )
    trainer.fit(model, datamodule=data)
    bar = trainer.progress_bar_callback.train_progress_bar
    assert trainer.global_step < max_steps, "the bar never showed all three numbers"
    assert bar.total == max_steps  # one step is one iteration: no factor of optimiser steps
    assert bar.n == trainer.global_step
    assert {metrics.MEAN_REWARD, metrics.TOTAL_FPS, metrics.POLICY_LAG} <= set(
        trainer.progress_bar_metrics
    )
    assert metrics.POLICY_LAG in str(bar)
