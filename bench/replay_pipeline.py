"""Off-policy pipeline: the learner's wait-for-batch share, iterations/s, and the collector under fit vs alone.

Both measurements use one config (default ``configs/fast_td3.yaml``) with the same task,
``num_envs``, ``batch_size``, ``updates_per_step`` and threads, in the same run:

- collector alone: a ``CollectorProcess`` with the lock-step off-policy writer and this process
  as an instant learner: a ``DoubleBufferPipeline`` whose batches are taken as fast as they
  arrive, so every tick costs the collector's env step(s) plus its pack of the next batch.
  The policy is frozen (nobody publishes weights).
- fit: ``Trainer.fit`` of the config (``ReplayDataModule``, its callbacks and logger), timed
  after the first iteration. Per iteration: its wall time (batch start to batch end) and the
  part spent waiting in the pipeline for the batch (``FeedStats.last_wait_s``).

Printed: learner iterations/s; the wait-for-batch share of an iteration (total wait over total
iteration time; target <= 5% when the learner is the bottleneck, i.e. when its own time per
iteration exceeds the collector-alone time per tick); the learner's own ms/iteration; and the
collector's env-steps/s in fit over its env-steps/s alone (in lock step it can only reach 1 when
the learner is faster than the collector).

    python bench/replay_pipeline.py
    python bench/replay_pipeline.py --config configs/fast_sac.yaml --seconds 30
    python bench/replay_pipeline.py --num-envs 64 --batch-size 1024 --hidden 64 64
    python bench/replay_pipeline.py --smoke    # 4 envs, batch 64, 1 s a side (CI)
"""

from __future__ import annotations

# Only the standard library at module level: the collector is a spawn child that re-imports
# this script before its first line.
import argparse
import contextlib
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
    if args.hidden is not None:
        overrides += [
            f"--model.init_args.actor_hidden_dims={args.hidden}",
            f"--model.init_args.critic_hidden_dims={args.hidden}",
        ]
    overrides += data_overrides({k: getattr(args, k) for k in ("task", "num_envs", "batch_size")})
    cli = UnilabCLI(args=["--config", args.config, *overrides], run=False)
    lift_env_step_budget(cli.trainer.callbacks)
    # The bench stops fit itself; a checkpoint callback from the config would only add I/O.
    from lightning.pytorch.callbacks import ModelCheckpoint

    cli.trainer.callbacks = [c for c in cli.trainer.callbacks if not isinstance(c, ModelCheckpoint)]
    return cli


@contextlib.contextmanager
def lockstep_collector(cli, **option_overrides):
    """The data module's collector in lock step with this process: yields ``(collector,
    pipeline)``, a started ``CollectorProcess`` with the off-policy writer and a CPU
    ``DoubleBufferPipeline`` whose warm-up batch is taken. The policy is frozen (nobody publishes
    weights). ``option_overrides`` replace fields of the collector options (e.g. timeouts)."""
    import dataclasses

    import torch

    from unilab_lit.collector.options import CollectorConfig
    from unilab_lit.collector.process import CollectorProcess
    from unilab_lit.collector.writers import OffPolicyWriterSpec
    from unilab_lit.data.double_buffer import DoubleBufferPipeline
    from unilab_lit.envs.spec import CRITIC, POLICY
    from unilab_lit.ipc.lockstep import LockstepLink
    from unilab_lit.ipc.obs_stats import SharedObsStats
    from unilab_lit.ipc.replay_storage import ReplayStorage, replay_columns

    data, model = cli.datamodule, cli.model
    options, spec = dataclasses.replace(data.collector, **option_overrides), data.env_spec
    columns = replay_columns(spec.obs_sizes[POLICY], spec.obs_sizes[CRITIC], spec.action_size)
    replay = ReplayStorage(data.buffer_size * options.num_envs, columns)
    link = LockstepLink(data.batch_size * model.offpolicy.updates_per_step, replay.width)
    # Never published (no weights to wait for, so the collector acts at once): it normalises with
    # mean 0 / var 1, a fresh normaliser's statistics, the same work per step as fit's.
    obs_stats = SharedObsStats(spec.obs_sizes[POLICY])
    collector = CollectorProcess(
        CollectorConfig(
            options,
            policy=model.collector_policy_spec(),
            writer=OffPolicyWriterSpec(replay.handle(), link.handle(), data.env_steps_per_sync),
            obs_stats=obs_stats.handle(),
            obs_norm_eps=model.obs_normalizer.eps,
            obs_norm_clip=model.obs_normalizer.clip,
        )
    )
    pipeline = None
    try:
        collector.start(timeout=options.startup_timeout_s)
        pipeline = DoubleBufferPipeline(
            link,
            replay,
            collector,
            rows_per_tick=data.rows_per_tick,
            warmup_rows=max(1, data.learning_starts * options.num_envs),
            device=torch.device("cpu"),
            timeout_s=options.data_timeout_s,
        )
        pipeline.next()  # warm-up
        yield collector, pipeline
    finally:
        if pipeline is not None:
            pipeline.close()
        collector.stop()
        for block in (link, replay, obs_stats):
            block.unlink()


