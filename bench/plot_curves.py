"""Learning curves of finished runs in one compact grid: a panel per run, Train and Eval return.

Each panel shows the return against wall-clock (default) or against env steps. Reads each run's TensorBoard event file (``bench/returns.py --log-dir DIR`` keeps one; so does
any ``fit`` with a TensorBoardLogger) with tensorboard's ``EventAccumulator`` and draws
``Train/mean_reward`` (the exploring policy's recent episodes) and, where the run logged it,
``Eval/mean_reward`` (``unilab_lit.callbacks.PolicyEvaluator``'s deterministic policy) against
minutes since the run's first event, or against ``Train/learned_env_steps`` with ``--by env_steps``.

    python bench/returns.py configs/appo.yaml --log-dir /tmp/appo-run
    python bench/plot_curves.py /tmp/appo-run /tmp/td3-run --labels appo.yaml fast_td3.yaml \
        --out docs/curves.png
"""

from __future__ import annotations

import argparse
import contextlib
import math
from pathlib import Path

from returns import read_curve

TRAIN_KEY = "Train/mean_reward"
EVAL_KEY = "Eval/mean_reward"
BY = ("time", "env_steps")


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


def plot(
    log_dirs: list[str], labels: list[str], out: Path, columns: int = 3, by: str = "time"
) -> None:
    """Write ``out``: one panel per run, ``columns`` panels a row, return against ``by``.

    Raises:
        ValueError: If ``by`` is not one of ``BY`` or ``columns`` is smaller than 1.
    """
    if by not in BY or columns < 1:
        raise ValueError(f"plot: by must be one of {BY} and columns >= 1, got {by!r}, {columns}")
    import matplotlib

    matplotlib.use("Agg")  # files only; no display needed
    import matplotlib.pyplot as plt

    columns = min(columns, len(log_dirs))
    rows = math.ceil(len(log_dirs) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(3.4 * columns, 2.5 * rows), squeeze=False)
    for ax, log_dir, label in zip(axes.flat, log_dirs, labels, strict=False):
        for tag, curve in run_curves(log_dir).items():
            if by == "time":
                points = [(s / 60.0, v) for s, _, v in curve]
            else:
                points = [(n, v) for _, n, v in curve if n >= 0]
            ax.plot([x for x, _ in points], [y for _, y in points], label=tag.split("/")[0])
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("minutes" if by == "time" else "env steps", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    for ax in list(axes.flat)[len(log_dirs) :]:
        ax.set_visible(False)
    axes[0, 0].set_ylabel("return", fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log_dirs", nargs="+", help="one event directory per run")
    parser.add_argument("--labels", nargs="*", default=None, help="a title per run")
    parser.add_argument("--out", type=Path, default=Path("curves.png"))
    parser.add_argument("--columns", type=int, default=3, help="panels a row")
    parser.add_argument("--by", choices=BY, default="time", help="the x axis")
    args = parser.parse_args()
    labels = args.labels or args.log_dirs
    if len(labels) != len(args.log_dirs):
        parser.error(f"{len(args.log_dirs)} log dirs but {len(labels)} labels")
    plot(args.log_dirs, labels, args.out, args.columns, args.by)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
