"""Return against wall-clock and env steps of one shipped config, read back from its TensorBoard events.

Runs ``python cli.py fit --config CONFIG`` as a subprocess with its TensorBoard logger pointed at
a fresh directory, then reads the run's event file with tensorboard's ``EventAccumulator``.
The run ends at the config's env-step budget (``unilab_lit.callbacks.EnvStepBudget``), or at the one
given by ``--env-steps``; ``--seconds`` adds a wall-clock limit (``--trainer.max_time``) and,
without ``--env-steps``, lifts the config's budget, so the clock is what stops the run.
``max_steps``, a safety cap in the configs, is lifted either way. It prints:

- the curve: every logged ``Train/mean_reward`` (mean return of the collector's recent
  episodes) with the seconds since launch and ``Train/learned_env_steps`` (the env steps the
  learner trained on, the budget's count) at that step;
- the return at each ``--marks`` time and at each ``--step-marks`` env-step count (the last
  value logged at or before it; "not reached" when the run ended earlier);
- the return at the end of the run, with its env steps and seconds;
- env-steps/s over the whole run (last env-step count over its time since launch);
- with ``--tags``, each chosen scalar (e.g. ``Episode/tracking_error_lin_vel``) at each mark;
- with ``--seeds 0 1 2``, one fit per seed (``seed_everything`` and the collector's seed) in
  ``<log-dir>/seed_<S>``, and instead of the curves the median, minimum and maximum over the
  seeds of the return and of each ``--tags`` scalar at each mark and at the end (the same
  aggregation as ``python -m unilab_lit.app.seeds``).

``--log-dir DIR`` keeps the whole run there, its checkpoints included, so that the trained
policy can be filmed afterwards (``python -m unilab_lit.app.play --ckpt_path last --run_dir DIR
--gif out.gif``; docs/play.md).

The clock starts when the subprocess is launched, so interpreter, Lightning and collector
start-up are part of every figure, as they are for a user. Record ``uptime`` next to the
figures: on a shared machine they move with the load (the bench prints the load average at
start and end). Figures at env-step marks move less: the data behind them is fixed, only the
learner iterations per env step change with the load (for APPO; the off-policy pipeline is
lock-step, so there they do not move at all).

    python bench/returns.py configs/appo_ant.yaml --step-marks 250000 500000 1000000
    python bench/returns.py configs/fast_sac.yaml --seconds 300
    python bench/returns.py configs/appo.yaml --smoke        # a 70k env-step budget (CI)
    python bench/returns.py configs/fast_td3.yaml --env-steps 700000 --marks 120 300
    python bench/returns.py configs/fast_td3.yaml --seconds 300 -- --model.init_args.tau=0.05
    python bench/returns.py configs/appo_quadruped_2core.yaml --marks 120 300 600 900 \
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

from smoke import parse_args

from unilab_lit.app.seeds import read_scalars, spread

RETURN_KEY = "Train/mean_reward"
ENV_STEPS_KEY = "Train/learned_env_steps"
BUDGET_CLASS = "unilab_lit.callbacks.EnvStepBudget"
# --smoke: a budget just past the first whole episodes of configs/appo.yaml (64 CartpoleSwingup
# envs of 1000 steps), so that the run logs a return.
SMOKE_ENV_STEPS = 70_000


def _max_time(seconds: float) -> str:
    # Lightning's "DD:HH:MM:SS" form.
    s = int(seconds)
    return f"00:{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"


def config_with_budget(config: str, env_steps: int | None, out_dir: str) -> str:
    """A copy of ``config`` in ``out_dir`` whose env-step budget is ``env_steps`` (none if None).

    The budget goes first in the callback list, so that the stopping iteration's counters are
    logged (``unilab_lit.callbacks.EnvStepBudget``'s docstring).
    """
    import yaml

    data = yaml.safe_load(Path(config).read_text())
    trainer = data.setdefault("trainer", {})
    callbacks = [c for c in trainer.get("callbacks") or [] if c.get("class_path") != BUDGET_CLASS]
    if env_steps is not None:
        callbacks.insert(0, {"class_path": BUDGET_CLASS, "init_args": {"max_env_steps": env_steps}})
    trainer["callbacks"] = callbacks
    path = Path(out_dir) / f"budget-{Path(config).name}"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def run_fit(config: str, seconds: float | None, log_dir: str, extra: list[str]) -> float:
    """Run the fit; returns the launch time (epoch seconds), the origin of every figure."""
    limit = [] if seconds is None else [f"--trainer.max_time={_max_time(seconds)}"]
    cmd = [
        sys.executable,
        "cli.py",
        "fit",
        "--config",
        config,
        f"--trainer.logger.init_args.save_dir={log_dir}",
        *limit,
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

    ``env_steps`` is ``Train/learned_env_steps`` at the latest step at or before the value's (-1
    if none).

    Raises:
        FileNotFoundError: If the run wrote no event file.
        KeyError: If the run never logged ``tag``.
    """
    values = read_scalars(log_dir, tag)
    try:
        steps = [(step, value) for _, step, value in read_scalars(log_dir, ENV_STEPS_KEY)]
    except KeyError:
        steps = []

    def env_steps_at(step: int) -> int:
        # Eval/* values land on steps between the loggers' regular writes.
        before = [value for s, value in steps if s <= step]
        return int(before[-1]) if before else -1

    return [(wall, env_steps_at(step), value) for wall, step, value in values]


def report(
    curve: list[tuple[float, int, float]],
    start: float,
    marks: list[float],
    step_marks: list[int],
) -> None:
    """Print the curve, the return at each mark and at the end, and the env-steps/s."""
    print(f"{'s':>7} {'env_steps':>10} {'return':>9}")
    for wall, env_steps, ret in curve:
        print(f"{wall - start:7.0f} {env_steps:10d} {ret:9.1f}")
    print("return at marks:")
    report_marks(curve, start, marks, step_marks)
    wall, env_steps, ret = curve[-1]
    print(f"return at the end: {ret:.3f}  ({wall - start:.0f} s, {env_steps} env steps)")
    print(f"env-steps/s over the run: {env_steps / (wall - start):.0f}")


def report_marks(
    curve: list[tuple[float, int, float]],
    start: float,
    marks: list[float],
    step_marks: list[int],
    end: tuple[float, int] | None = None,
) -> None:
    """Print the last value logged at or before each time mark (seconds since ``start``) and
    each env-step mark.

    A time mark more than 30 s past the run's end, or an env-step mark past its last env-step
    count, was not reached. ``end`` is the run's last ``(wall_time, env_steps)`` (default: the
    curve's last point); pass the return curve's for a sparse tag (e.g. ``Eval/*``).
    """
    end_wall, end_steps = curve[-1][:2] if end is None else end
    for mark in marks:
        if end_wall - start < mark - 30.0:
            print(f"  {mark:9.0f} s: not reached (run ended at {end_wall - start:.0f} s)")
        else:
            _print_last(mark, "s", [p for p in curve if p[0] - start <= mark], start)
    for step_mark in step_marks:
        if end_steps < step_mark:
            print(f"  {step_mark:9d} env steps: not reached (run ended at {end_steps})")
        else:
            _print_last(step_mark, "env steps", [p for p in curve if p[1] <= step_mark], start)


def _print_last(
    mark: float, unit: str, before: list[tuple[float, int, float]], start: float
) -> None:
    if not before:
        print(f"  {mark:9.0f} {unit}: nothing logged yet")
        return
    wall, env_steps, value = before[-1]
    print(
        f"  {mark:9.0f} {unit}: {value:8.3f}  (logged at {wall - start:.0f} s, "
        f"{env_steps} env steps)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config")
    parser.add_argument(
        "--env-steps",
        type=int,
        default=None,
        help="env-step budget of fit (default: the config's)",
    )
    parser.add_argument(
        "--seconds",
        type=float,
        default=None,
        help="wall-clock limit of fit; lifts the config's env-step budget unless --env-steps",
    )
    parser.add_argument(
        "--marks", type=float, nargs="+", default=[], help="report times (s since launch)"
    )
    parser.add_argument(
        "--step-marks", type=int, nargs="+", default=[], help="report env-step counts"
    )
    parser.add_argument("--log-dir", default=None, help="event directory (default: a temp dir)")
    parser.add_argument(
        "--tags",
        nargs="+",
        default=[],
        help="more scalars to print at the marks (TensorBoard tags)",
    )
    parser.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=None,
        help="one fit per seed (seed_everything and the collector's seed); prints the median, "
        "min and max over the seeds at each mark",
    )
    argv = sys.argv[1:]
    # Everything after "--" goes to cli.py fit unchanged (its options look like ours).
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    args = parse_args(
        parser, argv[: argv.index("--")] if "--" in argv else argv, env_steps=SMOKE_ENV_STEPS
    )
    log_dir = args.log_dir or tempfile.mkdtemp(prefix="returns-")
    Path(log_dir).mkdir(parents=True, exist_ok=True)
    config = args.config
    if args.env_steps is not None or args.seconds is not None:
        config = config_with_budget(config, args.env_steps, log_dir)
    if args.seeds is not None:
        report_seeds(config, args, log_dir, extra)
        return
    print("load average at start:", " ".join(f"{x:.2f}" for x in os.getloadavg()))
    start = run_fit(config, args.seconds, log_dir, extra)
    print("load average at end:", " ".join(f"{x:.2f}" for x in os.getloadavg()))
    print("events:", log_dir)
    curve = read_curve(log_dir)
    report(curve, start, args.marks, args.step_marks)
    for tag in args.tags:
        print(f"{tag} at marks:")
        values = read_curve(log_dir, tag)
        report_marks(values, start, args.marks, args.step_marks, end=curve[-1][:2])


