"""Soak: each pipeline's ``cli.py fit`` for a set wall-clock; memory, /dev/shm and throughput slopes.

For each pipeline (``configs/appo.yaml``, ``configs/fast_sac.yaml`` by default) the soak runs the
real ``cli.py fit`` as a subprocess with ``--trainer.max_time`` and a CSV logger, and every
``--interval-s`` samples:

- the resident set size (``VmRSS``) and its private part (``RssAnon``: a leak grows it, a
  filling replay buffer does not) of every process of the run: the learner, the collector and
  Python's resource tracker (found through ``/proc``, by parent pid);
- the bytes of the run's blocks in /dev/shm (``unilab_lit_<learner pid>_*``);
- the run's ``Train/env_steps`` and ``Policy/lag`` (APPO) from the CSV logger's file.

After the run it prints, per series, the first and last value and the least-squares slope over
the run minus its first ``--warmup-fraction`` (start-up allocations and the replay warm-up are
not leaks). Targets: zero memory growth (RSS and /dev/shm slopes ~0 MiB/min) and no throughput
decay (env-steps/s slope ~0, i.e. its change over the run within noise). The baseline of each
slope is the series' own level in the same run, printed next to it.

    python bench/soak.py                                  # 30 min per pipeline
    python bench/soak.py --minutes 3 --pipelines appo     # a short look
    python bench/soak.py --smoke                          # appo for 30 s (CI)
"""

from __future__ import annotations

# Only the standard library (and returns.py's config copy): the bench starts cli.py and reads
# /proc and files.
import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from returns import config_with_budget
from smoke import parse_args

REPO = Path(__file__).resolve().parents[1]
SHM_DIR = Path("/dev/shm")
MIB = 1024 * 1024
CONFIGS = {"appo": "configs/appo.yaml", "fast_sac": "configs/fast_sac.yaml"}
# Metric keys read from the CSV logger's file (unilab_lit.telemetry.metrics, spelled once here because
# the bench imports nothing of the package).
ENV_STEPS_KEY = "Train/env_steps"
POLICY_LAG_KEY = "Policy/lag"
# Series sampled once per sample time (the per-process memory series carry their own times).
_TIMED = ("t", "shm", "env_steps", "lag")
# Per-process memory series (``rss <role>``, ``anon <role>``) carry their own sample times.
_MEMORY_PREFIXES = ("rss ", "anon ")
RATE_WINDOW = 6  # samples per env-steps/s window (30 s at the default interval)


def _children(pid: int) -> list[int]:
    pids = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            pids += [int(p) for p in task.read_text().split()]
        except OSError:
            continue
    return pids


def _process_tree(root: int) -> list[int]:
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo += _children(pid)
    return tree


def _memory_bytes(pid: int) -> dict[str, int]:
    """``VmRSS`` and ``RssAnon`` of ``pid`` in bytes (empty once it is gone).

    ``VmRSS`` also counts the shared-memory pages the process has touched (``RssShmem``), which
    grow while a replay buffer fills and then stay; ``RssAnon`` is the private memory a leak
    would grow.
    """
    fields = {"VmRSS:": "rss", "RssAnon:": "anon"}
    found: dict[str, int] = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key = line.split(maxsplit=1)[0] if line else ""
            if key in fields:
                found[fields[key]] = int(line.split()[1]) * 1024
    except OSError:
        return {}
    return found


def _role(pid: int, root: int) -> str:
    if pid == root:
        return "learner"
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return f"pid {pid}"
    if "resource_tracker" in cmdline:
        return "resource_tracker"
    if "spawn_main" in cmdline:
        return "collector"
    return f"pid {pid}"


def _shm_bytes(root: int) -> int:
    total = 0
    for path in SHM_DIR.glob(f"unilab_lit_{root}_*"):
        try:
            total += path.stat().st_blocks * 512  # allocated, not apparent, size
        except OSError:
            continue
    return total


def _last_metrics(csv_root: Path) -> dict[str, float]:
    """The newest value of each metric in the CSV logger's metrics.csv (empty before a flush)."""
    files = sorted(csv_root.rglob("metrics.csv"))
    if not files:
        return {}
    latest: dict[str, float] = {}
    with open(files[-1], newline="") as f:
        for row in csv.DictReader(f):
            for key, value in row.items():
                if value not in ("", None):
                    latest[key] = float(value)
    return latest


def _slope_per_min(times: list[float], values: list[float]) -> float:
    """Least-squares slope of ``values`` over ``times`` (seconds), per minute."""
    n = len(times)
    if n < 2:
        return float("nan")
    mean_t, mean_v = sum(times) / n, sum(values) / n
    var_t = sum((t - mean_t) ** 2 for t in times)
    if var_t == 0:
        return float("nan")
    cov = sum((t - mean_t) * (v - mean_v) for t, v in zip(times, values, strict=True))
    return cov / var_t * 60.0


