"""Data-parallel training under Lightning's DDP: 2 ranks (gloo, CPU), each with its own collector.

Every test runs ``ddp_job.py`` as a real script (Lightning's launcher starts rank 1 by re-running
it) and compares what the ranks recorded.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.conftest import REPO, free_port, processes_with_mark
from tests.faults.test_fault_injection import STOP_S
from tests.test_resume import NUM_ENVS, NUM_STEPS
from unilab_lit.collector.process import HUNG_S
from unilab_lit.ipc import list_segments
from unilab_lit.telemetry import metrics

JOB = Path(__file__).with_name("ddp_job.py")
_JOB_PREFIXES = ("Train/", "Episode/", "Perf/", "Eval/")
N = 3


def _run(args: list[str], env: dict[str, str], timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(JOB), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _records(out_dir: Path) -> list[dict]:
    return [torch.load(out_dir / f"rank{r}.pt", weights_only=False) for r in (0, 1)]


def _fit(algo: str, out_dir: Path, env: dict[str, str], *extra: str) -> list[dict]:
    done = _run([algo, str(out_dir), *extra], env)
    assert done.returncode == 0, done.stderr[-4000:]
    return _records(out_dir)


def _identical(a: object, b: object) -> bool:
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_identical(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_identical(x, y) for x, y in zip(a, b, strict=True))
    return a == b


# Synchronous APPO: each rank learns one rollout per iteration, the job two.
JOB_ITERATION = 2 * NUM_ENVS * NUM_STEPS


@pytest.fixture(scope="module")
def appo_ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """A 2-rank APPO job that its env-step budget (the job's, N iterations' worth) stops."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    budget = ("--max-env-steps", str(N * JOB_ITERATION))
    return _fit("appo", tmp_path_factory.mktemp("appo"), env, "--steps", "100", *budget)


def test_appo_ranks_hold_identical_parameters_and_optimizer_states_after_iterations(appo_ranks):
    rank0, rank1 = appo_ranks
    assert rank0["global_step"] == rank1["global_step"] == N
    assert _identical(rank0["state"], rank1["state"])
    assert _identical(rank0["optimizers"], rank1["optimizers"])
    # The adaptive-KL rate moved (desired_kl is tiny) and moved identically: from the mean KL.
    assert rank0["optimizers"][0]["param_groups"][0]["lr"] != 1e-3


def test_ranks_collectors_produce_different_data(appo_ranks):
    rank0, rank1 = appo_ranks
    assert rank0["obs"].shape == rank1["obs"].shape
    assert not torch.equal(rank0["obs"], rank1["obs"])
    assert not torch.equal(rank0["obs"][0], rank1["obs"][0])  # even the first reset differs


