"""Wall-clock to a threshold return: our APPO (``cli.py`` config) against rsl_rl's synchronous PPO.

Both sides train the same task with the same network sizes, activation, initial std, rollout
shape (``num_envs`` x ``num_steps``), epochs, minibatches, learning rate, schedule, discount and
loss coefficients, all read from one config (default ``configs/appo.yaml``):

- ours: the config through ``UnilabCLI`` and ``Trainer.fit`` (collector subprocess, shared-memory
  ring, staging pool, callbacks, TensorBoard logger and checkpointing as configured);
- theirs: rsl-rl-lib's ``OnPolicyRunner`` with ``PPO`` on the same task through
  ``unilab_lit.envs.rsl_rl_vecenv.RslRlVecEnv``, actor and critic ``MLPModel`` with empirical
  observation normalisation (ours normalises too), logging to a temporary directory.

Each side runs in its own fresh Python process, one after the other. The rsl_rl side gets the
config resolved by an untimed process before it (``rsl_rl_setup``), so its start-up is a plain
rsl_rl script's: torch, rsl_rl and the env, no Lightning. rsl_rl collects and learns one phase
after the other, so by default each phase gets every core (``--rsl-physics-threads`` and
``--rsl-torch-threads``, its fastest setting on the 2-core machine); ours runs with the threads
its config gives the collector and the learner, which work at the same time. The clock starts when
training starts (``on_train_start`` / ``runner.learn``) and stops when the mean return of the
last 100 finished episodes reaches ``--threshold`` (the window both loggers use), or after
``--max-seconds``. ``--metric`` watches one of the task's per-episode metrics instead, e.g. a
joystick task's ``tracking_error_lin_vel`` with ``--below`` (the run ends when its mean over the
last 100 episodes falls to the threshold): a return can be earned by standing still, a tracking
error only by walking. Env-steps/s are env steps consumed by the learner per second over that time.
Our episode statistics reach the learner in the collector's reports; the bench asks for one every
``REPORT_INTERVAL_S`` (0.1 s, the trainer's default is 1 s) and checks them after every learner
iteration, so our time carries up to one report interval plus one iteration of delay that
rsl_rl's per-env-step check does not have; the bench prints that grain next to each time.

Our side also reports where its samples went (``--side ours`` result, summed up per seed):
optimiser steps per collected env step, the policy lag of the newest and the oldest rollout of
each batch, the share of steps whose importance weight was clipped (rho > rho-bar) or whose trace
was cut (c < 1), rollouts the ring dropped, and how many iterations each rollout was trained in
against the ``staging_capacity`` intended.

The task can be anything a config names (a built-in name, ``{class_path, init_args}``,
``gym:<EnvId>``): the rsl_rl side rebuilds it from the resolved ``TaskSpec``.

    python bench/appo_vs_rsl_rl.py
    python bench/appo_vs_rsl_rl.py --threshold 150 --max-seconds 300 --seeds 0 1
    python bench/appo_vs_rsl_rl.py --config configs/appo_go1.yaml --metric tracking_error_lin_vel \
        --below --threshold 0.285 --max-seconds 1800   # half of standing still's 0.570 m/s
    python bench/appo_vs_rsl_rl.py --smoke      # both sides for a few seconds (CI)
"""

from __future__ import annotations

# Only the standard library at module level: the collector is a spawn child that re-imports
# this script before its first line.
import argparse
import contextlib
import functools
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

# A sibling module of this script, standard library only at import time as well.
from rsl_rl_mirror import rsl_rl_train_cfg, unmirrored_option

ROOT = Path(__file__).resolve().parents[1]
RESULT_PREFIX = "RESULT "
WINDOW = 100  # finished episodes in the running mean, as rsl_rl's logger and EpisodeStatsMonitor
SIDES = ("ours", "rsl_rl")
SETUP = "rsl_rl_setup"  # the untimed child that resolves the config for the rsl_rl side
REPORT_INTERVAL_S = 0.1  # our collector's metrics reports, the grain of our episode statistics
SMOKE_SECONDS = 3.0  # --smoke: each side trains this long
RETURN = "return"  # --metric: the episode return; any other name is one of the task's metrics


