"""CLI smoke tests: ``cli.py`` as a real subprocess, per config."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import yaml

from tests.conftest import REPO, processes_with_mark
from unilab_lit.ipc import list_segments

SMOKE_OVERRIDES = [
    "--trainer.max_steps=3",
    "--trainer.enable_progress_bar=false",
    "--data.init_args.num_envs=16",
    "--data.init_args.num_steps=8",
]


def _run_cli(
    args: list[str], env: dict[str, str], timeout: float = 240
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "cli.py", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_appo_config_fit_writes_checkpoint_and_events_without_leaks(
    tmp_path, marked_env, shm_snapshot
):
    env, mark = marked_env
    result = _run_cli(
        [
            "fit",
            "--config",
            "configs/appo.yaml",
            *SMOKE_OVERRIDES,
            f"--trainer.logger.init_args.save_dir={tmp_path}",
        ],
        env,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert list(tmp_path.rglob("last.ckpt")), "no last.ckpt written"
    assert list(tmp_path.rglob("events.out.tfevents*")), "no TensorBoard events written"
    deadline = time.monotonic() + 5
    while processes_with_mark(mark) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_with_mark(mark) == [], "processes of the run outlived it"
    assert set(list_segments()) - shm_snapshot == set(), "shared memory left in /dev/shm"


def test_print_config_round_trips(tmp_path, marked_env):
    env, _ = marked_env
    first = _run_cli(["fit", "--config", "configs/appo.yaml", "--print_config"], env)
    assert first.returncode == 0, first.stderr[-4000:]
    saved = tmp_path / "printed.yaml"
    saved.write_text(first.stdout)
    second = _run_cli(["fit", "--config", str(saved), "--print_config"], env)
    assert second.returncode == 0, second.stderr[-4000:]
    assert yaml.safe_load(second.stdout) == yaml.safe_load(first.stdout)
    assert yaml.safe_load(first.stdout)["model"]["class_path"] == "unilab_lit.algos.appo.APPO"


@pytest.mark.parametrize(
    "bad", ["--data.init_args.task=NoSuchTask", "--data.init_args.ring_slots=1"]
)
def test_bad_config_fails_before_training_with_one_line_reason(bad, marked_env, shm_snapshot):
    env, _ = marked_env
    result = _run_cli(["fit", "--config", "configs/appo.yaml", bad], env, timeout=120)
    assert result.returncode != 0
    assert "NoSuchTask" in result.stderr or "ring_slots" in result.stderr
    assert set(list_segments()) - shm_snapshot == set()
