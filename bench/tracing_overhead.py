"""Cost of ``unilab_lit.callbacks.Tracing``: the same APPO fit with and without it, in the same run.

Each round runs ``Trainer.fit`` of one config (default ``configs/appo.yaml``) twice, once
plain and once with ``Tracing`` appended to its callbacks (the order alternates between
rounds against load drift). Each fit is timed for ``--seconds`` from the end of its first
training batch and reports:

- learner ms/iteration: an iteration's time without its wait for data (the learner's own
  cost, which Tracing's hooks and span recording add to);
- end-to-end env-steps/s: growth of the data module's ``env_steps`` per second;
- the collector's own env-steps/s (its latest report), which its span recording adds to.

The ratios traced / plain are printed per round and as medians over rounds (target: learner
time ratio <= 1.03, throughput ratios >= 0.97). Writing the trace file happens after the
timed window and is reported separately, as are two in-process costs that no load noise
hides: one ``tracing.span`` on the learner and one recorded collector step (five phases).
Those costs times the event counts of the traced fit, and the time Lightning's
``SimpleProfiler`` (on in both fits) measures inside Tracing's per-iteration hooks, give
estimates of the overhead that load drift between the fits does not swamp (the fits' ratios on
a shared 2-core machine move by tens of percent).

    python bench/tracing_overhead.py
    python bench/tracing_overhead.py --seconds 30 --rounds 3 --num-envs 256
    python bench/tracing_overhead.py --smoke    # 8 envs x 8 steps, 1 s fits (CI)
"""

from __future__ import annotations

# Only the standard library at module level: the collector is a spawn child that re-imports
# this script before its first line.
import argparse
import os
import statistics
import tempfile
import time

from smoke import parse_args


def _cli(args: argparse.Namespace, log_dir: str):
    """Our CLI with the bench's overrides, instantiated but not run."""
    from fit_timing import data_overrides, lift_env_step_budget

    from unilab_lit.app.unilab_cli import UnilabCLI

    overrides = [
        f"--trainer.logger.init_args.save_dir={log_dir}",
        "--trainer.max_steps=-1",
        "--trainer.enable_progress_bar=false",
    ]
    overrides += data_overrides({k: getattr(args, k) for k in ("task", "num_envs", "num_steps")})
    cli = UnilabCLI(args=["--config", args.config, *overrides], run=False)
    lift_env_step_budget(cli.trainer.callbacks)
    # The config's ModelCheckpoint would write during the timed window of one side only.
    cli.trainer.callbacks = [
        c for c in cli.trainer.callbacks if type(c).__name__ != "ModelCheckpoint"
    ]
    return cli


def fit(args: argparse.Namespace, traced: bool) -> dict:
    """One timed fit; with ``traced`` a ``Tracing`` callback writes into a temporary dir."""
    from fit_timing import FitMeter
    from lightning.pytorch.profilers import SimpleProfiler

    from unilab_lit.callbacks import Tracing

    with tempfile.TemporaryDirectory(prefix="tracing_overhead_") as log_dir:
        cli = _cli(args, log_dir)
        # Both sides profiled alike; the traced side reads the time of Tracing's own hooks.
        profiler = SimpleProfiler(dirpath=log_dir, filename="profile")
        cli.trainer.profiler = profiler
        meter = FitMeter(args.seconds)
        trace_path = os.path.join(log_dir, "trace.json")
        if traced:
            # Before the meter, so that Tracing's per-iteration merge in on_train_batch_end
            # falls inside the meter's clock.
            cli.trainer.callbacks.append(Tracing(path=trace_path))
        cli.trainer.callbacks.append(meter)
        cli.trainer.fit(cli.model, datamodule=cli.datamodule)
        result = {
            **meter.result,
            "num_envs": cli.datamodule.collector.num_envs,
            "end_s": time.perf_counter() - meter.stopped_at,
        }
        if traced:
            result["trace_mb"] = os.path.getsize(trace_path) / 2**20
            hooks = [
                sum(durations)
                for action, durations in profiler.recorded_durations.items()
                if action.startswith("[Callback]Tracing.") and action.split(".")[-1] in _PER_STEP
            ]
            batches = len(profiler.recorded_durations["[Callback]Tracing.on_train_batch_end"])
            result["hooks_ms"] = 1e3 * sum(hooks) / batches
            result["learner_events_per_step"] = _learner_events_per_step(trace_path)
    return result


# Tracing's hooks that run every iteration (the others run once per fit).
_PER_STEP = (
    "on_train_batch_start",
    "on_before_backward",
    "on_after_backward",
    "on_train_batch_end",
)


