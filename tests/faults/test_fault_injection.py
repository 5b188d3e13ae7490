"""Fault injection on the real ``cli.py fit``: stop signals, hard kills, bad configs and checkpoints.

Every run that trains is ``cli.py`` as a subprocess in its own session (process group), as a
terminal or a scheduler would have it, and signals go to the whole group; configs and checkpoints
refused while parsing are what ``UnilabCLI`` raises in this process. The shipped configs keep
their own checkpoint cadence (``every_n_train_steps`` 100 for APPO, 2000 for FastSAC); only sizes
are shrunk.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch

from tests.conftest import REPO, processes_with_mark
from tests.faults.step_probe import read_step
from tests.test_cli import CliRun, assert_no_leftovers, run_cli
from unilab_lit.app.unilab_cli import UnilabCLI
from unilab_lit.collector.process import HUNG_S
from unilab_lit.ipc import ShmBlock, list_segments
from unilab_lit.ipc.reclaim import COLLECTOR_DIR_PREFIX

APPO_CONFIG = str(REPO / "configs" / "appo.yaml")
STARTUP_S = 240  # imports, collector spawn and the first iterations on a loaded 2-core machine
EXIT_S = 60
STOP_S = 5  # a stop request while the learner waits on data (issue 22)
APPO_TINY = [
    "--trainer.enable_progress_bar=false",
    "--data.init_args.collector.num_envs=16",
    "--data.init_args.num_steps=8",
]
SAC_TINY = [
    "--trainer.enable_progress_bar=false",
    "--data.init_args.collector.num_envs=4",
    "--data.init_args.batch_size=32",
    "--data.init_args.buffer_size=500",
    "--data.init_args.learning_starts=5",
    "--model.init_args.actor_hidden_dims=[32,32]",
    "--model.init_args.critic_hidden_dims=[32,32]",
    "--model.init_args.offpolicy.num_atoms=11",
]


def _start_training(
    config: str,
    tiny: list[str],
    env: dict[str, str],
    out: Path,
    step: int,
    probe_args: tuple[str, ...] = (),
) -> subprocess.Popen:
    """``cli.py fit`` in its own process group (``out/runs``), once it has finished ``step``.

    ``probe_args`` follow the ``StepProbe`` (its own arguments, then more callbacks)."""
    probe = out / "step"
    args = [
        *tiny,
        "--trainer.max_steps=100000",
        f"--trainer.logger.init_args.save_dir={out / 'runs'}",
        "--trainer.callbacks+=tests.faults.step_probe.StepProbe",
        f"--trainer.callbacks.path={probe}",
        *probe_args,
    ]
    proc = subprocess.Popen(
        [sys.executable, "cli.py", "fit", "--config", config, *args],
        cwd=REPO,
        env=env,
        stdout=open(out / "stdout", "w"),  # noqa: SIM115 - closed by the OS when the child exits
        stderr=open(out / "stderr", "w"),  # noqa: SIM115
        start_new_session=True,  # its own process group, signalled as a whole
    )
    _wait_for_step(proc, probe, step, out)
    return proc


def _wait_for_step(proc: subprocess.Popen, probe: Path, step: int, out: Path) -> None:
    deadline = time.monotonic() + STARTUP_S
    while read_step(probe) < step:
        assert proc.poll() is None, (out / "stderr").read_text()[-4000:]
        assert time.monotonic() < deadline, f"training did not reach step {step}"
        time.sleep(0.05)


def _signal_group_and_wait(proc: subprocess.Popen, signum: int) -> int:
    try:
        os.killpg(proc.pid, signum)
        return proc.wait(timeout=EXIT_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _last_checkpoint(root: Path) -> dict:
    (last,) = root.rglob("last.ckpt")
    return torch.load(last, weights_only=True, map_location="cpu")


def test_sigint_off_the_checkpoint_interval_writes_last_at_the_stop_step_and_resume_continues(
    tmp_path, marked_env
):
    env, mark = marked_env
    runs, probe = tmp_path / "runs", tmp_path / "step"
    # Past the periodic checkpoint at step 100.
    proc = _start_training("configs/appo.yaml", APPO_TINY, env, tmp_path, 103)
    returncode = _signal_group_and_wait(proc, signal.SIGINT)
    stderr = (tmp_path / "stderr").read_text()
    assert returncode == 0, stderr[-4000:]
    stop_step = read_step(probe)
    assert stop_step % 100 != 0
    assert list(runs.rglob("*step=100.ckpt")), "the shipped periodic checkpoint is missing"
    checkpoint = _last_checkpoint(runs)
    assert checkpoint["global_step"] == stop_step
    assert checkpoint["RolloutDataModule"]["collector"]["env"] is not None
    assert_no_leftovers(CliRun(proc.pid, returncode, "", stderr), mark)

    resumed = run_cli(
        [
            "fit",
            "--config",
            "configs/appo.yaml",
            *APPO_TINY,
            f"--trainer.max_steps={stop_step + 2}",
            f"--trainer.logger.init_args.save_dir={runs}",
            "--ckpt_path=last",
        ],
        env,
    )
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert "Restoring states from the checkpoint path" in resumed.stdout + resumed.stderr
    assert _last_checkpoint(runs)["global_step"] == stop_step + 2
    assert len(list(runs.glob("*/version_*"))) == 1, "the resume started a new run directory"
    assert_no_leftovers(resumed, mark)


# What srun sets for a one-task job; Lightning then picks SLURMEnvironment(auto_requeue=True).
_SLURM_TASK = {
    "SLURM_NTASKS": "1",
    "SLURM_JOB_NAME": "train",
    "SLURM_JOB_ID": "4242",
    "SLURM_PROCID": "0",
    "SLURM_LOCALID": "0",
    "SLURM_NODEID": "0",
}


def _slurm_task_env(env: dict[str, str], out: Path) -> dict[str, str]:
    """``env`` as srun sets it, with an ``scontrol`` that records its arguments in ``out/scontrol``."""
    bin_dir = out / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(f'#!/bin/sh\necho "$@" > {out / "scontrol"}\n')
    (bin_dir / "scontrol").chmod(0o755)
    return {**env, **_SLURM_TASK, "PATH": f"{bin_dir}:{env['PATH']}"}


@pytest.mark.parametrize(
    "signum",
    [signal.SIGTERM, pytest.param(signal.SIGUSR1, marks=pytest.mark.slow)],
    ids=["sigterm", "slurm_requeue_sigusr1"],
)
def test_stop_signal_to_the_group_writes_last_checkpoint_with_replay_and_exits_143(
    signum, tmp_path, marked_env
):
    env, mark = marked_env
    if signum == signal.SIGUSR1:
        env = _slurm_task_env(env, tmp_path)
    runs, probe = tmp_path / "runs", tmp_path / "step"
    proc = _start_training("configs/fast_sac.yaml", SAC_TINY, env, tmp_path, 3)
    returncode = _signal_group_and_wait(proc, signum)
    stderr = (tmp_path / "stderr").read_text()
    assert returncode == 143, stderr[-4000:]
    assert f"{signum.name} at step" in stderr
    stop_step = read_step(probe)
    checkpoint = _last_checkpoint(runs)
    assert checkpoint["global_step"] == stop_step
    assert checkpoint["ReplayDataModule"]["collector"] is not None
    assert list(runs.rglob(f"replay-step={stop_step}.bin")), "no replay sidecar at the stop step"
    if signum == signal.SIGUSR1:
        # Requeued once last.ckpt was written, by InterruptGuard rather than Lightning's handler.
        assert (tmp_path / "scontrol").read_text().split() == ["requeue", "4242"]
        assert "SLURM job 4242 requeued" in stderr
    assert_no_leftovers(CliRun(proc.pid, returncode, "", stderr), mark)


def _sigterm_learner(proc: subprocess.Popen, probe: Path, after_s: float) -> tuple[int, int]:
    """SIGTERM the learner alone ``after_s`` from now: the step it had reached then, and its exit
    status within ``STOP_S`` (the group is killed if it runs longer)."""
    try:
        time.sleep(after_s)
        step = read_step(probe)
        proc.send_signal(signal.SIGTERM)
        return step, proc.wait(timeout=STOP_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _collector_pid(mark: str) -> int:
    """The collector child of the marked run (the resource tracker carries the mark too)."""
    (pid,) = [
        pid
        for pid in processes_with_mark(mark)
        if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()
    ]
    return pid


# The probe hangs the collector after step 2, before a checkpoint of every step snapshots it.
_CHECKPOINT_WRITE = (
    "--trainer.callbacks.hang_collector_at=2",
    "--trainer.callbacks+=lightning.pytorch.callbacks.ModelCheckpoint",
    "--trainer.callbacks.every_n_train_steps=1",
)


@pytest.mark.parametrize(
    ("waiting_at", "tiny", "probe_args"),
    [
        # Rollouts of 32k env steps: the collector is stopped before its first one is complete.
        (0, [*APPO_TINY, "--data.init_args.num_steps=2000"], ()),
        (2, APPO_TINY, ()),
        # Synchronous: no rollout ahead in the ring, so step 2 is the last one trained.
        pytest.param(
            2,
            [*APPO_TINY, "--data.init_args.synchronous=true"],
            _CHECKPOINT_WRITE,
            marks=pytest.mark.slow,
        ),
    ],
    ids=["first_rollout", "hung_collector", "checkpoint_write"],
)
def test_sigterm_while_the_learner_waits_on_a_hung_collector_exits_143_within_seconds(
    waiting_at, tiny, probe_args, tmp_path, marked_env
):
    env, mark = marked_env
    runs, probe = tmp_path / "runs", tmp_path / "step"
    proc = _start_training("configs/appo.yaml", tiny, env, tmp_path, waiting_at, probe_args)
    collector = _collector_pid(mark)
    os.kill(collector, signal.SIGSTOP)
    # The learner drains the ring, then waits on the hung collector, which stays hung.
    stop_step, returncode = _sigterm_learner(proc, probe, HUNG_S + 1)
    stderr = (tmp_path / "stderr").read_text()
    assert returncode == 143, stderr[-4000:]
    assert read_step(probe) == stop_step
    if waiting_at == 0:
        assert stop_step == 0
        assert not list(runs.rglob("last.ckpt")), "a checkpoint without a trained step"
    else:
        checkpoint = _last_checkpoint(runs)
        assert checkpoint["global_step"] == stop_step >= waiting_at
        assert checkpoint["RolloutDataModule"]["collector"] is None  # hung: left out
    assert f"collector pid {collector} has not beaten" in stderr
    assert_no_leftovers(CliRun(proc.pid, returncode, "", stderr), mark)


@pytest.mark.slow
# appo.yaml's own free-running collection, and the synchronous mode.
@pytest.mark.parametrize("synchronous", [False, True], ids=["free_running", "synchronous"])
def test_sigterm_during_an_evaluation_abandons_it_and_exits_143_within_seconds(
    synchronous, tmp_path, marked_env
):
    env, mark = marked_env
    runs, probe = tmp_path / "runs", tmp_path / "step"
    task = '{"class_path": "CartpoleSwingup", "init_args": {"max_episode_steps": 1000000}}'
    evaluator = (
        "--trainer.callbacks+=unilab_lit.callbacks.PolicyEvaluator",
        "--trainer.callbacks.every_n_steps=2",
        "--trainer.callbacks.episodes=1",
        "--trainer.callbacks.num_envs=1",
        f"--trainer.callbacks.task={task}",
    )
    tiny = [*APPO_TINY, f"--data.init_args.synchronous={str(synchronous).lower()}"]
    proc = _start_training("configs/appo.yaml", tiny, env, tmp_path, 2, evaluator)
    # Inside step 2's evaluation: one episode of a million steps.
    _, returncode = _sigterm_learner(proc, probe, 1.0)
    stderr = (tmp_path / "stderr").read_text()
    assert returncode == 143, stderr[-4000:]
    assert "evaluation at step 2 abandoned" in stderr
    checkpoint = _last_checkpoint(runs)
    assert checkpoint["global_step"] == read_step(probe) >= 2
    assert checkpoint["RolloutDataModule"]["collector"] is not None
    assert_no_leftovers(CliRun(proc.pid, returncode, "", stderr), mark)


def test_new_start_reclaims_blocks_of_a_group_sigkilled_run_and_spares_live_ones(
    tmp_path, marked_env
):
    env, mark = marked_env
    proc = _start_training("configs/appo.yaml", APPO_TINY, env, tmp_path, 2)
    killed_pid = proc.pid
    _signal_group_and_wait(proc, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while processes_with_mark(mark) and time.monotonic() < deadline:
        time.sleep(0.1)
    leaked = list_segments(killed_pid)
    assert leaked, "a group SIGKILL left nothing to reclaim (the test proves nothing)"
    temp_dirs = list(Path(tempfile.gettempdir()).glob(f"{COLLECTOR_DIR_PREFIX}{killed_pid}_*"))
    assert temp_dirs, "the collector's temp directory did not outlive the kill"
    live = ShmBlock.create(64, "live_owner")  # this test process: alive
    try:
        restart = run_cli(
            [
                "fit",
                "--config",
                "configs/appo.yaml",
                *APPO_TINY,
                "--trainer.max_steps=1",
                f"--trainer.logger.init_args.save_dir={tmp_path / 'runs2'}",
            ],
            env,
        )
        assert restart.returncode == 0, restart.stderr[-4000:]
        assert list_segments(killed_pid) == []
        assert all(not d.exists() for d in temp_dirs)
        assert f"left by dead process(es) [{killed_pid}]" in restart.stderr
        assert live.name in list_segments(os.getpid())
    finally:
        live.unlink()
    assert_no_leftovers(restart, mark)


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        (
            "--model.init_args.gama=0.9",
            "model.init_args.gama: APPO has no argument 'gama'; did you mean gamma?",
        ),
        (
            "--data.init_args.collector.num_envs=abc",
            "data.init_args.collector.num_envs: expected int, got 'abc'",
        ),
        ("--trainer.max_stpes=3", "unknown option 'trainer.max_stpes'; did you mean"),
    ],
)
def test_misspelled_or_mistyped_key_fails_in_one_line(override, expected):
    line = _refusal(["fit", "--config", APPO_CONFIG, override])
    assert line.startswith("error: invalid config: ") and expected in line


def test_broken_yaml_fails_in_one_line_naming_file_and_line(tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("trainer:\n  max_steps: 3\nmodel:\n  init_args: [1, 2\n")
    line = _refusal(["fit", "--config", str(broken)])
    assert line.startswith(f"error: invalid config: {broken}, line ")


@pytest.fixture(scope="module")
def appo_checkpoint(tmp_path_factory) -> Path:
    runs = tmp_path_factory.mktemp("appo_ckpt")
    result = run_cli(
        [
            "fit",
            "--config",
            "configs/appo.yaml",
            *APPO_TINY,
            "--trainer.max_steps=2",
            f"--trainer.logger.init_args.save_dir={runs}",
        ],
        dict(os.environ),
    )
    assert result.returncode == 0, result.stderr[-4000:]
    (last,) = runs.rglob("last.ckpt")
    return last


def _refusal(args: list[str]) -> str:
    """The one line ``cli.py args`` is refused with while parsing, before anything starts.

    What ``UnilabCLI`` raises, in this process: ``SystemExit`` with a one-line message, which
    Python prints as the last line of stderr with exit status 1 and no traceback. A subprocess
    would add only its interpreter and Lightning start-up (seconds); refused runs of ``cli.py``
    itself are checked end to end by the full-disk and memory-budget tests here, the bad-config
    tests of test_cli.py and the bad-task tests of test_user_task.py.
    """
    with pytest.raises(SystemExit) as refused:
        UnilabCLI(args=args)
    line = refused.value.code
    assert isinstance(line, str) and "\n" not in line, line
    return line


def test_full_disk_under_the_logger_ends_the_run_in_one_line_naming_the_log_directory(
    tmp_path,
):
    result = run_cli(
        [
            "fit",
            "--config",
            "configs/appo.yaml",
            *APPO_TINY,
            "--trainer.max_steps=20",
            "--trainer.log_every_n_steps=1",
            "--trainer.logger=tests.faults.full_disk_logger.FullDiskLogger",
            f"--trainer.logger.init_args.save_dir={tmp_path}",
        ],
        dict(os.environ),
        timeout=120,
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith(f"error: disk full while writing {tmp_path}"), line
    assert line.endswith("No space left on device")


def test_checkpoint_of_another_model_and_task_is_refused_in_one_line(appo_checkpoint, tmp_path):
    line = _refusal(
        [
            "fit",
            "--config",
            str(REPO / "configs" / "fast_sac.yaml"),
            f"--trainer.logger.init_args.save_dir={tmp_path}",
            f"--ckpt_path={appo_checkpoint}",
        ]
    )
    assert line.startswith(f"error: checkpoint {appo_checkpoint} was written by another config")
    assert (
        "model class unilab_lit.algos.appo.APPO in the checkpoint, "
        "unilab_lit.algos.fast_sac.FastSAC in the config" in line
    )
    assert "task CartpoleSwingup in the checkpoint, HalfCheetah in the config" in line


def test_truncated_checkpoint_is_refused_naming_its_path(appo_checkpoint, tmp_path):
    truncated = tmp_path / "truncated.ckpt"
    data = appo_checkpoint.read_bytes()
    truncated.write_bytes(data[: len(data) // 2])
    line = _refusal(
        [
            "fit",
            "--config",
            APPO_CONFIG,
            f"--trainer.logger.init_args.save_dir={tmp_path}",
            f"--ckpt_path={truncated}",
        ]
    )
    assert line.startswith(f"error: checkpoint {truncated} cannot be read")


def test_resume_with_other_data_sizes_is_refused_in_one_line_before_the_run_directory(
    appo_checkpoint, tmp_path
):
    runs = tmp_path / "runs"
    line = _refusal(
        [
            "fit",
            "--config",
            APPO_CONFIG,
            *APPO_TINY,
            "--data.init_args.collector.num_envs=32",
            "--data.init_args.num_steps=16",
            f"--trainer.logger.init_args.save_dir={runs}",
            f"--ckpt_path={appo_checkpoint}",
        ]
    )
    assert line.startswith(f"error: checkpoint {appo_checkpoint} was written by another config")
    assert "num_envs 16 in the checkpoint, 32 in the config" in line
    assert "num_steps 8 in the checkpoint, 16 in the config" in line
    assert not runs.exists(), "the run directory was created"


def test_checkpoint_that_does_not_load_weights_only_is_refused_in_one_line(tmp_path):
    foreign = tmp_path / "foreign.ckpt"
    torch.save({"state_dict": {}, "args": argparse.Namespace(lr=0.1)}, foreign)
    line = _refusal(
        [
            "fit",
            "--config",
            APPO_CONFIG,
            f"--trainer.logger.init_args.save_dir={tmp_path}",
            f"--ckpt_path={foreign}",
        ]
    )
    assert line == (
        f"error: checkpoint {foreign} does not load weights-only (it holds "
        "argparse.Namespace), so it was not written by this trainer; pass another --ckpt_path"
    )


def test_staging_pool_over_the_memory_budget_is_refused_before_the_run_directory(
    tmp_path, marked_env
):
    env, mark = marked_env
    runs = tmp_path / "runs"
    result = run_cli(
        [
            "fit",
            "--config",
            "configs/appo.yaml",
            "--data.init_args.collector.num_envs=8192",
            "--data.init_args.num_steps=1024",
            "--data.init_args.staging_capacity=2000",
            f"--trainer.logger.init_args.save_dir={runs}",
        ],
        env,
        timeout=120,
    )
    assert result.returncode == 1
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("error: RAM needed") and "staging_pool" in line
    assert "data.init_args.staging_capacity" in line
    assert "Traceback" not in result.stderr
    assert not list(runs.glob("*/version_*")), "the run directory was created"
    assert_no_leftovers(result, mark)
