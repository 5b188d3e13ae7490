"""Every ``bench/*.py`` script's ``--smoke`` run (STYLE.md rule 17): the real code path at its
smallest sizes, as a subprocess, exits 0 and prints the line that names its result.

``bench/appo_vs_rsl_rl.py`` has its own test (``test_bench_appo_vs_rsl_rl.py``), which covers
``rsl_rl_mirror.py``; ``fit_timing.py`` is a module the fit benches import, covered by theirs.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

TIMEOUT_S = 280

# (script, extra arguments, a line's start or a phrase the summary prints, marks)
CASES = [
    ("batch_overhead", [], "round 0: APPO bookkeeping TensorDict", []),
    ("ipc", [], "ReplayStorage.gather (shared)", []),
    ("env_throughput", [], "CartpoleSwingup", []),
    ("quadruped_baseline", [], "  mean return", []),
    ("zero_action_standing", [], "  Unitree's leg gains: within 5 cm for", []),
    ("core_sharing", [], "copy: alone", []),
    ("compile_loss", [], "ratio compiled / eager", [pytest.mark.slow]),
    ("learner_speed", [], "fast_td3: updates/s eager-1-thread", []),
    ("pipeline", [], "ratio fit / alone:", []),
    ("tracing_overhead", [], "median traced/plain over 1 round(s): learner time", []),
    ("replay_pipeline", [], " x alone; ", []),
    ("idle_cpu", [], "learner waiting on a slow collector:", []),
    ("fit_threads", ["configs/fast_td3.yaml"], "configs/fast_td3.yaml fit eager-1", []),
    ("ddp_scaling", [], "ratio to ideal: env-steps/s", [pytest.mark.slow]),
    ("soak", [], "  env-steps/s", [pytest.mark.slow]),
]


def _smoke(script: str, args: list[str], cwd) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "bench" / f"{script}.py"), "--smoke", *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


@pytest.mark.parametrize(
    ("script", "args", "summary"),
    [pytest.param(s, a, m, marks=k, id=s) for s, a, m, k in CASES],
)
def test_bench_smoke_prints_its_summary(script, args, summary, tmp_path):
    if script == "core_sharing" and len(os.sched_getaffinity(0)) < 2:
        pytest.skip("core_sharing pins a loop and a neighbour to two cores; this runs on one")
    done = _smoke(script, args, REPO)

    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert summary in done.stdout, done.stdout[-3000:]


def test_returns_smoke_curve_plots(tmp_path):
    """``returns.py --smoke`` trains configs/appo.yaml to a small budget and reports its return;
    ``plot_curves.py`` (no sizes to shrink) draws that run."""
    log_dir = tmp_path / "run"
    done = _smoke("returns", ["configs/appo.yaml", f"--log-dir={log_dir}"], REPO)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "return at the end:" in done.stdout, done.stdout[-3000:]

    out = tmp_path / "curves.png"
    drawn = subprocess.run(
        [sys.executable, str(REPO / "bench" / "plot_curves.py"), str(log_dir), f"--out={out}"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert drawn.returncode == 0, drawn.stderr[-3000:]
    assert f"wrote {out}" in drawn.stdout
    assert out.stat().st_size > 0