def _learner_events_per_step(path: str) -> float:
    """Learner events (spans and counter samples) per training step, read from the trace."""
    import json

    with open(path) as f:
        events = json.load(f)["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    learner = [e for e in events if e["ph"] in ("X", "C") and names[e["pid"]] == "learner"]
    steps = sum(1 for e in learner if e["name"] == "training_step")
    return len(learner) / max(steps, 1)


def micro_costs() -> dict:
    """In-process costs: a learner span, and one collector step's five phases."""
    from unilab_lit.telemetry import tracing

    n = 20_000
    recorder = tracing.TraceRecorder("bench")
    phases = ("a", "b", "c", "d", "e")
    began = time.perf_counter_ns()
    for _ in range(n):
        with tracing.span("off"):
            pass
    off_ns = (time.perf_counter_ns() - began) / n
    tracing.install(recorder)
    try:
        began = time.perf_counter_ns()
        for _ in range(n):
            with tracing.span("on"):
                pass
        on_ns = (time.perf_counter_ns() - began) / n
    finally:
        tracing.install(None)
    stamps = [0, 20_000, 40_000, 60_000, 80_000, 100_000]
    began = time.perf_counter_ns()
    for _ in range(n):
        recorder.add_phases(phases, stamps)
    phases_ns = (time.perf_counter_ns() - began) / n
    recorder.drain()
    for _ in range(n):
        recorder.add_phases(phases, stamps)
    began = time.perf_counter_ns()
    recorder.drain()
    drain_ns = (time.perf_counter_ns() - began) / n
    return {"span_off": off_ns, "span_on": on_ns, "step_record": phases_ns, "step_drain": drain_ns}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/appo.yaml", help="APPO config to run")
    parser.add_argument("--task", default=None, help="task (default: the config's)")
    parser.add_argument("--num-envs", type=int, default=None, help="default: the config's")
    parser.add_argument("--num-steps", type=int, default=None, help="default: the config's")
    parser.add_argument("--seconds", type=float, default=20.0, help="timed window per fit")
    parser.add_argument("--rounds", type=int, default=2, help="plain/traced pairs")
    args = parse_args(parser, num_envs=8, num_steps=8, seconds=1.0, rounds=1)
    if args.seconds <= 0:
        parser.error(f"--seconds must be > 0, got {args.seconds}")
    if args.rounds < 1:
        parser.error(f"--rounds must be >= 1, got {args.rounds}")

    ratios: dict[str, list[float]] = {"learner": [], "end_to_end": [], "collector": []}
    plains: list[dict] = []
    traceds: list[dict] = []
    for index in range(args.rounds):
        order = (False, True) if index % 2 == 0 else (True, False)
        results = {traced: fit(args, traced) for traced in order}
        plain, traced = results[False], results[True]
        plains.append(plain)
        traceds.append(traced)
        for name, result in (("plain ", plain), ("traced", traced)):
            print(
                f"round {index} {name}: learner {result['learner_ms']:7.2f} ms/iteration, "
                f"end-to-end {result['env_steps_per_s']:9,.0f} env-steps/s, collector "
                f"{result['collector_reported']:9,.0f} env-steps/s ({result['iterations']} iterations)",
                flush=True,
            )
        print(
            f"round {index} trace: {traced['trace_mb']:.1f} MB; timed window's end to fit's "
            f"return {traced['end_s']:.2f} s traced (last collector batch, writing the file) vs "
            f"{plain['end_s']:.2f} s plain",
            flush=True,
        )
        ratios["learner"].append(traced["learner_ms"] / plain["learner_ms"])
        ratios["end_to_end"].append(traced["env_steps_per_s"] / plain["env_steps_per_s"])
        ratios["collector"].append(traced["collector_reported"] / plain["collector_reported"])
    print(
        f"median traced/plain over {args.rounds} round(s): "
        f"learner time {statistics.median(ratios['learner']):.3f} (target <= 1.03), "
        f"end-to-end env-steps/s {statistics.median(ratios['end_to_end']):.3f}, "
        f"collector env-steps/s {statistics.median(ratios['collector']):.3f} (targets >= 0.97)"
    )
    costs = micro_costs()
    print(
        f"in-process: tracing.span off {costs['span_off']:.0f} ns, on {costs['span_on']:.0f} ns; "
        f"collector step recorded {costs['step_record']:.0f} ns + drained "
        f"{costs['step_drain']:.0f} ns (5 phases)"
    )
    # The same overhead from event counts x in-process costs, free of the fits' load noise.
    per_event_ns = costs["span_on"] + costs["step_drain"] / 5
    learner_ms = statistics.median(r["learner_ms"] for r in plains)
    events = statistics.median(r["learner_events_per_step"] for r in traceds)
    collector_step_ms = statistics.median(
        1e3 * r["num_envs"] / r["collector_reported"] for r in plains
    )
    step_cost_ms = 1e-6 * (costs["step_record"] + costs["step_drain"])
    hooks_ms = statistics.median(r["hooks_ms"] for r in traceds)
    print(
        f"Tracing's hooks (SimpleProfiler): {hooks_ms:.3f} ms/iteration = "
        f"{100 * hooks_ms / learner_ms:.3f}% of a {learner_ms:.1f} ms learner iteration"
    )
    print(
        f"estimated from costs: learner {events:.0f} events/iteration x {per_event_ns:.0f} ns = "
        f"{100 * 1e-6 * events * per_event_ns / learner_ms:.3f}% of {learner_ms:.1f} ms; "
        f"collector {100 * step_cost_ms / collector_step_ms:.3f}% of a "
        f"{collector_step_ms:.2f} ms vector step"
    )


if __name__ == "__main__":
    main()