def reached(value: float, threshold: float, below: bool) -> bool:
    """Whether the watched mean ``value`` has reached ``threshold`` (NaN, no episode yet: no)."""
    return value <= threshold if below else value >= threshold


def _check_metric(metric: str, episode_metrics: tuple[str, ...]) -> None:
    if metric != RETURN and metric not in episode_metrics:
        raise ValueError(
            f"--metric {metric}: the task has no such per-episode metric; it has "
            f"{', '.join((RETURN, *episode_metrics))}"
        )


def _cli(config: str, log_dir: str, seed: int, overrides: list[str]):
    """Our CLI, parsed and instantiated (model, data module, trainer) but not run; ``overrides``
    are ``cli.py`` arguments after the config's (``--data.init_args.max_policy_lag=1``)."""
    from unilab_lit.app.unilab_cli import UnilabCLI

    return UnilabCLI(
        args=[
            "--config",
            config,
            # The collector's seed follows seed_everything (docs/configs.md).
            f"--seed_everything={seed}",
            f"--trainer.logger.init_args.save_dir={log_dir}",
            "--trainer.max_steps=-1",
            "--trainer.enable_progress_bar=false",
            *overrides,
        ],
        run=False,
    )


class SampleLedger:
    """Where our side's samples go, iteration by iteration (standard library only).

    Each iteration stages ``staged`` new rollouts into a FIFO pool of ``capacity`` and trains on
    every rollout in it; a rollout pushed out by newer ones before any batch saw it was trained
    0 times. :meth:`summary` gives the distribution of iterations per rollout against the
    ``capacity`` intended, and of the policy lag (iteration minus the rollout's policy version)
    of the newest and the oldest rollout of each batch.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._pool: deque[list[int]] = deque()
        self.uses: list[int] = []
        self.newest_lag: list[int] = []
        self.oldest_lag: list[int] = []

    def add(self, staged: int, newest_lag: int, oldest_lag: int) -> None:
        for _ in range(staged):
            self._pool.append([0])
            if len(self._pool) > self.capacity:
                self.uses.append(self._pool.popleft()[0])
        for rollout in self._pool:
            rollout[0] += 1
        self.newest_lag.append(newest_lag)
        self.oldest_lag.append(oldest_lag)

    def summary(self) -> dict:
        uses = self.uses + [r[0] for r in self._pool]
        return {
            "rollouts": len(uses),
            "uses_histogram": _histogram(uses),
            "newest_lag_histogram": _histogram(self.newest_lag),
            "oldest_lag_histogram": _histogram(self.oldest_lag),
        }


def _histogram(values: list[int]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for value in sorted(values):
        counts[str(value)] = counts.get(str(value), 0) + 1
    return counts


def run_ours(
    config: str,
    goal: tuple[str, float, bool],
    max_seconds: float,
    seed: int,
    log_dir: str,
    overrides: list[str],
) -> dict:
    from fit_timing import lift_env_step_budget
    from lightning.pytorch import Callback

    from unilab_lit.collector import session
    from unilab_lit.collector.link import collector_link
    from unilab_lit.telemetry import metrics
    from unilab_lit.telemetry.log_schedule import loggers_write_this_step

    # Episode statistics every REPORT_INTERVAL_S instead of the trainer's one second: the grain
    # of our time to the threshold (the collector's only other report is a few bytes of timing).
    session.CollectorConfig = functools.partial(
        session.CollectorConfig, report_interval_s=REPORT_INTERVAL_S
    )
    averaged = (metrics.RHO_CLIP_FRACTION, metrics.TRACE_CUT_FRACTION, metrics.MEAN_TRACE_COEF)
    metric, threshold, below = goal
    watched = metrics.MEAN_REWARD if metric == RETURN else metrics.episode_metric(metric)

    class ThresholdStop(Callback):
        """Stops fit when the watched episode mean reaches ``threshold`` or time runs out."""

        def __init__(self) -> None:
            self.result: dict = {}
            self.sums = dict.fromkeys(averaged, 0.0)
            self.counted = 0
            self.iteration_s: list[float] = []

        def on_train_start(self, trainer, pl_module) -> None:
            _check_metric(metric, trainer.datamodule.env_spec.episode_metrics)
            self.began = self.last = time.perf_counter()
            self.steps0 = collector_link(trainer).feed.env_steps
            self.pool = trainer.datamodule.pool
            self.staged0 = self.pool.staged_total
            self.ledger = SampleLedger(self.pool.capacity)

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            now = time.perf_counter()
            elapsed = now - self.began
            self.iteration_s.append(now - self.last)
            self.last = now
            versions = batch["policy_version"][0]
            iteration = trainer.global_step - 1  # the iteration that trained on this batch
            staged = self.pool.staged_total - self.staged0
            self.staged0 = self.pool.staged_total
            self.ledger.add(
                staged, iteration - int(versions.max()), iteration - int(versions.min())
            )
            logged = trainer.callback_metrics
            # The learner's terms, on the iterations the loggers write (log_every_n_steps).
            if loggers_write_this_step(trainer) and all(key in logged for key in averaged):
                for key in averaged:
                    self.sums[key] += float(logged[key])
                self.counted += 1
            value = float(logged.get(watched, float("nan")))
            done = reached(value, threshold, below)
            if done or elapsed >= max_seconds:
                self._finish(trainer, pl_module, done, elapsed, value)
                trainer.should_stop = True

        def _finish(self, trainer, pl_module, done, elapsed, value) -> None:
            link = collector_link(trainer)
            hp = pl_module.hparams
            env_steps = link.feed.env_steps - self.steps0
            optimizer_steps = trainer.global_step * hp.num_learning_epochs * hp.num_mini_batches
            collection = trainer.callback_metrics.get(metrics.COLLECTION_FPS)
            ordered = sorted(self.iteration_s)
            mean_return = trainer.callback_metrics.get(metrics.MEAN_REWARD, float("nan"))
            self.result = {
                "reached": done,
                "seconds": elapsed,
                "env_steps": env_steps,
                "iterations": trainer.global_step,
                "value": value,
                "mean_return": float(mean_return),
                "collector_fps": None if collection is None else float(collection),
                "ring_dropped": link.transport.dropped,
                "optimizer_steps_per_sample": optimizer_steps / max(env_steps, 1),
                "iteration_median_s": ordered[len(ordered) // 2],
                "grain_s": REPORT_INTERVAL_S + ordered[len(ordered) // 2],
                "capacity": self.pool.capacity,
                **{key: total / max(self.counted, 1) for key, total in self.sums.items()},
                **self.ledger.summary(),
            }

    cli = _cli(config, log_dir, seed, overrides)
    stop = ThresholdStop()
    lift_env_step_budget(cli.trainer.callbacks)
    cli.trainer.callbacks.append(stop)
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    return stop.result


def rsl_rl_setup(config: str, log_dir: str, seed: int, overrides: list[str]) -> dict:
    """What the rsl_rl side needs from ``config``, resolved through our CLI (JSON-able).

    A process of its own computes it before the timed rsl_rl process starts, so that rsl_rl's
    start-up does not include importing Lightning, which a plain rsl_rl script never does.
    """
    cli = _cli(config, log_dir, seed, overrides)
    data = cli.datamodule
    options = data.collector
    return {
        "train_cfg": rsl_rl_train_cfg(cli.model.hparams, data.num_steps, data.staging_capacity),
        "task": options.task.to_config(),
        "num_envs": options.num_envs,
    }


def run_rsl_rl(
    setup: dict,
    goal: tuple[str, float, bool],
    max_seconds: float,
    seed: int,
    log_dir: str,
    physics_threads: int,
) -> dict:
    import torch
    from rsl_rl.runners import OnPolicyRunner

    from unilab_lit.envs.rsl_rl_vecenv import RslRlVecEnv
    from unilab_lit.envs.spec import METRIC_PREFIX
    from unilab_lit.envs.task_spec import TaskSpec

    train_cfg = setup["train_cfg"]
    torch.manual_seed(seed)

    class Stop(Exception):
        """Raised from inside ``runner.learn`` when the threshold is reached or time is up."""

    metric, threshold, below = goal
    key = RETURN if metric == RETURN else METRIC_PREFIX + metric
    returns: deque[float] = deque(maxlen=WINDOW)
    values: deque[float] = deque(maxlen=WINDOW)
    state = {"env_steps": 0, "updates": 0}

    def mean(series: deque[float]) -> float:
        return sum(series) / len(series) if series else float("nan")

    class WatchedEnv(RslRlVecEnv):
        def step(self, actions):
            out = super().step(actions)
            state["env_steps"] += self.num_envs
            episode = self.last_info["episode"]
            returns.extend(episode["return"].tolist())
            values.extend(episode[key].tolist())
            elapsed = time.perf_counter() - state["began"]
            done = reached(mean(values), threshold, below)
            if done or elapsed >= max_seconds:
                state.update(
                    reached=done, seconds=elapsed, value=mean(values), mean_return=mean(returns)
                )
                raise Stop
            return out

    task = TaskSpec.of(setup["task"]).build(
        setup["num_envs"], seed=seed, num_threads=physics_threads
    )
    _check_metric(metric, task.spec.episode_metrics)
    env = WatchedEnv(task, seed=seed)
    runner = OnPolicyRunner(env, train_cfg, log_dir=log_dir, device="cpu")
    update = runner.alg.update

    def counted_update() -> dict:
        state["updates"] += 1
        return update()

    runner.alg.update = counted_update
    state["began"] = time.perf_counter()
    with contextlib.suppress(Stop):
        runner.learn(num_learning_iterations=10**9)
    env.close()
    algorithm = train_cfg["algorithm"]
    optimizer_steps = (
        state["updates"] * algorithm["num_learning_epochs"] * algorithm["num_mini_batches"]
    )
    return {
        "reached": state["reached"],
        "seconds": state["seconds"],
        "env_steps": state["env_steps"],
        "iterations": state["updates"],
        "value": state["value"],
        "mean_return": state["mean_return"],
        "optimizer_steps_per_sample": optimizer_steps / max(state["env_steps"], 1),
    }


def _child(args: argparse.Namespace) -> None:
    """One side in this process; prints one ``RESULT {json}`` line."""
    if args.side == "ours":
        # As ``cli.py fit`` does: the collector imports torch while this process imports Lightning.
        from unilab_lit.collector.prestart import prestart

        prestart()
    if args.side == "rsl_rl":
        import torch

        torch.set_num_threads(args.rsl_torch_threads)
    with contextlib.ExitStack() as stack:
        if args.log_dir is None:
            log_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench_"))
        else:
            log_dir = str(Path(args.log_dir, f"{args.side}_seed{args.seed}").resolve())
            os.makedirs(log_dir, exist_ok=True)
        # Both trainers print per-iteration reports; keep them out of the bench's output.
        sink = stack.enter_context(open(Path(log_dir) / "stdout.txt", "w"))
        stack.enter_context(contextlib.redirect_stdout(sink))
        goal = (args.metric, args.threshold, args.below)
        if args.side == "ours":
            result = run_ours(args.config, goal, args.max_seconds, args.seed, log_dir, args.set)
        elif args.side == SETUP:
            result = rsl_rl_setup(args.config, log_dir, args.seed, args.set)
        else:
            result = run_rsl_rl(
                json.loads(args.rsl_setup),
                goal,
                args.max_seconds,
                args.seed,
                log_dir,
                args.rsl_physics_threads,
            )
    print(RESULT_PREFIX + json.dumps(result), flush=True)


def _run_child(
    side: str, args: argparse.Namespace, seed: int, extra: list[str]
) -> tuple[dict, float]:
    """Run one child of this script; its ``RESULT`` and its wall-clock from launch to exit."""
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        f"--side={side}",
        f"--config={args.config}",
        f"--threshold={args.threshold}",
        f"--metric={args.metric}",
        *(["--below"] if args.below else []),
        f"--max-seconds={args.max_seconds}",
        f"--seeds={seed}",
        *(f"--set={override}" for override in args.set),
        *extra,
    ]
    for flag, value in (
        ("--rsl-physics-threads", args.rsl_physics_threads),
        ("--rsl-torch-threads", args.rsl_torch_threads),
        ("--log-dir", args.log_dir),
    ):
        if value is not None:
            command.append(f"{flag}={value}")
    began = time.perf_counter()
    done = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=args.max_seconds + 300
    )
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith(RESULT_PREFIX)]
    if done.returncode != 0 or not lines:
        raise RuntimeError(
            f"{side} run failed (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    return json.loads(lines[-1][len(RESULT_PREFIX) :]), time.perf_counter() - began


def _run_side(side: str, args: argparse.Namespace, seed: int) -> dict:
    extra = []
    if side == "rsl_rl":
        setup, _ = _run_child(SETUP, args, seed, [])
        extra.append(f"--rsl-setup={json.dumps(setup)}")
    result, process_seconds = _run_child(side, args, seed, extra)
    result["process_seconds"] = process_seconds
    result["env_steps_per_s"] = result["env_steps"] / result["seconds"]
    return result


def _report(side: str, seed: int, r: dict, metric: str) -> None:
    status = "reached" if r["reached"] else "NOT reached"
    extra = ""
    if r.get("collector_fps") is not None:
        extra = f"  collector {r['collector_fps']:,.0f}/s  ring dropped {r['ring_dropped']}"
    grain = f"  grain {r['grain_s']:.2f} s" if "grain_s" in r else ""
    watched = "" if metric == RETURN else f"  {metric} {r['value']:.3f}"
    print(
        f"{side:<7} seed {seed}: {status} in {r['seconds']:7.1f} s{grain} "
        f"(process {r['process_seconds']:.1f} s)  mean return {r['mean_return']:6.1f}{watched}  "
        f"iterations {r['iterations']:5d}  env steps {r['env_steps']:>9,}  "
        f"{r['env_steps_per_s']:>8,.0f} env-steps/s  "
        f"optimiser steps per 1k env steps {1e3 * r['optimizer_steps_per_sample']:.2f}{extra}",
        flush=True,
    )
    if side == "ours":
        print(
            f"        where the samples went: iterations per rollout {r['uses_histogram']} "
            f"(intended {r['capacity']}); policy lag of the newest rollout "
            f"{r['newest_lag_histogram']}, of the oldest {r['oldest_lag_histogram']}; "
            f"rho clipped {r['Policy/rho_clip_fraction']:.3f}, trace cut "
            f"{r['Policy/trace_cut_fraction']:.3f}, mean trace coefficient "
            f"{r['Policy/mean_trace_coef']:.3f}; median iteration {r['iteration_median_s']:.3f} s",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/appo.yaml", help="our APPO config")
    parser.add_argument(
        "--threshold",
        type=float,
        default=150.0,
        help="mean of --metric over the last 100 episodes that ends a run",
    )
    parser.add_argument(
        "--metric",
        default=RETURN,
        help="the watched episode quantity: the return, or one of the task's per-episode "
        "metrics (e.g. tracking_error_lin_vel of the joystick tasks)",
    )
    parser.add_argument(
        "--below",
        action="store_true",
        help="a run ends when the mean falls to the threshold (errors), not when it rises to it",
    )
    parser.add_argument("--max-seconds", type=float, default=300.0, help="cap per run")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=f"train each side for {SMOKE_SECONDS:.0f} s, whatever the threshold (CI: the bench "
        "still runs end to end)",
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    cores = len(os.sched_getaffinity(0))
    parser.add_argument(
        "--rsl-physics-threads",
        type=int,
        default=cores,
        help="MuJoCo threads of rsl_rl's env (default: the CPUs this process may use, "
        f"{cores}); ours: the config's data physics_threads",
    )
    parser.add_argument(
        "--rsl-torch-threads",
        type=int,
        default=cores,
        help=f"torch threads of rsl_rl's process (default: the CPUs, {cores}); rsl_rl collects "
        "and learns one after the other, so each phase may use every core: on the idle 2-core "
        "machine 2 + 2 threads stepped the Go1 1.46-1.48x faster than 1 + 1 (bench/README); ours: "
        "the config's data learner_torch_threads",
    )
    parser.add_argument(
        "--log-dir", default=None, help="keep each run's logs here (default: a temporary dir)"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="ARG",
        help="a cli.py argument applied after the config on both sides, e.g. "
        "--set=--data.init_args.max_policy_lag=1 (repeatable)",
    )
    parser.add_argument(
        "--sides", nargs="+", choices=SIDES, default=list(SIDES), help="run only these sides"
    )
    parser.add_argument("--side", choices=(*SIDES, SETUP), help=argparse.SUPPRESS)
    parser.add_argument("--rsl-setup", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.smoke:
        args.max_seconds = SMOKE_SECONDS
    if args.max_seconds <= 0:
        parser.error(f"--max-seconds must be > 0, got {args.max_seconds}")
    if args.side is not None:
        args.seed = args.seeds[0]
        _child(args)
        return
    if (unmirrored := unmirrored_option(args.config)) is not None:
        parser.error(unmirrored)

    print(
        f"config {args.config}; threshold: mean {args.metric} of the last {WINDOW} episodes "
        f"{'<=' if args.below else '>='} {args.threshold}; cap {args.max_seconds:.0f} s per run; "
        f"rsl_rl physics + torch threads {args.rsl_physics_threads} + {args.rsl_torch_threads}; "
        f"{os.cpu_count()} CPUs; grain of the time to threshold: rsl_rl "
        f"one env step, ours one episode report ({REPORT_INTERVAL_S} s) + one iteration "
        f"(printed per run)",
        flush=True,
    )
    results: dict[str, list[dict]] = {side: [] for side in args.sides}
    for seed in args.seeds:
        for side in args.sides:
            result = _run_side(side, args, seed)
            _report(side, seed, result, args.metric)
            results[side].append(result)
        if len(args.sides) < len(SIDES):
            continue
        ours, theirs = results["ours"][-1], results["rsl_rl"][-1]
        print(
            f"seed {seed}: time ours / rsl_rl {_ratio_text(ours, theirs)}, whole process "
            f"{ours['process_seconds'] / theirs['process_seconds']:.2f}",
            flush=True,
        )
    if len(args.sides) == len(SIDES):
        _summarize(results)


def _ratio_text(ours: dict, theirs: dict) -> str:
    """The time ratio of one seed; a run that hit the cap makes it a bound."""
    ratio = ours["seconds"] / theirs["seconds"]
    if ours["reached"] and theirs["reached"]:
        return f"{ratio:.2f}"
    if ours["reached"]:
        return f"< {ratio:.2f} (rsl_rl hit the cap)"
    if theirs["reached"]:
        return f"> {ratio:.2f} (ours hit the cap)"
    return "unknown (both hit the cap)"


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _summarize(results: dict[str, list[dict]]) -> None:
    pairs = list(zip(results["ours"], results["rsl_rl"], strict=True))
    train = _median([o["seconds"] / t["seconds"] for o, t in pairs])
    process = _median([o["process_seconds"] / t["process_seconds"] for o, t in pairs])
    reached = {side: sum(r["reached"] for r in runs) for side, runs in results.items()}
    runs = len(pairs)
    print(
        f"time to threshold, ours / rsl_rl, median over {runs} seed(s): from train start "
        f"{train:.2f}, whole process {process:.2f} (a capped run counts with its cap time); "
        f"reached: ours {reached['ours']}/{runs}, rsl_rl {reached['rsl_rl']}/{runs}"
    )
    dropped = [o["ring_dropped"] for o in results["ours"]]
    print(f"ours: ring dropped {dropped} rollouts (per seed)")
    fps = {
        side: sum(r["env_steps"] for r in runs) / sum(r["seconds"] for r in runs)
        for side, runs in results.items()
    }
    print(
        f"env-steps/s: ours {fps['ours']:,.0f}, rsl_rl {fps['rsl_rl']:,.0f}, "
        f"ratio ours / rsl_rl {fps['ours'] / fps['rsl_rl']:.2f}"
    )


if __name__ == "__main__":
    main()