def collector_alone(cli, seconds: float) -> dict:
    """Env-steps/s of the data module's collector in lock step with an instant learner."""
    with lockstep_collector(cli) as (_, pipeline):
        began, tick0 = time.perf_counter(), pipeline.tick
        while time.perf_counter() - began < seconds:
            pipeline.next()
        elapsed = time.perf_counter() - began
        ticks = pipeline.tick - tick0
    rows_per_tick = cli.datamodule.rows_per_tick
    return {
        "env_steps_per_s": ticks * rows_per_tick / elapsed,
        "ms_per_tick": 1e3 * elapsed / ticks,
        "ticks": ticks,
        "seconds": elapsed,
    }


def fit(cli, seconds: float) -> dict:
    """Iterations/s of ``Trainer.fit`` and the wait-for-batch share, after the first iteration."""
    from fit_timing import FitMeter

    meter = FitMeter(seconds)
    cli.trainer.callbacks.append(meter)
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    return meter.result


def _print_round(index: int, alone: dict, together: dict) -> None:
    print(
        f"round {index} collector alone : {alone['env_steps_per_s']:>9,.0f} env-steps/s "
        f"({alone['ms_per_tick']:.1f} ms/tick incl. pack; {alone['ticks']} ticks in "
        f"{alone['seconds']:.1f} s)",
        flush=True,
    )
    print(
        f"round {index} fit             : {together['env_steps_per_s']:>9,.0f} env-steps/s "
        f"= {together['env_steps_per_s'] / alone['env_steps_per_s']:.2f} x alone; "
        f"{together['iterations_per_s']:.1f} learner iterations/s, learner "
        f"{together['learner_ms']:.1f} ms/iteration without waits; "
        f"wait-for-batch share {100 * together['wait_share']:.2f}% "
        f"({together['iterations']} iterations in {together['seconds']:.1f} s)",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/fast_td3.yaml", help="off-policy config")
    parser.add_argument("--task", default=None, help="task (default: the config's)")
    parser.add_argument("--num-envs", type=int, default=None, help="default: the config's")
    parser.add_argument("--batch-size", type=int, default=None, help="default: the config's")
    parser.add_argument(
        "--hidden", type=int, nargs="+", default=None, help="actor and critic widths"
    )
    parser.add_argument("--seconds", type=float, default=20.0, help="measured time per side")
    parser.add_argument(
        "--rounds", type=int, default=1, help="alone/fit pairs, alternated against load drift"
    )
    args = parse_args(parser, num_envs=4, batch_size=64, hidden=[16, 16], seconds=1.0)
    for index in range(1, args.rounds + 1):
        with tempfile.TemporaryDirectory() as log_dir:
            alone = collector_alone(_cli(args, log_dir), args.seconds)
            together = fit(_cli(args, log_dir), args.seconds)
        _print_round(index, alone, together)


if __name__ == "__main__":
    main()
