"""``python -m unilab_lit.app.seeds --config C --seeds 0 1 2``: one fit per seed, and the spread.

Each seed's fit runs as its own ``python -m unilab_lit fit`` process with
``--seed_everything S`` and the collector's seed ``data.init_args.collector.seed=S``, its
TensorBoard logger writing ``<log_dir>/seed_<S>/version_0``: sibling run directories. At the
end the last logged value of each ``--tags`` scalar of each run is read back from its event
file and printed as the median, minimum and maximum over the seeds. ``bench/returns.py
--seeds`` prints the same spread at each of its marks, with :func:`spread` and
:func:`read_scalars` from here.

    python -m unilab_lit.app.seeds --config configs/appo.yaml --seeds 0 1 2
    python -m unilab_lit.app.seeds --config configs/appo.yaml --seeds 0 1 --tags \\
        Train/mean_reward Train/mean_episode_length -- --trainer.max_time=00:00:05:00
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from unilab_lit.app.cli_io import fit_argv, launcher_parser, split_passthrough

DEFAULT_TAGS = ("Train/mean_reward",)


def seed_run_dir(log_dir: Path, seed: int) -> Path:
    """The experiment directory (``<save_dir>/<name>``) of ``seed``'s fit under ``log_dir``."""
    return log_dir / f"seed_{seed}"


def read_scalars(run_dir: str | Path, tag: str) -> list[tuple[float, int, float]]:
    """``(wall_time, step, value)`` of every logged ``tag`` in the newest event file under
    ``run_dir``.

    Raises:
        FileNotFoundError: If there is no event file under ``run_dir``.
        KeyError: If the run never logged ``tag`` (the message lists the tags it logged).
    """
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    files = sorted(Path(run_dir).rglob("events.out.tfevents*"), key=lambda p: p.stat().st_mtime)
    if not files:
        raise FileNotFoundError(f"no TensorBoard event file under {str(run_dir)!r}")
    events = EventAccumulator(str(files[-1].parent), size_guidance={"scalars": 0})
    events.Reload()
    tags = events.Tags()["scalars"]
    if tag not in tags:
        raise KeyError(f"{tag!r} was never logged; the run logged {sorted(tags)}")
    return [(e.wall_time, e.step, e.value) for e in events.Scalars(tag)]


def spread(tag: str, by_seed: dict[int, float | None]) -> str:
    """One line: the median, minimum and maximum of ``tag`` over the seeds that have a value,
    then each seed's value (``-`` where a seed has none)."""
    values = [v for v in by_seed.values() if v is not None]
    each = ", ".join(f"{s}: {'-' if v is None else f'{v:.4g}'}" for s, v in by_seed.items())
    if not values:
        return f"{tag}: no seed has a value (seeds {each})"
    return (
        f"{tag} over {len(values)} of {len(by_seed)} seeds: median {statistics.median(values):.4g}, "
        f"min {min(values):.4g}, max {max(values):.4g} (seed {each})"
    )


def fit_command(config: str, seed: int, log_dir: Path, extra: Sequence[str]) -> list[str]:
    """The ``fit`` of one seed: both seeds set, its logger writing under ``log_dir``."""
    return [
        *fit_argv(config),
        f"--seed_everything={seed}",
        f"--data.init_args.collector.seed={seed}",
        f"--trainer.logger.init_args.save_dir={log_dir}",
        f"--trainer.logger.init_args.name={seed_run_dir(log_dir, seed).name}",
        *extra,
    ]


def last_values(log_dir: Path, seeds: Sequence[int], tag: str) -> dict[int, float | None]:
    """Each seed's last logged ``tag`` (``None`` where its run never logged it)."""
    out: dict[int, float | None] = {}
    for seed in seeds:
        try:
            out[seed] = read_scalars(seed_run_dir(log_dir, seed), tag)[-1][2]
        except (FileNotFoundError, KeyError):
            out[seed] = None
    return out


def _parser() -> argparse.ArgumentParser:
    parser = launcher_parser(
        "python -m unilab_lit.app.seeds",
        "One fit per seed into sibling run directories; the spread of chosen metrics at the end.",
        "runs/seeds_<config>",
    )
    parser.add_argument("--seeds", type=int, nargs="+", required=True, help="one fit per seed")
    parser.add_argument("--tags", nargs="+", default=list(DEFAULT_TAGS), help="scalars to report")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns 0, or the exit status of the first fit that failed."""
    argv = list(sys.argv[1:] if argv is None else argv)
    own, extra = split_passthrough(argv)
    args = _parser().parse_args(own)
    log_dir = Path(args.log_dir or Path("runs") / f"seeds_{Path(args.config).stem}")
    for seed in args.seeds:
        command = fit_command(args.config, seed, log_dir, extra)
        sys.stdout.write(f"seed {seed}: {' '.join(command[1:])}\n")
        sys.stdout.flush()
        status = subprocess.run(command).returncode
        if status != 0:
            sys.stderr.write(f"error: the fit of seed {seed} exited with status {status}\n")
            return status
    for tag in args.tags:
        sys.stdout.write(spread(tag, last_values(log_dir, args.seeds, tag)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
