"""CLI smoke tests: ``cli.py`` as a real subprocess, per config."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

import pytest
import yaml

from callbacks import ObsNormSync, WeightSync
from tests.conftest import REPO, processes_with_mark
from unilab_lit.app.unilab_cli import UnilabCLI
from unilab_lit.ipc import list_segments


class CliRun(NamedTuple):
    pid: int
    returncode: int
    stdout: str
    stderr: str


SMOKE_OVERRIDES = [
    "--trainer.max_steps=3",
    "--trainer.enable_progress_bar=false",
    "--data.init_args.collector.num_envs=16",
    "--data.init_args.num_steps=8",
]


def run_cli(
    args: list[str],
    env: dict[str, str],
    timeout: float = 240,
    script: tuple[str, ...] = ("cli.py",),
) -> CliRun:
    """Run ``cli.py`` (or another ``script``: a path, or ``-c`` and code) to completion; the pid
    lets a test find the segments it created."""
    with subprocess.Popen(
        [sys.executable, *script, *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
        return CliRun(proc.pid, proc.returncode, stdout, stderr)


def assert_no_leftovers(run: CliRun, mark: str) -> None:
    """No process of the run is alive and no segment it created is left in /dev/shm."""
    deadline = time.monotonic() + 5
    while processes_with_mark(mark) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_with_mark(mark) == [], "processes of the run outlived it"
    assert list_segments(run.pid) == [], "shared memory left in /dev/shm"


def assert_smoke_fit(
    config: str, overrides: list[str], tmp_path: Path, marked_env: tuple[dict[str, str], str]
) -> CliRun:
    """``cli.py fit`` of a shipped config for a few iterations on CPU: it exits 0, writes
    ``last.ckpt`` and TensorBoard events, and leaves no process or shared memory behind.
    Returns the run, for what a caller checks further."""
    env, mark = marked_env
    result = run_cli(
        [
            "fit",
            "--config",
            config,
            *overrides,
            # Configs for a GPU machine pick it where there is one; the smoke test runs on CPU.
            "--trainer.accelerator=cpu",
            f"--trainer.logger.init_args.save_dir={tmp_path}",
        ],
        env,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert list(tmp_path.rglob("last.ckpt")), "no last.ckpt written"
    assert list(tmp_path.rglob("events.out.tfevents*")), "no TensorBoard events written"
    assert_no_leftovers(result, mark)
    return result


@pytest.mark.parametrize(
    "config",
    [
        "configs/appo.yaml",
        "configs/appo_halfcheetah.yaml",
        "configs/appo_hopper.yaml",
        "configs/appo_ant.yaml",
        "configs/appo_quadruped.yaml",
        "configs/appo_quadruped_2core.yaml",
    ],
)
def test_appo_config_fit_writes_checkpoint_and_events_without_leaks(config, tmp_path, marked_env):
    assert_smoke_fit(config, SMOKE_OVERRIDES, tmp_path, marked_env)


def _appo_config_with(tmp_path, extra_callbacks: list[dict]) -> str:
    config = yaml.safe_load((REPO / "configs" / "appo.yaml").read_text())
    config["trainer"]["callbacks"] += extra_callbacks
    path = tmp_path / "appo_with_callbacks.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def test_shipped_configs_leave_the_sync_callbacks_to_the_algorithm():
    # The algorithm adds WeightSync / ObsNormSync (RLAlgorithm.configure_callbacks); the smoke
    # fits above therefore train with the ones it adds.
    for path in sorted((REPO / "configs").glob("*.yaml")):
        callbacks = yaml.safe_load(path.read_text())["trainer"].get("callbacks", [])
        listed = {callback["class_path"] for callback in callbacks}
        assert not listed & {"callbacks.WeightSync", "callbacks.ObsNormSync"}, path.name


def test_users_own_weight_sync_keeps_its_settings_and_only_obs_norm_sync_is_added(tmp_path):
    mine = {"class_path": "callbacks.WeightSync", "init_args": {"every_n_steps": 2}}
    config = _appo_config_with(tmp_path, [mine])
    args = ["fit", "--config", config, *SMOKE_OVERRIDES]
    cli = UnilabCLI(args=[*args, f"--trainer.logger.init_args.save_dir={tmp_path}"])
    assert cli.trainer.global_step == 3
    weight_syncs = [c for c in cli.trainer.callbacks if isinstance(c, WeightSync)]
    assert [sync.every_n_steps for sync in weight_syncs] == [2]
    assert sum(isinstance(c, ObsNormSync) for c in cli.trainer.callbacks) == 1
    assert list_segments(os.getpid()) == []


def test_print_config_round_trips(tmp_path, marked_env):
    env, _ = marked_env
    first = run_cli(["fit", "--config", "configs/appo.yaml", "--print_config"], env)
    assert first.returncode == 0, first.stderr[-4000:]
    saved = tmp_path / "printed.yaml"
    saved.write_text(first.stdout)
    second = run_cli(["fit", "--config", str(saved), "--print_config"], env)
    assert second.returncode == 0, second.stderr[-4000:]
    assert yaml.safe_load(second.stdout) == yaml.safe_load(first.stdout)
    assert yaml.safe_load(first.stdout)["model"]["class_path"] == "unilab_lit.algos.appo.APPO"


@pytest.mark.parametrize(
    ("override", "reason"),
    [
        (
            "--data.init_args.collector.task=NoSuchTask",
            "data.init_args.collector.task: unknown task 'NoSuchTask': built-in tasks are",
        ),
        ("--data.init_args.ring_slots=1", "ring_slots must be >= 2, got 1"),
        ("--model.init_args.gamma=2", "gamma must be in (0, 1], got 2.0"),
    ],
)
def test_bad_config_fails_before_training_with_one_line_reason(override, reason, marked_env):
    env, mark = marked_env
    result = run_cli(["fit", "--config", "configs/appo.yaml", override], env, timeout=120)
    assert result.returncode == 1
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.startswith("error: invalid config: ") and reason in last_line
    assert "Traceback" not in result.stderr
    assert_no_leftovers(result, mark)


def _summary(stderr: str) -> dict[str, str]:
    """The run summary block's fields (``iterations``, ``checkpoints``, ``play``, ...)."""
    block = stderr.split("INFO unilab_lit.app.unilab_cli: run summary\n", 1)[1]
    return dict(re.split(r"\s{2,}", line.strip(), maxsplit=1) for line in block.strip().split("\n"))


