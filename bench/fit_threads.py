"""Who runs where in a fit: per-thread CPU, run-queue wait and context switches of learner and collector.

Runs ``bench/learner_speed.py``'s fit-level figure of one config and one setting (a child
process: ``Trainer.fit`` with its collector, ``--fit-seconds`` after the first iteration) and,
``--sample-at`` seconds after the launch, reads ``/proc/<pid>/task/<tid>/schedstat`` and
``status`` of every thread of the learner and its children twice, ``--sample-s`` apart. Printed
per thread that ran or waited: its share of a core on CPU, its share waiting in the run queue
(runnable, another thread on its core), voluntary and involuntary context switches, the core it
was last on; then the fit's learner iterations/s.

``--place`` puts the processes on cores:

- ``free``: as the kernel schedules them;
- ``apart``: the learner (all its threads) on core 0 (``taskset``), the collector (all its
  threads, moved as they appear) on core 1;
- ``collector``: only the collector on core 1, the learner free.

``--collector-priority`` lowers the collector's threads (as they appear): ``nice`` (nice 19) or
``idle`` (``SCHED_IDLE``: runs only on a core nothing else wants).

    python bench/fit_threads.py configs/fast_td3.yaml --setting eager-1
    python bench/fit_threads.py configs/fast_td3.yaml --setting eager-2 --place collector
    python bench/fit_threads.py configs/fast_td3.yaml --setting eager-2 --collector-priority idle
    python bench/fit_threads.py configs/fast_td3.yaml --smoke       # a 3 s fit, a 1 s sample (CI)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from smoke import parse_args

# Collector threads are moved to their core while the fit starts; after this the set is fixed.
_PLACE_FOR_S = 60.0
_POLL_S = 0.1


def children(pid: int) -> list[int]:
    """Every descendant process of ``pid``."""
    found, todo = [], [pid]
    while todo:
        for task in Path(f"/proc/{todo.pop()}/task").glob("*"):
            try:
                kids = [int(kid) for kid in (task / "children").read_text().split()]
            except OSError:
                continue
            found += kids
            todo += kids
    return found


def thread_stats(pid: int) -> dict[int, dict]:
    """Per thread of ``pid``: name, ns on CPU and waiting to run, context switches, last core."""
    stats = {}
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            stat = (task / "stat").read_text()
            run_ns, wait_ns, _ = map(int, (task / "schedstat").read_text().split())
            status = dict(
                line.split(":\t", 1)
                for line in (task / "status").read_text().splitlines()
                if ":\t" in line
            )
        except OSError:
            continue
        stats[int(task.name)] = {
            "name": stat[stat.index("(") + 1 : stat.rindex(")")],
            "core": int(stat[stat.rindex(")") + 2 :].split()[36]),
            "run": run_ns,
            "wait": wait_ns,
            "voluntary": int(status["voluntary_ctxt_switches"]),
            "involuntary": int(status["nonvoluntary_ctxt_switches"]),
        }
    return stats


def place(tid: int, core: int | None, priority: str) -> None:
    """Move thread ``tid`` to ``core`` (``None``: leave it) at ``priority``."""
    if core is not None:
        os.sched_setaffinity(tid, {core})
    if priority == "nice":
        os.setpriority(os.PRIO_PROCESS, tid, 19)
    elif priority == "idle":
        os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))


def report(before: dict[int, dict], seconds: float) -> None:
    """Print each process's threads that ran or waited since ``before`` (pid -> thread_stats)."""
    for pid, threads in before.items():
        now = thread_stats(pid)
        try:
            command = Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")[:50]
        except OSError:
            continue
        total = 0.0
        print(f"pid {pid} ({command})")
        for tid, late in sorted(now.items()):
            early = threads.get(tid)
            if early is None:
                continue
            run = (late["run"] - early["run"]) / 1e9 / seconds
            wait = (late["wait"] - early["wait"]) / 1e9 / seconds
            total += run
            if max(run, wait) >= 0.002:
                print(
                    f"  {tid:7d} {late['name']:15s} on CPU {100 * run:5.1f} %, run queue "
                    f"{100 * wait:5.1f} %, switches {late['voluntary'] - early['voluntary']:6d} "
                    f"voluntary / {late['involuntary'] - early['involuntary']:5d} involuntary, "
                    f"core {late['core']}"
                )
        print(f"  all {len(now)} threads: {100 * total:.1f} % of a core")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config")
    parser.add_argument("--setting", default="eager-1", help="learner_speed.py's setting name")
    parser.add_argument("--fit-seconds", type=float, default=30.0)
    parser.add_argument("--sample-at", type=float, default=15.0, help="seconds after launch")
    parser.add_argument("--sample-s", type=float, default=10.0)
    parser.add_argument("--place", choices=("free", "apart", "collector"), default="free")
    parser.add_argument(
        "--collector-priority", choices=("normal", "nice", "idle"), default="normal"
    )
    args = parse_args(parser, fit_seconds=3.0, sample_at=2.0, sample_s=1.0)
    command = [sys.executable, str(Path(__file__).with_name("learner_speed.py"))]
    command += ["--configs", args.config, "--settings", "--fit-seconds", str(args.fit_seconds)]
    command += ["--fit-settings", args.setting]
    if args.place == "apart":
        command = ["taskset", "-c", "0", *command]
    fit = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(fit.stdout), daemon=True)
    reader.start()
    began, placed, before, sampled = time.monotonic(), set(), None, 0.0
    while fit.poll() is None:
        elapsed = time.monotonic() - began
        core = None if args.place == "free" else 1
        if (core, args.collector_priority) != (None, "normal") and elapsed < _PLACE_FOR_S:
            for pid in children(fit.pid):
                for tid in set(thread_stats(pid)) - placed:
                    try:
                        place(tid, core, args.collector_priority)
                    except ProcessLookupError:  # a thread that ended meanwhile
                        continue
                    placed.add(tid)
        if before is None and elapsed >= args.sample_at:
            before = {pid: thread_stats(pid) for pid in [fit.pid, *children(fit.pid)]}
            sampled = time.monotonic()
        elif before is not None and sampled and time.monotonic() - sampled >= args.sample_s:
            print(
                f"{args.config} {args.setting}, place {args.place}, collector priority "
                f"{args.collector_priority}, load {os.getloadavg()}:"
            )
            report(before, time.monotonic() - sampled)
            sampled = 0.0
        time.sleep(_POLL_S)
    reader.join()
    print("".join(line for line in lines if " fit " in line or "Error" in line), end="")
    if fit.returncode:
        print("".join(lines[-30:]))
        sys.exit(fit.returncode)


if __name__ == "__main__":
    main()
