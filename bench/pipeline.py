"""End-to-end env-steps/s of ``fit`` over env-steps/s of the same collector running alone.

Both measurements use one config (default ``configs/appo.yaml``) with the same task,
``num_envs``, ``num_steps``, physics and collector threads, in the same run:

- collector alone: a ``CollectorProcess`` with the APPO writer into a ``RolloutRing``, a frozen
  policy (nobody publishes weights) and this process popping rollouts out of the ring as fast as
  they are committed; the rate is rollouts committed x ``num_steps`` x ``num_envs`` per second.
- fit: ``Trainer.fit`` of the config (APPO, ``RolloutDataModule``, its callbacks and logger);
  the rate is the growth of the data module's ``env_steps`` (rollouts the learner consumed) per
  second, timed from the end of the first training batch.

The ratio fit / alone is the fraction of the collector's speed that reaches the learner. It
can only approach 1 when the learner keeps up with the collector, so by default the learner is
made cheap: ``--hidden 32 32``, one epoch, one minibatch (override with ``--hidden``,
``--epochs``, ``--mini-batches``). Rollouts the collector wrote that the learner never read are
reported as dropped.

    python bench/pipeline.py
    python bench/pipeline.py --task HalfCheetah --num-envs 256 --num-steps 16 --seconds 20
    python bench/pipeline.py --smoke     # 8 envs x 8 steps, 1 s a side (CI)
"""

from __future__ import annotations

# Only the standard library at module level: the collector is a spawn child that re-imports
# this script before its first line.
import argparse
import os
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
        f"--model.init_args.num_learning_epochs={args.epochs}",
        f"--model.init_args.num_mini_batches={args.mini_batches}",
        f"--model.init_args.actor_hidden_dims={args.hidden}",
        f"--model.init_args.critic_hidden_dims={args.hidden}",
    ]
    overrides += data_overrides({k: getattr(args, k) for k in ("task", "num_envs", "num_steps")})
    cli = UnilabCLI(args=["--config", args.config, *overrides], run=False)
    lift_env_step_budget(cli.trainer.callbacks)
    return cli


def collector_alone(cli, seconds: float) -> dict:
    """Env-steps/s of the data module's collector with a frozen policy and a greedy reader."""
    import torch

    from unilab_lit.collector.options import CollectorConfig
    from unilab_lit.collector.process import CollectorProcess
    from unilab_lit.collector.writers import AppoWriterSpec
    from unilab_lit.envs.spec import CRITIC, POLICY
    from unilab_lit.ipc.channel import TIMING
    from unilab_lit.ipc.obs_stats import SharedObsStats
    from unilab_lit.ipc.rollout_ring import RolloutRing, rollout_fields

    data, model = cli.datamodule, cli.model
    options, spec = data.collector, data.env_spec
    fields = rollout_fields(
        data.num_steps,
        options.num_envs,
        spec.obs_sizes[POLICY],
        spec.obs_sizes[CRITIC],
        spec.action_size,
    )
    ring = RolloutRing(data.ring_slots, fields)
    # Never published (no weights to wait for, so the collector acts at once): it normalises with
    # mean 0 / var 1, a fresh normaliser's statistics, the same work per step as fit's.
    obs_stats = SharedObsStats(spec.obs_sizes[POLICY])
    collector = CollectorProcess(
        CollectorConfig(
            options,
            policy=model.collector_policy_spec(),
            writer=AppoWriterSpec(ring=ring.handle(), num_steps=data.num_steps),
            obs_stats=obs_stats.handle(),
            obs_norm_eps=model.obs_normalizer.eps,
            obs_norm_clip=model.obs_normalizer.clip,
        )
    )
    dest = {name: torch.empty(shape, dtype=dtype) for name, (shape, dtype) in fields.items()}
    try:
        collector.start(timeout=options.startup_timeout_s)
        # Start the clock on the first committed rollout, as fit starts it after its first batch.
        collector.wait_for(lambda: ring.write_count > 0, timeout=options.data_timeout_s)
        began, written0, dropped0 = time.perf_counter(), ring.write_count, ring.dropped
        collector.drain_metrics()
        while time.perf_counter() - began < seconds:
            collector.wait_for(lambda: ring.pop_into(dest), timeout=options.data_timeout_s)
        elapsed = time.perf_counter() - began
        written, dropped = ring.write_count - written0, ring.dropped - dropped0
        reported = [m["env_steps_per_s"] for m in collector.drain_metrics() if m["kind"] == TIMING]
    finally:
        collector.stop()
        ring.unlink()
        obs_stats.unlink()
    return {
        "env_steps_per_s": written * data.num_steps * options.num_envs / elapsed,
        "collector_reported": sum(reported) / len(reported) if reported else float("nan"),
        "rollouts": written,
        "dropped": dropped,
        "seconds": elapsed,
    }


