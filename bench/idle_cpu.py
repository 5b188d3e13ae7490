"""CPU a waiting process burns: the collector waiting on a slow learner, the learner on a slow collector.

On 2 cores every idle poller takes time from the learner or the physics; a wait should cost
nothing. The bench runs the off-policy lock step of a config (default ``configs/fast_td3.yaml``:
its task, ``num_envs``, batch; a ``CollectorProcess`` with the lock-step writer and this process
as the learner through a CPU ``DoubleBufferPipeline``) and measures, from ``/proc/<pid>/stat``
(user + system time, all threads), over ``--seconds``:

- collector waiting on a slow learner: the learner takes no batch; the collector has stepped and
  packed the released tick and waits for the next release (main thread) and the next pack
  request (pack thread);
- learner waiting on a slow collector: the collector is stopped with SIGSTOP (the slowest
  collector there is; stall and data timeouts are lifted past the window); this process waits in
  ``DoubleBufferPipeline.next`` (main thread, copier thread).

Printed: % of one core per waiting process. Run it against another checkout's library to compare
(``PYTHONPATH=/path/to/other/checkout``; the script only uses APIs both have):

    python bench/idle_cpu.py
    PYTHONPATH=/work/main python bench/idle_cpu.py --seconds 10
    python bench/idle_cpu.py --smoke    # 4 envs, 0.5 s windows (CI)
"""

from __future__ import annotations

# Only the standard library at module level: the collector is a spawn child that re-imports
# this script before its first line.
import argparse
import os
import signal
import tempfile
import threading
import time
from pathlib import Path

from smoke import parse_args

_TICKS = os.sysconf("SC_CLK_TCK")
# Settling time after a change of state, before the window opens.
_SETTLE_S = 1.0


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far, all its threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def core_share(pid: int, seconds: float) -> float:
    """Share of one core ``pid`` used over the next ``seconds`` (this thread sleeps meanwhile)."""
    before, began = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    return (cpu_seconds(pid) - before) / (time.monotonic() - began)


def measure(config: str, seconds: float, num_envs: int | None) -> dict[str, float]:
    from replay_pipeline import _cli, lockstep_collector

    args = argparse.Namespace(
        config=config, hidden=None, task=None, num_envs=num_envs, batch_size=None
    )
    lifted = seconds + 60.0
    with tempfile.TemporaryDirectory() as log_dir:
        cli = _cli(args, log_dir)
        with lockstep_collector(cli, stall_timeout_s=lifted, data_timeout_s=lifted) as (
            collector,
            pipeline,
        ):
            for _ in range(3):
                pipeline.next()
            time.sleep(_SETTLE_S)
            collector_waiting = core_share(collector.pid, seconds)
            pipeline.next()  # packed while we measured: returns at once, requests the next
            time.sleep(_SETTLE_S)
            os.kill(collector.pid, signal.SIGSTOP)
            waiter = threading.Thread(target=pipeline.next, name="learner-wait", daemon=True)
            try:
                waiter.start()
                time.sleep(_SETTLE_S)
                learner_waiting = core_share(os.getpid(), seconds)
            finally:
                os.kill(collector.pid, signal.SIGCONT)
            waiter.join()
    return {"collector": collector_waiting, "learner": learner_waiting}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/fast_td3.yaml")
    parser.add_argument("--seconds", type=float, default=10.0, help="measurement window")
    parser.add_argument("--num-envs", type=int, default=None, help="override the config's")
    args = parse_args(parser, seconds=0.5, num_envs=4)
    import unilab_lit

    shares = measure(args.config, args.seconds, args.num_envs)
    print(f"library: {Path(unilab_lit.__file__).parent}; {args.config}; {args.seconds:.0f} s")
    print(f"collector waiting on a slow learner: {100 * shares['collector']:5.2f} % of a core")
    print(f"learner waiting on a slow collector: {100 * shares['learner']:5.2f} % of a core")


if __name__ == "__main__":
    main()