def report_seeds(config: str, args: argparse.Namespace, log_dir: str, extra: list[str]) -> None:
    """One fit per seed in ``<log_dir>/seed_<S>``; each tag's spread over the seeds at each mark
    (the last value logged at or before it) and at the end."""
    starts, curves = {}, {}
    print("load average at start:", " ".join(f"{x:.2f}" for x in os.getloadavg()))
    for seed in args.seeds:
        seed_dir = str(Path(log_dir) / f"seed_{seed}")
        seed_args = [f"--seed_everything={seed}", f"--data.init_args.collector.seed={seed}"]
        starts[seed] = run_fit(config, args.seconds, seed_dir, [*seed_args, *extra])
        curves[seed] = {tag: read_curve(seed_dir, tag) for tag in (RETURN_KEY, *args.tags)}
    print("load average at end:", " ".join(f"{x:.2f}" for x in os.getloadavg()))
    print("events:", log_dir)
    for tag in (RETURN_KEY, *args.tags):
        marks = [(f"{m:.0f} s", lambda p, s, m=m: p[0] - starts[s] <= m) for m in args.marks]
        marks += [(f"{m} env steps", lambda p, s, m=m: p[1] <= m) for m in args.step_marks]
        marks.append(("the end", lambda p, s: True))
        for label, within in marks:
            at = {}
            for seed in args.seeds:
                before = [p for p in curves[seed][tag] if within(p, seed)]
                at[seed] = before[-1][2] if before else None
            print(f"at {label}: {spread(tag, at)}")


if __name__ == "__main__":
    main()
