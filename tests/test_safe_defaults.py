"""Callbacks a run needs are added when a config lacks them; a config's own instance wins.

A config written from scratch lists model, data and logger only; it still gets episode
statistics, RL checkpoint state, the interrupt guard and the stop checkpoint
(``unilab_lit.app.unilab_cli.DEFAULT_CALLBACKS``), so Ctrl-C and SIGTERM keep their promise.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO
from tests.faults.step_probe import read_step
from tests.faults.test_fault_injection import (
    APPO_TINY,
    _last_checkpoint,
    _signal_group_and_wait,
    _start_training,
)
from tests.test_cli import CliRun, assert_no_leftovers, cli_output
from unilab_lit.app.unilab_cli import DEFAULT_CALLBACKS, SIGTERM_EXIT_STATUS, UnilabCLI
from unilab_lit.callbacks import (
    EnvStepBudget,
    EpisodeStatsMonitor,
    InterruptGuard,
    RLCheckpoint,
    StopCheckpoint,
)

MINIMAL_CONFIG = """\
model:
  class_path: unilab_lit.algos.appo.APPO
  init_args:
    actor_hidden_dims: [32, 32]
    critic_hidden_dims: [32, 32]
data:
  class_path: unilab_lit.data.rollout.RolloutDataModule
  init_args:
    collector:
      task: CartpoleSwingup
      num_envs: 16
trainer:
  logger:
    class_path: lightning.pytorch.loggers.TensorBoardLogger
    init_args:
      save_dir: runs
      name: minimal
"""


def _minimal_config(tmp_path: Path, callbacks: list[dict] | None = None) -> str:
    config = yaml.safe_load(MINIMAL_CONFIG)
    if callbacks is not None:
        config["trainer"]["callbacks"] = callbacks
    path = tmp_path / "minimal.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def _trainer_callbacks(tmp_path: Path, *args: str) -> list:
    cli = UnilabCLI(args=[*args, f"--trainer.logger.init_args.save_dir={tmp_path}"], run=False)
    return cli.trainer.callbacks


def test_config_without_callbacks_gets_every_default(tmp_path):
    callbacks = _trainer_callbacks(tmp_path, "--config", _minimal_config(tmp_path))
    for cls in (EpisodeStatsMonitor, RLCheckpoint, InterruptGuard, StopCheckpoint):
        assert sum(isinstance(c, cls) for c in callbacks) == 1, cls.__name__
    (stop,) = (c for c in callbacks if isinstance(c, StopCheckpoint))
    assert stop.save_last is True
    assert stop._every_n_train_steps == 500
    # Checkpoint callbacks run after the interrupt guard (StopCheckpoint writes after its hook).
    assert callbacks.index(stop) > next(
        i for i, c in enumerate(callbacks) if isinstance(c, InterruptGuard)
    )


def test_own_instances_keep_their_settings_and_budget_stays_before_episode_stats(tmp_path):
    mine = [
        {"class_path": "unilab_lit.callbacks.EnvStepBudget", "init_args": {"max_env_steps": 1000}},
        {"class_path": "unilab_lit.callbacks.RLCheckpoint", "init_args": {"keep_replays": 3}},
        {
            "class_path": "unilab_lit.callbacks.StopCheckpoint",
            "init_args": {"every_n_train_steps": 7},
        },
    ]
    callbacks = _trainer_callbacks(tmp_path, "--config", _minimal_config(tmp_path, mine))
    (checkpoint_state,) = (c for c in callbacks if isinstance(c, RLCheckpoint))
    assert checkpoint_state.keep_replays == 3
    (stop,) = (c for c in callbacks if isinstance(c, StopCheckpoint))
    assert stop._every_n_train_steps == 7
    kinds = [type(c) for c in callbacks]
    assert kinds.index(EnvStepBudget) < kinds.index(EpisodeStatsMonitor)
    assert InterruptGuard in kinds


def test_checkpointing_off_adds_no_checkpoint_callback(tmp_path):
    config = _minimal_config(tmp_path)
    callbacks = _trainer_callbacks(
        tmp_path, "--config", config, "--trainer.enable_checkpointing=false"
    )
    assert not any(isinstance(c, (StopCheckpoint, RLCheckpoint)) for c in callbacks)
    assert any(isinstance(c, InterruptGuard) for c in callbacks)


def test_shipped_configs_list_only_callbacks_they_change():
    defaults = {d["class_path"]: d.get("init_args", {}) for d in DEFAULT_CALLBACKS}
    for path in [*(REPO / "configs").glob("*.yaml"), *(REPO / "examples").glob("*/*.yaml")]:
        for callback in yaml.safe_load(path.read_text())["trainer"].get("callbacks", []):
            init_args = callback.get("init_args", {})
            assert defaults.get(callback["class_path"]) != init_args, (path.name, callback)


@pytest.mark.parametrize(
    ("signum", "exit_status"), [(signal.SIGINT, 0), (signal.SIGTERM, SIGTERM_EXIT_STATUS)]
)
def test_minimal_config_writes_last_at_the_stop_step_on_ctrl_c_and_sigterm(
    signum, exit_status, tmp_path, marked_env
):
    env, mark = marked_env
    proc = _start_training(_minimal_config(tmp_path), APPO_TINY, env, tmp_path, 3)
    returncode = _signal_group_and_wait(proc, signum)
    stderr = (tmp_path / "stderr").read_text()
    assert returncode == exit_status, stderr[-4000:]
    assert _last_checkpoint(tmp_path / "runs")["global_step"] == read_step(tmp_path / "step")
    assert_no_leftovers(CliRun(proc.pid, returncode, "", stderr), mark)


def test_print_config_shows_every_callback_the_cli_adds_once(tmp_path, capsys):
    # The saved config.yaml is the same parsed config (LightningCLI's SaveConfigCallback).
    own = [
        {
            "class_path": "unilab_lit.callbacks.StopCheckpoint",
            "init_args": {"every_n_train_steps": 7},
        }
    ]
    printed = cli_output(
        ["fit", "--config", _minimal_config(tmp_path, own), "--print_config"], capsys
    )
    listed = [c["class_path"] for c in yaml.safe_load(printed)["trainer"]["callbacks"]]
    assert sorted(listed) == sorted(d["class_path"] for d in DEFAULT_CALLBACKS)
    assert (
        "unilab_lit.callbacks.WeightSync" in listed and "unilab_lit.callbacks.ObsNormSync" in listed
    )
    stop = yaml.safe_load(printed)["trainer"]["callbacks"][0]
    assert stop["init_args"]["every_n_train_steps"] == 7  # the config's own instance wins