def test_appo_run_output_has_no_lightning_notes_nor_repeats_and_ends_with_a_summary(
    tmp_path, marked_env
):
    env, mark = marked_env
    result = run_cli(
        ["fit", "--config", "configs/appo.yaml", "--trainer.max_steps=120",
         f"--trainer.logger.init_args.save_dir={tmp_path}"],
        env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    # The whole output (so its first 200 lines too): the bar on stdout, the rest on stderr.
    output = result.stdout + result.stderr
    for note in ("Tip:", "litlogger", "deprecated", "ModelCheckpoint", "v_num", "Epoch"):
        assert note not in output, note
    info = re.findall(r"INFO [\w.]+: [^\r\n]*", result.stderr)
    assert info and len(info) == len(set(info)), info
    assert "Iterations" in result.stdout and "env_steps=" in result.stdout
    assert "env_steps/s=" in result.stdout and "return=" in result.stdout

    summary = _summary(result.stderr)
    assert summary["iterations"] == "120"
    assert int(summary["env steps"].replace(",", "")) >= 64 * 32  # ahead of the learner
    assert float(summary["Train return"]) > 0
    checkpoints, logs = Path(summary["checkpoints"]), Path(summary["logs"])
    assert logs.is_dir() and checkpoints.is_dir() and checkpoints.parent == logs
    assert sorted(p.name for p in checkpoints.glob("*.ckpt")) == ["last.ckpt", "step=100.ckpt"]
    last = checkpoints / "last.ckpt"
    assert summary["play"].endswith(f"--ckpt_path {last}")
    assert f"--ckpt_path {last} --output" in summary["export"]
    assert_no_leftovers(result, mark)


def test_model_help_names_an_algorithm_and_lists_its_options(marked_env):
    env, _ = marked_env
    result = run_cli(["fit", "--model.help", "APPO"], env, timeout=120)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "--model.gamma" in result.stdout
    data = run_cli(["fit", "--data.help", "RolloutDataModule"], env, timeout=120)
    assert data.returncode == 0 and "--data.num_steps" in data.stdout, data.stderr[-4000:]


def test_every_subcommand_in_help_runs_and_no_optimizer_options_are_offered(tmp_path, marked_env):
    env, mark = marked_env
    shown = run_cli(["--help"], env, timeout=120)
    assert shown.returncode == 0, shown.stderr[-4000:]
    assert "APPO" in shown.stdout and "RolloutDataModule" in shown.stdout
    (listed,) = re.findall(r"\{([\w,]+)\}", shown.stdout.split("\n")[0])
    for subcommand in listed.split(","):
        options = run_cli([subcommand, "--help"], env, timeout=120).stdout
        assert "--optimizer" not in options and "--lr_scheduler" not in options
        save_dir = tmp_path / subcommand
        args = [subcommand, "--config", "configs/appo.yaml", *SMOKE_OVERRIDES]
        result = run_cli([*args, f"--trainer.logger.init_args.save_dir={save_dir}"], env)
        assert result.returncode == 0, (subcommand, result.stderr[-4000:])
        assert_no_leftovers(result, mark)