def test_normalizer_equals_exact_statistics_of_both_ranks_data(appo_ranks):
    union = torch.cat([record["obs"] for record in appo_ranks]).to(torch.float64)
    var, mean = torch.var_mean(union, dim=0, correction=0)
    for record in appo_ranks:
        state = record["state"]
        assert float(state["obs_normalizer.count"]) == union.shape[0]
        # The buffers are float32: equal to the float64 statistics up to float32 rounding.
        torch.testing.assert_close(state["obs_normalizer.mean"], mean.float(), rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(state["obs_normalizer.var"], var.float(), rtol=1e-6, atol=1e-6)


def test_logged_env_steps_equals_sum_over_ranks(appo_ranks):
    rank0, rank1 = appo_ranks
    assert rank0["env_steps"] > 0 and rank1["env_steps"] > 0
    assert rank0["logged_env_steps"] == rank0["env_steps"] + rank1["env_steps"]
    assert rank1["logged_env_steps"] == rank0["logged_env_steps"]


def test_env_step_budget_counts_every_ranks_env_steps_and_stops_all_ranks_together(appo_ranks):
    rank0, rank1 = appo_ranks
    assert rank0["global_step"] == rank1["global_step"] == N  # of --steps 100
    assert rank0["env_steps"] + rank1["env_steps"] == N * JOB_ITERATION


EVALUATED_STEPS = 20  # enough for a metrics report of rank 0's collector (one a second)


@pytest.fixture(scope="module")
def evaluated_options_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    """A 2-rank job of APPO with its options (PopArt, linear rate, obs clip) and an evaluator."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = tmp_path_factory.mktemp("evaluated_options")
    steps = ("--steps", str(EVALUATED_STEPS))
    return out, _fit("appo_options", out, env, *steps, "--evaluate")


def test_evaluator_with_clips_and_monitored_checkpoints_run_on_two_ranks_logging_the_same(
    evaluated_options_run: tuple[Path, list[dict]],
):
    out, (rank0, rank1) = evaluated_options_run
    assert rank0["global_step"] == rank1["global_step"] == EVALUATED_STEPS
    # Every logged value is the job's: the callbacks' figures, the evaluation, the learner's terms.
    logged = rank0["callback_metrics"]
    assert rank1["callback_metrics"] == logged
    assert {k.split("/")[0] + "/" for k in logged} >= {*_JOB_PREFIXES, "Loss/", "Policy/"}
    # Rank 1 finished no episode of its own, yet monitors the job's mean reward as rank 0 does.
    assert metrics.MEAN_REWARD in logged and metrics.EVAL_MEAN_REWARD in logged
    for key in (metrics.EVAL_MEAN_REWARD, metrics.MEAN_REWARD, metrics.LOSS_VALUE):
        assert list((out / "best" / key.replace("/", "_")).glob("*.ckpt"))
    (events,) = (out / "tb").rglob("events.out.tfevents.*")
    assert metrics.EVAL_VIDEO.encode() in events.read_bytes()  # the clip, written by rank 0


def test_appo_options_keep_ranks_identical_with_value_statistics_of_every_rank(
    evaluated_options_run: tuple[Path, list[dict]],
):
    _, (rank0, rank1) = evaluated_options_run
    assert _identical(rank0["state"], rank1["state"])
    assert _identical(rank0["optimizers"], rank1["optimizers"])
    state = rank0["state"]
    # Every rank's fresh targets, once each: as many as the observations the normaliser took.
    assert float(state["value_normalizer.stats.count"]) == float(state["obs_normalizer.count"]) > 0
    # The linear rate reached min_learning_rate (1e-5, APPO's default) at max_steps on both.
    assert rank0["optimizers"][0]["param_groups"][0]["lr"] == pytest.approx(1e-5)


@pytest.mark.parametrize(
    ("algo", "optimizers"),
    [("fast_sac", 3), pytest.param("fast_td3", 2, marks=pytest.mark.slow)],
)
def test_off_policy_ranks_hold_identical_parameters_and_optimizer_states_after_iterations(
    algo, optimizers, tmp_path: Path
):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    rank0, rank1 = _fit(algo, tmp_path, env, "--steps", str(N))
    assert rank0["global_step"] == rank1["global_step"] == N
    assert _identical(rank0["state"], rank1["state"])
    assert _identical(rank0["optimizers"], rank1["optimizers"])
    # Critic and actor (and FastSAC's temperature) all stepped in sync.
    assert len(rank0["optimizers"]) == optimizers
    assert all(opt["state"] for opt in rank0["optimizers"])
    assert not torch.equal(rank0["obs"], rank1["obs"])


@pytest.mark.slow
@pytest.mark.parametrize(("algo", "extra"), [("appo", ()), ("fast_td3", ("--save-replay",))])
def test_resumed_ddp_run_continues_exactly_in_synchronous_mode(
    algo, extra, tmp_path: Path, marked_env
):
    env, _ = marked_env
    steps = ("--steps", str(2 * N), *extra)
    straight = _fit(algo, tmp_path / "straight", env, *steps, "--checkpoint-every", str(N))
    checkpoint = tmp_path / "straight" / "checkpoints" / f"epoch=0-step={N}.ckpt"
    # Off-policy: each rank's replay comes back from its own sidecar.
    resumed = _fit(algo, tmp_path / "resumed", env, *steps, "--ckpt", str(checkpoint))
    for whole, continued in zip(straight, resumed, strict=True):
        assert continued["global_step"] == 2 * N
        assert continued["env_steps"] == whole["env_steps"]
        assert _identical(continued["state"], whole["state"])
        assert _identical(continued["optimizers"], whole["optimizers"])

    one_rank = _run(
        [algo, str(tmp_path / "one"), "--devices", "1", "--ckpt", str(checkpoint), *extra], env
    )
    assert one_rank.returncode != 0
    assert "world size 2, this job has world size 1" in one_rank.stderr


def _assert_job_left_nothing(pids: list[dict], mark: str) -> None:
    """No process of the job is alive and no rank left a segment in /dev/shm."""
    deadline = time.monotonic() + 10
    while processes_with_mark(mark) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_with_mark(mark) == [], "processes of the job outlived it"
    for rank in pids:
        assert list_segments(rank["rank"]) == [], "shared memory left in /dev/shm"


def test_sigkilled_collector_on_rank1_ends_the_job_with_its_error_and_leaves_nothing(
    tmp_path: Path, marked_env
):
    env, mark = marked_env
    done = _run(["appo", str(tmp_path), "--steps", "100000", "--kill-collector-rank", "1"], env)
    ended_at = time.time()
    killed_at = float((tmp_path / "killed_at").read_text())
    pids = [torch.load(tmp_path / f"pids{r}.pt") for r in (0, 1)]
    assert done.returncode != 0
    assert ended_at - killed_at < 30, "the job outlived its dead collector"
    assert f"collector (pid {pids[1]['collector']})" in done.stderr
    assert "CollectorError" in done.stderr
    _assert_job_left_nothing(pids, mark)


# Slow, to keep CI's default run within its 30 minutes on 2 cores: SIGINT and SIGTERM take the
# same stop path (unilab_lit.callbacks.InterruptGuard; only the exit status differs), which SIGTERM
# to the job's process group (tests/journeys/test_ddp.py) and to one rank (below) run by default.
@pytest.mark.slow
def test_sigint_stops_every_rank_after_the_same_iteration_and_leaves_nothing(
    tmp_path: Path, marked_env
):
    env, mark = marked_env
    command = [sys.executable, str(JOB), "appo", str(tmp_path), "--steps", "100000"]
    command += ["--checkpoint-every", "100000"]
    with subprocess.Popen(
        command,
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: the SIGINT a terminal's Ctrl-C sends
    ) as proc:
        deadline = time.monotonic() + 180
        while not all((tmp_path / f"trained{r}").exists() for r in (0, 1)):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGINT)
        _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr[-4000:]
    rank0, rank1 = _records(tmp_path)
    assert rank0["global_step"] == rank1["global_step"] >= 1
    assert _identical(rank0["state"], rank1["state"])
    assert (tmp_path / "checkpoints" / "last.ckpt").exists()
    pids = [torch.load(tmp_path / f"pids{r}.pt") for r in (0, 1)]
    _assert_job_left_nothing(pids, mark)


def test_sigterm_to_one_rank_stops_every_rank_with_a_checkpoint_of_both_that_resumes(
    tmp_path: Path, marked_env
):
    env, mark = marked_env
    stopped = tmp_path / "stopped"
    command = [sys.executable, str(JOB), "appo", str(stopped), "--steps", "100000"]
    command += ["--checkpoint-every", "100000"]
    with subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        deadline = time.monotonic() + 180
        while not all((stopped / f"trained{r}").exists() for r in (0, 1)):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            time.sleep(0.2)
        # Rank 1 alone, as a node's scheduler might: rank 0 learns of it only by agreement.
        os.kill(torch.load(stopped / "pids1.pt")["rank"], signal.SIGTERM)
        _, stderr = proc.communicate(timeout=10)
    assert proc.returncode == 143, stderr[-4000:]
    rank0, rank1 = _records(stopped)
    assert rank0["global_step"] == rank1["global_step"] >= 1
    assert _identical(rank0["state"], rank1["state"])
    last = torch.load(stopped / "checkpoints" / "last.ckpt", weights_only=False)
    assert last["global_step"] == rank0["global_step"]
    states = last["rank_states"]["states"]
    assert [s["callbacks"]["Recorder"] for s in states] == [{"rank": 0}, {"rank": 1}]
    _assert_job_left_nothing([torch.load(stopped / f"pids{r}.pt") for r in (0, 1)], mark)

    resumed = tmp_path / "resumed"
    steps = str(rank0["global_step"] + 1)
    ranks = _fit(
        "appo", resumed, env, "--steps", steps, "--ckpt", str(stopped / "checkpoints" / "last.ckpt")
    )
    for rank, (before, after) in enumerate(zip((rank0, rank1), ranks, strict=True)):
        assert after["start"] == (before["global_step"], before["env_steps"])
        assert after["restored_rank"] == rank


@pytest.mark.slow
def test_sigterm_to_a_rank_with_data_ends_the_wait_of_a_rank_on_a_hung_collector(
    tmp_path: Path, marked_env
):
    env, mark = marked_env
    command = [sys.executable, str(JOB), "appo", str(tmp_path), "--steps", "100000"]
    command += ["--checkpoint-every", "100000", "--stop-collector-rank", "1"]
    with subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        deadline = time.monotonic() + 180
        while not (tmp_path / "hung").exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            time.sleep(0.2)
        time.sleep(HUNG_S + 1)  # rank 0 has its rollout; rank 1 waits on its stopped collector
        # Rank 0 alone: rank 1 learns of the stop only through the agreement on its wait.
        os.kill(torch.load(tmp_path / "pids0.pt")["rank"], signal.SIGTERM)
        _, stderr = proc.communicate(timeout=STOP_S)
    assert proc.returncode == 143, stderr[-4000:]
    rank0, rank1 = _records(tmp_path)
    assert rank0["global_step"] == rank1["global_step"] == 2
    last = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=False)
    assert last["global_step"] == 2
    states = last["rank_states"]["states"]
    assert [s["callbacks"]["Recorder"] for s in states] == [{"rank": 0}, {"rank": 1}]
    # Rank 1's hung collector is left out of it, rank 0's is in.
    collectors = [s["RolloutDataModule"]["collector"] for s in states]
    assert collectors[0] is not None and collectors[1] is None
    _assert_job_left_nothing([torch.load(tmp_path / f"pids{r}.pt") for r in (0, 1)], mark)


@pytest.mark.slow
def test_two_torchrun_nodes_train_in_their_own_shared_memory_and_a_sigterm_to_one_stops_both(
    tmp_path: Path, marked_env
):
    env, mark = marked_env
    endpoint = f"localhost:{free_port()}"
    launchers = []
    for node in (0, 1):
        command = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2"]
        command += [f"--node_rank={node}", "--nproc_per_node=1", "--rdzv_backend=c10d"]
        command += [f"--rdzv_endpoint={endpoint}", str(JOB), "appo", str(tmp_path)]
        command += ["--devices", "1", "--num-nodes", "2", "--steps", "100000"]
        command += ["--checkpoint-every", "100000"]
        log = open(tmp_path / f"node{node}.log", "w")  # noqa: SIM115 - closed when the test ends
        launchers.append(
            subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        )
    try:
        deadline = time.monotonic() + 180
        while not all((tmp_path / f"trained{r}").exists() for r in (0, 1)):
            for node, launcher in enumerate(launchers):
                assert launcher.poll() is None, (tmp_path / f"node{node}.log").read_text()[-4000:]
            assert time.monotonic() < deadline, "the two nodes did not train"
            time.sleep(0.2)
        pids = [torch.load(tmp_path / f"pids{r}.pt") for r in (0, 1)]
        # Each node's rank and collector use blocks named by that rank's own pid: none shared.
        segments = [set(list_segments(rank["rank"])) for rank in pids]
        assert segments[0] and segments[1] and not segments[0] & segments[1]
        # One node's rank only, as that node's scheduler would: the other stops by agreement.
        os.kill(pids[1]["rank"], signal.SIGTERM)
        for launcher in launchers:
            launcher.wait(timeout=60)
    finally:
        for launcher in launchers:
            if launcher.poll() is None:
                launcher.kill()
                launcher.wait()
    for node in (0, 1):
        assert "exitcode  : 143" in (tmp_path / f"node{node}.log").read_text()
    rank0, rank1 = _records(tmp_path)
    assert rank0["global_step"] == rank1["global_step"] >= 1
    assert _identical(rank0["state"], rank1["state"])
    last = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=False)
    assert last["global_step"] == rank0["global_step"]
    assert [s["callbacks"]["Recorder"] for s in last["rank_states"]["states"]] == [
        {"rank": 0},
        {"rank": 1},
    ]
    _assert_job_left_nothing(pids, mark)
