"""Learning curves of finished runs: return against wall-clock and against env steps.

Reads each run's TensorBoard event file (``bench/returns.py --log-dir DIR`` keeps one; so does
any ``fit`` with a TensorBoardLogger) with tensorboard's ``EventAccumulator`` and draws one
figure per run: ``Train/mean_reward`` (the exploring policy's recent episodes) and, where the
run logged it, ``Eval/mean_reward`` (``callbacks.PolicyEvaluator``'s deterministic policy),
against seconds since the run's first event (left) and ``Train/learned_env_steps`` (right).

    python bench/returns.py configs/appo.yaml --log-dir /tmp/appo-run
    python bench/plot_curves.py /tmp/appo-run --labels configs/appo.yaml --out docs/curves.png

Several runs give one figure each, stacked in one PNG.
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

from returns import read_curve

TRAIN_KEY = "Train/mean_reward"
EVAL_KEY = "Eval/mean_reward"


def run_curves(log_dir: str) -> dict[str, list[tuple[float, int, float]]]:
    """``{tag: [(seconds since the first point, env steps, return), ...]}`` of one run.

    ``Eval/mean_reward`` is left out when the run never logged it.

    Raises:
        FileNotFoundError: If the run wrote no event file.
        KeyError: If the run never logged ``Train/mean_reward``.
    """
    curves = {TRAIN_KEY: read_curve(log_dir, TRAIN_KEY)}
    with contextlib.suppress(KeyError):
        curves[EVAL_KEY] = read_curve(log_dir, EVAL_KEY)
    start = min(wall for curve in curves.values() for wall, _, _ in curve)
    return {
        tag: [(wall - start, steps, value) for wall, steps, value in curve]
        for tag, curve in curves.items()
    }


def plot(log_dirs: list[str], labels: list[str], out: Path) -> None:
    """Write ``out``: one row per run, return against seconds (left) and env steps (right)."""
    import matplotlib

    matplotlib.use("Agg")  # files only; no display needed
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(log_dirs), 2, figsize=(10, 3.2 * len(log_dirs)), squeeze=False)
    for (by_time, by_steps), log_dir, label in zip(axes, log_dirs, labels, strict=True):
        for tag, curve in run_curves(log_dir).items():
            by_time.plot([s for s, _, _ in curve], [v for _, _, v in curve], label=tag)
            counted = [(n, v) for _, n, v in curve if n >= 0]
            by_steps.plot([n for n, _ in counted], [v for _, v in counted], label=tag)
        by_time.set_xlabel("seconds since the first logged return")
        by_steps.set_xlabel("env steps the learner trained on")
        for ax in (by_time, by_steps):
            ax.set_ylabel("return")
            ax.set_title(label)
            ax.grid(alpha=0.3)
        by_steps.legend(loc="upper left")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log_dirs", nargs="+", help="one event directory per run")
    parser.add_argument("--labels", nargs="*", default=None, help="a title per run")
    parser.add_argument("--out", type=Path, default=Path("curves.png"))
    args = parser.parse_args()
    labels = args.labels or args.log_dirs
    if len(labels) != len(args.log_dirs):
        parser.error(f"{len(args.log_dirs)} log dirs but {len(labels)} labels")
    plot(args.log_dirs, labels, args.out)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