def soak(name: str, minutes: float, interval_s: float, extra: list[str]) -> dict[str, list]:
    """Run one pipeline for ``minutes`` and return its sampled series (time in seconds)."""
    log_dir = Path(tempfile.mkdtemp(prefix=f"soak_{name}_"))
    seconds = int(minutes * 60)
    max_time = f"00:{seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
    command = [
        sys.executable,
        "cli.py",
        "fit",
        "--config",
        # The clock ends the soak: the config's env-step budget is lifted, as max_steps is.
        config_with_budget(str(REPO / CONFIGS[name]), None, str(log_dir)),
        "--trainer.max_steps=-1",
        f"--trainer.max_time={max_time}",
        "--trainer.enable_progress_bar=false",
        "--trainer.logger=lightning.pytorch.loggers.CSVLogger",
        f"--trainer.logger.save_dir={log_dir}",
        "--trainer.logger.flush_logs_every_n_steps=10",
        *extra,
    ]
    series: dict[str, list] = {"t": [], "shm": [], "env_steps": [], "lag": []}
    with open(log_dir / "stderr", "w") as stderr:
        proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=stderr)
        began = time.monotonic()
        try:
            while proc.poll() is None:
                time.sleep(interval_s)
                now = time.monotonic() - began
                metrics = _last_metrics(log_dir)
                series["t"].append(now)
                series["shm"].append(_shm_bytes(proc.pid))
                series["env_steps"].append(metrics.get(ENV_STEPS_KEY, float("nan")))
                series["lag"].append(metrics.get(POLICY_LAG_KEY, float("nan")))
                for pid in _process_tree(proc.pid):
                    for kind, value in _memory_bytes(pid).items():
                        key = f"{kind} {_role(pid, proc.pid)}"
                        series.setdefault(key, []).append((now, value))
        finally:
            if proc.poll() is None:
                proc.terminate()
            proc.wait()
    series["returncode"] = [proc.returncode]
    series["log_dir"] = [str(log_dir)]
    (log_dir / "samples.json").write_text(json.dumps(series))
    return series


def _during_training(series: dict[str, list]) -> dict[str, list]:
    """The samples up to the last one with the run's blocks in /dev/shm: the samples taken while
    the run tore down (blocks unlinked, collector stopping) say nothing about steady state."""
    alive = [i for i, shm in enumerate(series["shm"]) if shm > 0]
    if not alive:
        return series
    end_t = series["t"][alive[-1]]
    kept = {key: values[: alive[-1] + 1] for key, values in series.items() if key in _TIMED}
    kept.update(
        {
            k: [(t, v) for t, v in vs if t <= end_t]
            for k, vs in series.items()
            if k.startswith(_MEMORY_PREFIXES)
        }
    )
    kept.update({k: v for k, v in series.items() if k not in kept})
    return kept


def _report(name: str, series: dict[str, list], warmup_fraction: float) -> None:
    series = _during_training(series)
    times = series["t"]
    if not times:
        print(
            f"{name}: no samples (exit code {series['returncode'][0]}, log {series['log_dir'][0]})"
        )
        return
    cutoff = times[-1] * warmup_fraction
    print(
        f"\n{name}: {times[-1] / 60:.1f} min, {len(times)} samples, exit code "
        f"{series['returncode'][0]}, logs in {series['log_dir'][0]}; slopes after the first "
        f"{cutoff / 60:.1f} min"
    )
    print(f"  {'series':<24}{'first':>14}{'last':>14}{'slope / min':>16}  target")

    def line(label: str, ts: list[float], vs: list[float], unit: float, fmt: str, target: str):
        kept = [(t, v) for t, v in zip(ts, vs, strict=True) if t >= cutoff and v == v]
        if len(kept) < 2:
            print(f"  {label:<24}{'(too few samples)':>44}")
            return
        slope = _slope_per_min([t for t, _ in kept], [v / unit for _, v in kept])
        first, last = kept[0][1] / unit, kept[-1][1] / unit
        print(f"  {label:<24}{first:>14{fmt}}{last:>14{fmt}}{slope:>16{fmt}}  {target}")

    for key in sorted(k for k in series if k.startswith(_MEMORY_PREFIXES)):
        ts, vs = zip(*series[key], strict=True)
        line(f"{key} MiB", list(ts), list(vs), MIB, ".1f", "0")
    line("/dev/shm MiB", times, series["shm"], MIB, ".1f", "0")
    # Rates over windows of RATE_WINDOW samples: the CSV logger flushes in bursts.
    rates_t, rates = [], []
    for i in range(RATE_WINDOW, len(times), RATE_WINDOW):
        steps, prev = series["env_steps"][i], series["env_steps"][i - RATE_WINDOW]
        if steps == steps and prev == prev and steps > prev:
            rates_t.append(times[i])
            rates.append((steps - prev) / (times[i] - times[i - RATE_WINDOW]))
    line("env-steps/s", rates_t, rates, 1.0, ".0f", ">= 0 (no decay)")
    line("policy lag", times, series["lag"], 1.0, ".2f", "~0")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="wall-clock per pipeline")
    parser.add_argument("--pipelines", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--interval-s", type=float, default=5.0, help="seconds between samples")
    parser.add_argument(
        "--warmup-fraction", type=float, default=0.2, help="leading share left out of slopes"
    )
    parser.add_argument("overrides", nargs="*", help="extra cli.py arguments for every run")
    args = parse_args(parser, minutes=0.5, pipelines=["appo"], interval_s=2.0)
    print(f"load: {os.getloadavg()}")
    for name in args.pipelines:
        series = soak(name, args.minutes, args.interval_s, args.overrides)
        _report(name, series, args.warmup_fraction)
    print(f"load: {os.getloadavg()}")


if __name__ == "__main__":
    main()
