"""CLI tests: ``cli.py`` as a real subprocess per config; help and ``--print_config`` in-process."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO
from tests.journeys.cli_runs import Done, assert_no_leftovers, finish
from unilab_lit.app.unilab_cli import UnilabCLI
from unilab_lit.callbacks import ObsNormSync, WeightSync
from unilab_lit.ipc import list_segments

# A finished ``cli.py`` run (pid, exit status, output), as the journeys' helpers return it.
CliRun = Done


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
    return finish([sys.executable, *script, *args], REPO, env, timeout)


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


def _appo_config_with(tmp_path, extra_callbacks: list[dict]) -> str:
    config = yaml.safe_load((REPO / "configs" / "appo.yaml").read_text())
    config["trainer"]["callbacks"] += extra_callbacks
    path = tmp_path / "appo_with_callbacks.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def test_shipped_configs_leave_the_sync_callbacks_to_the_data_module():
    # The data module adds WeightSync / ObsNormSync (data.base.with_publishers); the shipped
    # configs' journeys (tests/journeys/test_configs.py) therefore train with the ones it adds.
    for path in sorted((REPO / "configs").glob("*.yaml")):
        callbacks = yaml.safe_load(path.read_text())["trainer"].get("callbacks", [])
        listed = {callback["class_path"] for callback in callbacks}
        assert not listed & {
            "unilab_lit.callbacks.WeightSync",
            "unilab_lit.callbacks.ObsNormSync",
        }, path.name


def test_users_own_weight_sync_keeps_its_settings_and_only_obs_norm_sync_is_added(tmp_path):
    mine = {"class_path": "unilab_lit.callbacks.WeightSync", "init_args": {"every_n_steps": 2}}
    config = _appo_config_with(tmp_path, [mine])
    args = ["fit", "--config", config, *SMOKE_OVERRIDES]
    cli = UnilabCLI(args=[*args, f"--trainer.logger.init_args.save_dir={tmp_path}"])
    assert cli.trainer.global_step == 3
    weight_syncs = [c for c in cli.trainer.callbacks if isinstance(c, WeightSync)]
    assert [sync.every_n_steps for sync in weight_syncs] == [2]
    assert sum(isinstance(c, ObsNormSync) for c in cli.trainer.callbacks) == 1
    assert list_segments(os.getpid()) == []


def cli_output(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """What ``cli.py args`` prints before it exits 0 without a run (help, ``--print_config``).

    In this process: parsing starts nothing, and a subprocess would add only its interpreter and
    Lightning start-up (seconds each); the configs' journeys (tests/journeys) run ``cli.py`` itself.
    """
    with pytest.raises(SystemExit) as exited:
        UnilabCLI(args=args)
    printed = capsys.readouterr()
    assert exited.value.code in (0, None), printed.err[-4000:]
    return printed.out


def test_print_config_round_trips(tmp_path, capsys):
    config = str(REPO / "configs" / "appo.yaml")
    first = cli_output(["fit", "--config", config, "--print_config"], capsys)
    saved = tmp_path / "printed.yaml"
    saved.write_text(first)
    second = cli_output(["fit", "--config", str(saved), "--print_config"], capsys)
    assert yaml.safe_load(second) == yaml.safe_load(first)
    assert yaml.safe_load(first)["model"]["class_path"] == "unilab_lit.algos.appo.APPO"


@pytest.mark.parametrize(
    ("override", "reason"),
    [
        (
            "--data.init_args.collector.task=NoSuchTask",
            "data.init_args.collector.task: unknown task 'NoSuchTask': built-in tasks are",
        ),
        ("--data.init_args.ring_slots=1", "ring_slots must be >= 2, got 1"),
        ("--model.init_args.gamma=2", "gamma must be in (0, 1], got 2.0"),
        (
            "--data.init_args.collector.task.init_args.frame_skp=3",
            "data.init_args.collector.task.init_args.frame_skp: CartpoleSwingup has no argument "
            "'frame_skp'; did you mean frame_skip?",
        ),
    ],
)
def test_bad_config_fails_before_training_with_one_line_reason(override, reason):
    # What UnilabCLI raises in this process; the next test runs a refused cli.py end to end.
    with pytest.raises(SystemExit) as refused:
        UnilabCLI(args=["fit", "--config", str(REPO / "configs" / "appo.yaml"), override])
    line = refused.value.code
    assert isinstance(line, str) and "\n" not in line, line
    assert line.startswith("error: invalid config: ") and reason in line


GO1_CONFIG = str(REPO / "configs" / "appo_go1.yaml")
TASK = "--data.init_args.collector.task"


def _printed_task(*overrides: str, capsys: pytest.CaptureFixture[str]) -> dict:
    printed = cli_output(["fit", "--config", GO1_CONFIG, *overrides, "--print_config"], capsys)
    return yaml.safe_load(printed)["data"]["init_args"]["collector"]["task"]


def test_task_argument_overrides_merge_into_the_config_files_task(capsys):
    # The file names a preset (randomization: seed); options given as a mapping replace it, and
    # later keys merge into that mapping.
    options = '{"friction_range": [0.5, 1.25], "obs_noise": {"ang_vel": 0.2, "joint_vel": 1.5}}'
    task = _printed_task(
        f'{TASK}.init_args.reward_weights={{"lin_vel_z": -4.0}}',
        f"{TASK}.init_args.randomization={options}",
        f"{TASK}.init_args.randomization.push_velocity=0.3",
        "--data.init_args.num_steps=8",
        f"{TASK}.init_args.randomization.obs_noise.ang_vel=0.1",
        capsys=capsys,
    )
    assert task["class_path"] == "Go1Joystick"
    args = task["init_args"]
    assert args["reward_weights"] == {"lin_vel_z": -4.0}
    # The task's other arguments, and the other keys of the changed ones, stay.
    assert args["action_scale"] == 0.25
    assert args["randomization"]["push_velocity"] == 0.3
    assert args["randomization"]["friction_range"] == [0.5, 1.25]
    assert args["randomization"]["obs_noise"] == {"ang_vel": 0.1, "joint_vel": 1.5}
    assert _printed_task(capsys=capsys)["init_args"]["randomization"] == "seed"
    assert (
        _printed_task(f"{TASK}.init_args.randomization=null", capsys=capsys)["init_args"][
            "randomization"
        ]
        is None
    )


def test_task_class_path_override_replaces_the_task(capsys):
    task = _printed_task(f"{TASK}.class_path=CartpoleSwingup", capsys=capsys)
    assert task == {
        "class_path": "CartpoleSwingup",
        "init_args": {"frame_skip": 2, "max_episode_steps": 500, "reset_noise_scale": 0.01},
    }
    task = _printed_task(f"{TASK}=CartpoleSwingup", f"{TASK}.init_args.frame_skip=4", capsys=capsys)
    assert task["init_args"]["frame_skip"] == 4


def test_task_argument_override_reaches_the_built_task():
    cli = UnilabCLI(
        args=[
            "--config", str(REPO / "configs" / "appo.yaml"),
            f"{TASK}.init_args.frame_skip=3",
            "--data.init_args.collector.num_envs=2",
            "--trainer.logger=false",
        ],
        run=False,
    )  # fmt: skip
    task = cli.datamodule.collector.task
    assert task.init_args["frame_skip"] == 3
    assert task.build(1).frame_skip == 3


def test_task_argument_override_before_the_config_is_refused_in_one_line():
    with pytest.raises(SystemExit) as refused:
        UnilabCLI(args=["fit", f"{TASK}.init_args.frame_skip=3", "--config", GO1_CONFIG])
    line = refused.value.code
    assert isinstance(line, str) and "\n" not in line, line
    assert line.startswith(f"error: invalid config: {TASK[2:]}.init_args.frame_skip: the arguments")


def test_refused_cli_exits_1_with_the_reason_last_no_traceback_and_leaves_nothing(marked_env):
    env, mark = marked_env
    override = "--data.init_args.ring_slots=1"
    result = run_cli(["fit", "--config", "configs/appo.yaml", override], env, timeout=120)
    assert result.returncode == 1
    last_line = result.stderr.strip().splitlines()[-1]
    assert (
        last_line.startswith("error: invalid config: ") and "ring_slots must be >= 2" in last_line
    )
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


def test_model_help_names_an_algorithm_and_lists_its_options(capsys):
    assert "--model.gamma" in cli_output(["fit", "--model.help", "APPO"], capsys)
    assert "--data.num_steps" in cli_output(["fit", "--data.help", "RolloutDataModule"], capsys)


def test_help_offers_only_fit_whose_smoke_fit_runs_and_no_optimizer_options(capsys):
    shown = cli_output(["--help"], capsys)
    assert "APPO" in shown and "RolloutDataModule" in shown
    (listed,) = re.findall(r"\{([\w,]+)\}", shown.split("\n")[0])
    # Every subcommand offered runs: fit is the only one, and each shipped config's journey
    # (tests/journeys/test_configs.py) runs it through cli.py.
    assert listed.split(",") == ["fit"]
    options = cli_output(["fit", "--help"], capsys)
    assert "--trainer.max_steps" in options
    assert "--optimizer" not in options and "--lr_scheduler" not in options


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["--ckpt_path", "nope.ckpt"], "checkpoint nope.ckpt does not exist"),
        (
            ["--model=FastTD3"],
            "model FastTD3 trains from a ReplayDataModule, not from data RolloutDataModule",
        ),
    ],
)
def test_user_error_ends_in_one_line_before_anything_is_written(
    args, reason, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    runs = tmp_path / "runs"
    config = str(REPO / "configs" / "appo.yaml")
    with pytest.raises(SystemExit) as refused:
        UnilabCLI(
            args=["fit", "--config", config, *args, f"--trainer.logger.init_args.save_dir={runs}"]
        )
    line = refused.value.code
    assert isinstance(line, str) and "\n" not in line, line
    assert line.startswith("error: ") and reason in line
    assert list(tmp_path.iterdir()) == []
    assert list_segments(os.getpid()) == []


def test_override_before_the_config_is_refused_in_one_line_naming_it():
    save_dir = "--trainer.logger.init_args.save_dir=runs"
    with pytest.raises(SystemExit) as refused:
        UnilabCLI(args=["fit", save_dir, "--config", str(REPO / "configs" / "appo.yaml")])
    line = refused.value.code
    assert isinstance(line, str) and "\n" not in line, line
    assert line == (
        "error: invalid config: --trainer.logger.init_args.save_dir comes before --config, "
        "which would replace it: put overrides after --config"
    )
