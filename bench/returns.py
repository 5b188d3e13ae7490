"""Return against wall-clock and env steps of one shipped config, read back from its TensorBoard events.

Runs ``python cli.py fit --config CONFIG`` as a subprocess for a wall-clock budget
(``--trainer.max_time``; ``max_steps`` lifted so the budget is what stops it), with its
TensorBoard logger pointed at a fresh directory, then reads the run's event file with
tensorboard's ``EventAccumulator`` and prints:

- the curve: every logged ``Train/mean_reward`` (mean return of the collector's recent
  episodes) with the seconds since launch and ``Train/env_steps`` at that step;
- the return at each ``--marks`` time (the last value logged at or before it; "not reached" when
  the run ended earlier);
- env-steps/s over the whole run (last env-step count over its time since launch);
- with ``--tags``, each chosen scalar (e.g. ``Episode/tracking_error_lin_vel``) at each mark.

The clock starts when the subprocess is launched, so interpreter, Lightning and collector
start-up are part of every figure, as they are for a user. Record ``uptime`` next to the
figures: on a shared machine they move with the load (the bench prints the load average at
start and end).

    python bench/returns.py configs/fast_sac.yaml --seconds 300
    python bench/returns.py configs/fast_td3.yaml --seconds 600 --marks 120 300 600
    python bench/returns.py configs/fast_td3.yaml --seconds 300 -- --model.init_args.tau=0.05
    python bench/returns.py configs/appo_quadruped_2core.yaml --seconds 900 --marks 120 300 600 900 \
        --tags Train/mean_episode_length Episode/tracking_error_lin_vel
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RETURN_KEY = "Train/mean_reward"
ENV_STEPS_KEY = "Train/env_steps"


def _max_time(seconds: float) -> str:
    # Lightning's "DD:HH:MM:SS" form.
    s = int(seconds)
    return f"00:{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"


def run_fit(config: str, seconds: float, log_dir: str, extra: list[str]) -> float:
    """Run the fit; returns the launch time (epoch seconds), the origin of every figure."""
    cmd = [
        sys.executable,
        "cli.py",
        "fit",
        "--config",
        config,
        f"--trainer.logger.init_args.save_dir={log_dir}",
        f"--trainer.max_time={_max_time(seconds)}",
        "--trainer.max_steps=-1",
        "--trainer.enable_progress_bar=false",
        *extra,
    ]
    print("command:", " ".join(cmd[1:]), flush=True)
    start = time.time()
    subprocess.run(cmd, check=True)
    return start


def read_curve(log_dir: str, tag: str = RETURN_KEY) -> list[tuple[float, int, float]]:
    """``(wall_time, env_steps, value)`` for every logged ``tag`` of the run under ``log_dir``.

    ``env_steps`` is ``Train/env_steps`` at the latest step at or before the value's (-1 if none).

    Raises:
        FileNotFoundError: If the run wrote no event file.
        KeyError: If the run never logged ``tag``.
    """
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    files = sorted(Path(log_dir).rglob("events.out.tfevents*"))
    if not files:
        raise FileNotFoundError(f"no TensorBoard event file under {log_dir}")
    acc = EventAccumulator(str(files[-1].parent), size_guidance={"scalars": 0})
    acc.Reload()
    tags = acc.Tags()["scalars"]
    if tag not in tags:
        raise KeyError(f"{tag!r} was never logged; the run logged {sorted(tags)}")
    steps = [(e.step, e.value) for e in acc.Scalars(ENV_STEPS_KEY)] if ENV_STEPS_KEY in tags else []

    def env_steps_at(step: int) -> int:
        # Eval/* values land on steps between the loggers' regular writes.
        before = [value for s, value in steps if s <= step]
        return int(before[-1]) if before else -1

    return [(e.wall_time, env_steps_at(e.step), e.value) for e in acc.Scalars(tag)]


def report(curve: list[tuple[float, int, float]], start: float, marks: list[float]) -> None:
    """Print the curve, the return at each mark and the env-steps/s."""
    print(f"{'s':>7} {'env_steps':>10} {'return':>9}")
    for wall, env_steps, ret in curve:
        print(f"{wall - start:7.0f} {env_steps:10d} {ret:9.1f}")
    print("return at marks:")
    report_marks(curve, start, marks)
    wall, env_steps, _ = curve[-1]
    print(f"env-steps/s over the run: {env_steps / (wall - start):.0f}")


def report_marks(
    curve: list[tuple[float, int, float]],
    start: float,
    marks: list[float],
    end: float | None = None,
) -> None:
    """Print the last value logged at or before each mark (seconds since ``start``).

    A mark more than 30 s past ``end`` (the run's last log; default: the curve's last value) was
    not reached. Pass the return curve's end for a sparse tag (e.g. ``Eval/*``).
    """
    end = curve[-1][0] if end is None else end
    for mark in marks:
        before = [(w, e, r) for w, e, r in curve if w - start <= mark]
        if end - start < mark - 30.0:
            print(f"  {mark:5.0f} s: not reached (run ended at {end - start:.0f} s)")
            continue
        if not before:
            print(f"  {mark:5.0f} s: nothing logged yet")
            continue
        wall, env_steps, ret = before[-1]
        print(
            f"  {mark:5.0f} s: {ret:8.3f}  (logged at {wall - start:.0f} s, {env_steps} env steps)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config")
    parser.add_argument("--seconds", type=float, default=300.0, help="wall-clock budget of fit")
    parser.add_argument(
        "--marks", type=float, nargs="+", default=[120.0, 300.0, 600.0], help="report times (s)"
    )
    parser.add_argument("--log-dir", default=None, help="event directory (default: a temp dir)")
    parser.add_argument(
        "--tags",
        nargs="+",
        default=[],
        help="more scalars to print at the marks (TensorBoard tags)",
    )
    argv = sys.argv[1:]
    # Everything after "--" goes to cli.py fit unchanged (its options look like ours).
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    args = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    log_dir = args.log_dir or tempfile.mkdtemp(prefix="returns-")
    print("load average at start:", " ".join(f"{x:.2f}" for x in os.getloadavg()))
    start = run_fit(args.config, args.seconds, log_dir, extra)
    print("load average at end:", " ".join(f"{x:.2f}" for x in os.getloadavg()))
    print("events:", log_dir)
    curve = read_curve(log_dir)
    report(curve, start, args.marks)
    for tag in args.tags:
        print(f"{tag} at marks:")
        report_marks(read_curve(log_dir, tag), start, args.marks, end=curve[-1][0])


if __name__ == "__main__":
    main()
