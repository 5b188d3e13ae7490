"""A user's own task, named only by its class path, through the real CLI: fit (APPO, FastSAC),
evaluation, play, export, resume, and one-line refusals before anything starts.

``examples.reacher.Reacher`` is registered nowhere in ``unilab_lit``; the subprocesses run
outside the repository with the repository root on ``PYTHONPATH``, which is how a user's own
package is found.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.conftest import REPO
from unilab_lit.app.unilab_cli import UnilabCLI
from unilab_lit.envs.policy_episodes import run_episodes
from unilab_lit.envs.task_spec import TaskSpec
from unilab_lit.telemetry import metrics

CONFIG = REPO / "examples" / "reacher" / "appo.yaml"
CLASS_PATH = "examples.reacher.Reacher"
ITERATIONS = 50  # the config's PolicyEvaluator runs at iteration 50
EVAL_EPISODES = 32
EVAL_SEED = 1_000_003  # PolicyEvaluator's default
# Uniform random actions score about -10 per 50-step episode; a Jacobian-transpose controller
# about -5.4, and 50 iterations of APPO about -5.5.
MARGIN = 2.0


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def _cli_fit(cwd: Path, config: Path, *args: str) -> subprocess.CompletedProcess:
    return _run([str(REPO / "cli.py"), "fit", "--config", str(config), *args], cwd)


def _fit(cwd: Path, *overrides: str) -> subprocess.CompletedProcess:
    return _cli_fit(
        cwd,
        CONFIG,
        "--trainer.enable_progress_bar=false",
        "--trainer.logger=CSVLogger",
        f"--trainer.logger.init_args.save_dir={cwd / 'runs'}",
        *overrides,
    )


@pytest.fixture(scope="module")
def reacher_run(tmp_path_factory) -> Path:
    """Working directory of a 50-iteration APPO fit of the example task (CSV metrics)."""
    cwd = tmp_path_factory.mktemp("reacher")
    result = _fit(cwd, f"--trainer.max_steps={ITERATIONS}")
    assert result.returncode == 0, result.stderr[-4000:]
    return cwd


def _last_checkpoint(cwd: Path) -> Path:
    (path,) = cwd.rglob("last.ckpt")
    return path


def test_example_task_trained_with_appo_beats_a_random_policy(reacher_run):
    (metrics_file,) = reacher_run.rglob("metrics.csv")
    with metrics_file.open() as stream:
        evaluated = [
            float(row[metrics.EVAL_MEAN_REWARD])
            for row in csv.DictReader(stream)
            if row.get(metrics.EVAL_MEAN_REWARD)
        ]
    env = TaskSpec(CLASS_PATH, {"max_episode_steps": 50}).build(EVAL_EPISODES)
    generator = torch.Generator().manual_seed(0)
    random = run_episodes(
        env,
        lambda obs: torch.rand(obs.shape[0], 2, generator=generator) * 2 - 1,
        EVAL_EPISODES,
        seed=EVAL_SEED,
    )
    env.close()
    assert evaluated, "the config's PolicyEvaluator logged nothing"
    assert evaluated[-1] > random.mean_return + MARGIN, (evaluated, random.mean_return)


def test_play_and_export_rebuild_the_example_task_from_the_checkpoint(reacher_run, tmp_path):
    checkpoint = _last_checkpoint(reacher_run)
    played = _run(
        [
            "-m",
            "unilab_lit.app.play",
            "--ckpt_path",
            str(checkpoint),
            "--num_envs=16",
            "--episodes=16",
        ],
        tmp_path,
    )
    assert played.returncode == 0, played.stderr[-2000:]
    mean_return = float(re.search(r"mean return (-?[\d.]+)", played.stdout)[1])
    # Reacher-v5's reward since f1295f5: random -10.5 to -11.2 over 16 episodes (5 seeds).
    assert mean_return > -9.9, played.stdout

    exported = _run(
        ["-m", "unilab_lit.app.export", "--ckpt_path", str(checkpoint), "--output", "policy.onnx"],
        tmp_path,
    )
    assert exported.returncode == 0, exported.stderr[-2000:]
    # The fit's checkpoint and both exported files carry a new file's usual mode (this process's
    # umask, which the subprocesses inherited), not mkstemp's private 0600.
    umask = os.umask(0o022)
    os.umask(umask)
    for path in (checkpoint, tmp_path / "policy.onnx", tmp_path / "policy.pt2"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask, path
    extra = {"metadata.json": ""}
    torch.export.load(tmp_path / "policy.pt2", extra_files=extra)
    metadata = json.loads(extra["metadata.json"])
    assert metadata["task"] == CLASS_PATH and metadata["obs_size"] == 10
    assert json.loads(metadata["task_init_args"])["max_episode_steps"] == 50


def test_resume_of_the_example_task_continues_at_the_saved_step(reacher_run, tmp_path):
    # A copy: the other tests read the fixture's run as it was written.
    shutil.copytree(reacher_run / "runs", tmp_path / "runs")
    saved = torch.load(_last_checkpoint(tmp_path), map_location="cpu", weights_only=True)
    assert saved["global_step"] == ITERATIONS
    assert TaskSpec.of(saved["datamodule_hyper_parameters"]["collector"]["task"]) == TaskSpec(
        CLASS_PATH, {**TaskSpec.from_config(CLASS_PATH).init_args, "max_episode_steps": 50}
    )
    result = _fit(tmp_path, "--ckpt_path=last", f"--trainer.max_steps={ITERATIONS + 10}")
    assert result.returncode == 0, result.stderr[-4000:]
    # The resumed run appends to the same metrics file; a run that started over would log
    # its first steps again.
    (metrics_file,) = (tmp_path / "runs").rglob("metrics.csv")
    with metrics_file.open() as stream:
        steps = [int(row["step"]) for row in csv.DictReader(stream) if row["step"]]
    assert steps == sorted(steps) and max(steps) >= ITERATIONS, steps


def test_example_task_trains_with_fast_sac_by_its_class_path(tmp_path):
    result = _cli_fit(
        tmp_path,
        REPO / "configs" / "fast_sac.yaml",
        "--trainer.max_steps=6",
        "--trainer.enable_progress_bar=false",
        f"--trainer.logger.init_args.save_dir={tmp_path / 'runs'}",
        f"--data.init_args.collector.task={CLASS_PATH}",
        "--data.init_args.collector.num_envs=4",
        "--data.init_args.batch_size=8",
        "--data.init_args.buffer_size=64",
        "--data.init_args.learning_starts=8",
        "--model.init_args.actor_hidden_dims=[16]",
        "--model.init_args.critic_hidden_dims=[16]",
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert (
        torch.load(_last_checkpoint(tmp_path), map_location="cpu", weights_only=True)["global_step"]
        == 6
    )


@pytest.mark.parametrize(
    ("task", "message"),
    [
        (
            f"{{class_path: {CLASS_PATH}, init_args: {{target_radiu: 0.1}}}}",
            "data.init_args.collector.task.init_args.target_radiu: Reacher has no argument "
            "'target_radiu'; did you mean target_radius?",
        ),
        (
            f"{{class_path: {CLASS_PATH}, init_args: {{max_episode_steps: fifty}}}}",
            "data.init_args.collector.task.init_args.max_episode_steps: expected int",
        ),
        ("my_robots.Robot", "task 'my_robots.Robot' cannot be imported"),
        ("examples.reacher.Reachr", "has no attribute 'Reachr'); did you mean Reacher?"),
        ("collections.OrderedDict", "task 'collections.OrderedDict' is not a task"),
    ],
    ids=["misspelled", "mistyped", "not-importable", "misspelled-class", "not-a-task"],
)
def test_bad_task_is_refused_in_one_line_naming_it(task, message):
    # What the CLI raises in this process; the next test runs a refused cli.py end to end.
    with pytest.raises(SystemExit) as refused:
        UnilabCLI(args=["fit", "--config", str(CONFIG), f"--data.init_args.collector.task={task}"])
    line = refused.value.code
    assert isinstance(line, str) and "\n" not in line, line
    assert line.startswith("error: invalid config: ") and message in line


def test_bad_task_ends_cli_py_in_one_line_before_anything_starts(tmp_path):
    result = _fit(tmp_path, "--data.init_args.collector.task=my_robots.Robot")
    assert result.returncode != 0
    # One line and nothing else: no seed set, no collector, no run directory.
    assert result.stderr.strip().splitlines() == [result.stderr.strip()], result.stderr
    assert result.stderr.startswith("error: invalid config: ")
    assert "task 'my_robots.Robot' cannot be imported" in result.stderr
    assert not (tmp_path / "runs").exists()


def test_print_config_shows_the_task_arguments_with_defaults(tmp_path):
    result = _cli_fit(tmp_path, CONFIG, "--print_config")
    assert result.returncode == 0, result.stderr[-2000:]
    for line in (f"class_path: {CLASS_PATH}", "target_radius: 0.18", "ctrl_cost_weight: 0.01"):
        assert line in result.stdout


def test_mjcf_path_relative_to_the_config_file_is_found_from_anywhere(tmp_path):
    # A locomotion task with its own copy of the MJCF next to the config, run from elsewhere.
    from unilab_lit.envs.locomotion import gymnasium_asset

    config_dir = tmp_path / "robot"
    config_dir.mkdir()
    shutil.copy(gymnasium_asset("hopper.xml"), config_dir / "my_hopper.xml")
    config = config_dir / "task.yaml"
    config.write_text(
        "data:\n  init_args:\n    collector:\n      task:\n"
        "        class_path: unilab_lit.envs.locomotion.Hopper\n"
        "        init_args: {xml_file: my_hopper.xml}\n"
    )
    result = _cli_fit(
        tmp_path, REPO / "configs" / "appo_hopper.yaml", "--config", str(config), "--print_config"
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"xml_file: {config_dir / 'my_hopper.xml'}" in result.stdout
    assert np.isfinite(
        TaskSpec("Hopper", {"xml_file": str(config_dir / "my_hopper.xml")})
        .build(1)
        .reset()["policy"]
    ).all()


def test_a_discrete_action_space_is_refused_in_one_line_naming_the_space(tmp_path):
    result = _fit(tmp_path, "--data.init_args.collector.task=gym:CartPole-v1")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "error: invalid config: GymnasiumVectorAdapter: the action space must be a "
        "gymnasium.spaces.Box (continuous actions), got Discrete(2)"
    )
    assert not list(tmp_path.rglob("*.ckpt"))
