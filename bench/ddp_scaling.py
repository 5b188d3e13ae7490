"""DDP scaling: the same config with 1 rank and with N ranks, end-to-end env-steps/s and learner it/s.

    python bench/ddp_scaling.py                                    # configs/appo.yaml, 1 vs 2 ranks, CPU
    python bench/ddp_scaling.py --config configs/fast_td3_gpu.yaml --accelerator gpu --ranks 8
    python bench/ddp_scaling.py --smoke                            # 8 envs, 1 + 2 iterations (CI)

Each side is a fresh ``cli.py fit`` process (Lightning's DDP launcher starts the other ranks).
The window runs from the end of iteration ``--warmup`` to the end of the last one on every rank,
so start-up, collector spawn and the first compiled/cold iterations are excluded. Reported:

- env-steps/s: the sum over ranks of each rank's env steps consumed in its window / its
  window length (every rank trains on its own collector's data);
- learner it/s: rank 0's iterations / its window (every rank runs one iteration per step);
- the ratio against ideal scaling: env-steps/s(N) / (N x env-steps/s(1)) and it/s(N) / it/s(1).

On a machine with fewer cores than ranks x (collector + learner) the ratio shows only the
overhead of contention and collectives; on N GPUs it is the scaling figure.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from lightning.pytorch import Callback, LightningModule, Trainer

REPO = Path(__file__).resolve().parents[1]


class ThroughputProbe(Callback):
    """Writes this rank's env steps, iterations and seconds between two iterations to JSON.

    Args:
        out_dir: Directory of the per-rank ``rank<r>.json`` files.
        warmup: Iterations before the window opens (>= 1).
    """

    def __init__(self, out_dir: str, warmup: int = 5) -> None:
        self.out_dir = Path(out_dir)
        self.warmup = warmup
        self._start: tuple[float, int, int] | None = None
        self._end: tuple[float, int, int] | None = None

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        mark = (time.perf_counter(), trainer.datamodule.feed.env_steps, trainer.global_step)
        if trainer.global_step == self.warmup:
            self._start = mark
        elif self._start is not None:
            self._end = mark

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._start is None or self._end is None:
            return
        seconds = self._end[0] - self._start[0]
        record = {
            "seconds": seconds,
            "env_steps": self._end[1] - self._start[1],
            "iterations": self._end[2] - self._start[2],
        }
        self.out_dir.mkdir(parents=True, exist_ok=True)
        (self.out_dir / f"rank{trainer.global_rank}.json").write_text(json.dumps(record))


def _fit(args: argparse.Namespace, ranks: int, out_dir: Path) -> dict[str, float]:
    strategy = "ddp" if ranks > 1 else "auto"
    command = [
        sys.executable,
        "cli.py",
        "fit",
        "--config",
        args.config,
        f"--trainer.accelerator={args.accelerator}",
        f"--trainer.devices={ranks}",
        f"--trainer.strategy={strategy}",
        f"--trainer.max_steps={args.warmup + args.iterations}",
        "--trainer.logger=false",
        f"--trainer.default_root_dir={out_dir}",  # LightningCLI's config.yaml goes there
        "--trainer.enable_checkpointing=false",
        "--trainer.enable_progress_bar=false",
        "--trainer.callbacks=[]",
        "--trainer.callbacks+=unilab_lit.callbacks.WeightSync",
        "--trainer.callbacks+=unilab_lit.callbacks.ObsNormSync",
        "--trainer.callbacks+=unilab_lit.callbacks.EpisodeStatsMonitor",
        "--trainer.callbacks+=bench.ddp_scaling.ThroughputProbe",
        f"--trainer.callbacks.out_dir={out_dir}",
        f"--trainer.callbacks.warmup={args.warmup}",
        *args.override,
    ]
    began = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, env=dict(os.environ))
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    records = [json.loads((out_dir / f"rank{r}.json").read_text()) for r in range(ranks)]
    return {
        "env_steps_per_s": sum(r["env_steps"] / r["seconds"] for r in records),
        "iterations_per_s": records[0]["iterations"] / records[0]["seconds"],
        "process_s": time.perf_counter() - began,
    }


def main() -> None:
    # Here, not at module level: cli.py imports this module as bench.ddp_scaling (its probe).
    from smoke import parse_args

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/appo.yaml")
    parser.add_argument("--accelerator", default="cpu")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--override", nargs="*", default=[], help="extra cli.py arguments")
    args = parse_args(
        parser,
        warmup=1,
        iterations=2,
        override=["--data.init_args.collector.num_envs=8", "--data.init_args.num_steps=8"],
    )
    with tempfile.TemporaryDirectory() as tmp:
        one = _fit(args, 1, Path(tmp) / "one")
        many = _fit(args, args.ranks, Path(tmp) / "many")
    print(f"config {args.config}, {args.iterations} iterations after {args.warmup} warm-up")
    print(f"load: {os.getloadavg()[0]:.2f} (1-min average, after the runs)")
    for name, result in (("1 rank", one), (f"{args.ranks} ranks", many)):
        print(
            f"{name:>9}: {result['env_steps_per_s']:10.0f} env-steps/s  "
            f"{result['iterations_per_s']:6.2f} it/s  (process {result['process_s']:.0f} s)"
        )
    env_ratio = many["env_steps_per_s"] / (args.ranks * one["env_steps_per_s"])
    it_ratio = many["iterations_per_s"] / one["iterations_per_s"]
    print(f"ratio to ideal: env-steps/s {env_ratio:.2f}, learner it/s {it_ratio:.2f} (ideal 1.00)")


if __name__ == "__main__":
    main()