def fit(cli, seconds: float) -> dict:
    """Env-steps/s the learner consumes in ``Trainer.fit``, after its first batch."""
    from fit_timing import FitMeter

    meter = FitMeter(seconds)
    cli.trainer.callbacks.append(meter)
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    return meter.result


def _print_round(index: int, alone: dict, together: dict) -> None:
    print(
        f"round {index} collector alone: {alone['env_steps_per_s']:>9,.0f} env-steps/s "
        f"(its own report {alone['collector_reported']:,.0f}; "
        f"{alone['rollouts']} rollouts in {alone['seconds']:.1f} s)",
        flush=True,
    )
    print(
        f"round {index} fit end-to-end : {together['env_steps_per_s']:>9,.0f} env-steps/s "
        f"(collector's latest report {together['collector_reported']:,.0f}; "
        f"{together['iterations']} iterations in {together['seconds']:.1f} s, learner "
        f"{together['learner_ms']:.1f} ms/iteration without waits, busy "
        f"{together['learner_busy']:.0%}, "
        f"{together['dropped']} rollouts dropped, policy lag {together['policy_lag']:.2f})",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/appo.yaml", help="APPO config to run")
    parser.add_argument("--task", default=None, help="task (default: the config's)")
    parser.add_argument("--num-envs", type=int, default=None, help="default: the config's")
    parser.add_argument("--num-steps", type=int, default=None, help="default: the config's")
    parser.add_argument("--seconds", type=float, default=20.0, help="measured time per side")
    parser.add_argument(
        "--rounds", type=int, default=1, help="alone/fit pairs, alternated against load drift"
    )
    parser.add_argument("--hidden", type=int, nargs="+", default=[32, 32], help="MLP widths")
    parser.add_argument("--epochs", type=int, default=1, help="learning epochs per iteration")
    parser.add_argument("--mini-batches", type=int, default=1, help="minibatches per epoch")
    args = parse_args(parser, num_envs=8, num_steps=8, seconds=1.0, rounds=1)
    if args.seconds <= 0:
        parser.error(f"--seconds must be > 0, got {args.seconds}")
    if args.rounds < 1:
        parser.error(f"--rounds must be >= 1, got {args.rounds}")
    args.hidden = str(args.hidden)
    import torch

    totals = {"alone": [0.0, 0.0], "fit": [0.0, 0.0]}  # env steps, seconds
    with tempfile.TemporaryDirectory(prefix="bench_pipeline_") as log_dir:
        for index in range(args.rounds):
            alone = collector_alone(_cli(args, log_dir), args.seconds)
            cli = _cli(args, log_dir)
            together = fit(cli, args.seconds)
            if index == 0:
                data = cli.datamodule
                options = data.collector
                print(
                    f"{options.task}: {options.num_envs} envs x {data.num_steps} steps, "
                    f"{options.physics_threads} physics thread(s), learner hidden {args.hidden}, "
                    f"{args.epochs} epoch(s) x {args.mini_batches} minibatch(es), learner torch "
                    f"threads {torch.get_num_threads()}; {os.cpu_count()} CPUs",
                    flush=True,
                )
            _print_round(index, alone, together)
            for name, result in (("alone", alone), ("fit", together)):
                totals[name][0] += result["env_steps_per_s"] * result["seconds"]
                totals[name][1] += result["seconds"]
    alone_rate = totals["alone"][0] / totals["alone"][1]
    fit_rate = totals["fit"][0] / totals["fit"][1]
    print(
        f"collector alone {alone_rate:,.0f} env-steps/s, fit end-to-end {fit_rate:,.0f} "
        f"env-steps/s, ratio fit / alone: {fit_rate / alone_rate:.2f}"
    )


if __name__ == "__main__":
    main()
