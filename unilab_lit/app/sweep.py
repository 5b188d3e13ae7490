"""``python -m unilab_lit.app.sweep --config C --space sweep.yaml --trials N``: an Optuna search.

Each trial is a real fit (``python -m unilab_lit fit``, its own process) of the config with the
trial's values as command-line overrides and ``unilab_lit.callbacks.TrialPruning``, which reports
the monitored metric at every epoch end, lets Optuna's median pruner stop a poor trial there, and
tells the study the trial's result. The study lives in a storage (``--storage``, default a
SQLite file in ``--log_dir``): a sweep stopped half-way continues with the same command, up to
``--trials`` trials in all. ``--parallel k`` runs k fits at once. It ends with a table of the
best trials and their values. Needs the ``sweep`` extra (``pip install -e ".[sweep]"``).

The space file::

    monitor: Train/mean_reward      # the metric (default), maximised unless direction: minimize
    direction: maximize
    epoch: 20                       # iterations per epoch (trainer.limit_train_batches)
    n_startup_trials: 2             # trials that complete before the pruner prunes
    n_warmup_epochs: 1              # epochs of a trial before it can be pruned
    parameters:                     # dotted config keys, as on the fit command line
      model.init_args.optimizer.init_args.lr: {low: 1.0e-4, high: 3.0e-3, log: true}
      model.init_args.num_mini_batches: {low: 2, high: 8}       # ints give an int range
      model.init_args.gamma: {choices: [0.98, 0.99, 0.995]}
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from unilab_lit.app.cli_io import fit_argv, launcher_parser, split_passthrough

_SPACE_KEYS = {"monitor", "direction", "epoch", "n_startup_trials", "n_warmup_epochs", "parameters"}


class SweepError(Exception):
    """The space file or the study cannot be used; the message is one line for the user."""


def read_space(path: str | Path) -> dict[str, Any]:
    """The space file with its defaults filled in.

    Raises:
        SweepError: If it cannot be read, has unknown keys, or a parameter is neither a range
            (``low``, ``high``, optional ``log``) nor ``choices``.
    """
    try:
        space = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as err:
        raise SweepError(f"cannot read --space {str(path)!r}: {err}") from err
    unknown = set(space) - _SPACE_KEYS
    if unknown:
        raise SweepError(
            f"--space {str(path)!r}: unknown keys {sorted(unknown)}; valid: {sorted(_SPACE_KEYS)}"
        )
    parameters = space.get("parameters") or {}
    if not parameters:
        raise SweepError(f"--space {str(path)!r} names no parameters")
    for key, spec in parameters.items():
        if not isinstance(spec, dict) or not ({"low", "high"} <= set(spec) or "choices" in spec):
            raise SweepError(
                f"parameter {key!r}: give low and high (optional log: true) or choices, got {spec!r}"
            )
    if space.get("direction", "maximize") not in ("maximize", "minimize"):
        raise SweepError(f"direction must be maximize or minimize, got {space['direction']!r}")
    return {
        "monitor": "Train/mean_reward",
        "direction": "maximize",
        "epoch": None,
        "n_startup_trials": 2,
        "n_warmup_epochs": 1,
        **space,
        "parameters": parameters,
    }


def suggest(trial: Any, parameters: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The trial's value of each parameter."""
    values = {}
    for key, spec in parameters.items():
        if "choices" in spec:
            values[key] = trial.suggest_categorical(key, spec["choices"])
        elif isinstance(spec["low"], int) and isinstance(spec["high"], int):
            values[key] = trial.suggest_int(
                key, spec["low"], spec["high"], log=spec.get("log", False)
            )
        else:
            values[key] = trial.suggest_float(
                key, float(spec["low"]), float(spec["high"]), log=spec.get("log", False)
            )
    return values


def trial_command(
    config: str,
    space: dict[str, Any],
    values: dict[str, Any],
    storage: str,
    study_name: str,
    number: int,
    log_dir: Path,
    extra: Sequence[str],
) -> list[str]:
    """The fit of one trial: its values as overrides, its pruning callback, its run directory."""
    epoch = [] if space["epoch"] is None else [f"--trainer.limit_train_batches={space['epoch']}"]
    return [
        *fit_argv(config),
        *(f"--{key}={json.dumps(value)}" for key, value in values.items()),
        *epoch,
        f"--trainer.logger.init_args.save_dir={log_dir}",
        f"--trainer.logger.init_args.name=trial_{number}",
        *extra,
        "--trainer.callbacks+=unilab_lit.callbacks.TrialPruning",
        f"--trainer.callbacks.storage={storage}",
        f"--trainer.callbacks.study_name={study_name}",
        f"--trainer.callbacks.trial_number={number}",
        f"--trainer.callbacks.monitor={space['monitor']}",
        f"--trainer.callbacks.n_startup_trials={space['n_startup_trials']}",
        f"--trainer.callbacks.n_warmup_epochs={space['n_warmup_epochs']}",
    ]


def best_trials_table(study: Any, top: int = 5) -> str:
    """The ``top`` best complete trials (value, parameters), and how many were pruned or failed."""
    import optuna

    states = optuna.trial.TrialState
    complete = [t for t in study.trials if t.state == states.COMPLETE]
    complete.sort(
        key=lambda t: t.value, reverse=study.direction == optuna.study.StudyDirection.MAXIMIZE
    )
    counts = {s.name.lower(): sum(t.state == s for t in study.trials) for s in states}
    lines = [
        f"study {study.study_name}: " + ", ".join(f"{n} {name}" for name, n in counts.items() if n),
        f"{'trial':>5}  {'value':>10}  parameters",
    ]
    for t in complete[:top]:
        params = ", ".join(
            f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in t.params.items()
        )
        lines.append(f"{t.number:>5}  {t.value:>10.4g}  {params}")
    return "\n".join(lines)


def run_sweep(
    config: str,
    space: dict[str, Any],
    trials: int,
    storage: str,
    study_name: str,
    log_dir: Path,
    parallel: int = 1,
    extra: Sequence[str] = (),
) -> Any:
    """Run trials until the study holds ``trials`` finished ones (complete, pruned or failed);
    returns the study. A trial left running by an interrupted sweep is marked failed."""
    import optuna

    study = optuna.create_study(
        storage=storage, study_name=study_name, direction=space["direction"], load_if_exists=True
    )
    states = optuna.trial.TrialState
    for stale in study.get_trials(deepcopy=False, states=(states.RUNNING,)):
        study.tell(stale.number, state=states.FAIL)
    lock = threading.Lock()
    remaining = [max(0, trials - len(study.trials))]

    def one_trial() -> None:
        with lock:
            if remaining[0] <= 0:
                return
            remaining[0] -= 1
            trial = study.ask()
            values = suggest(trial, space["parameters"])
        command = trial_command(
            config, space, values, storage, study_name, trial.number, log_dir, extra
        )
        sys.stdout.write(f"trial {trial.number}: {json.dumps(values)}\n")
        sys.stdout.flush()
        status = subprocess.run(command, stdout=subprocess.DEVNULL).returncode
        with lock:
            if study.get_trials(deepcopy=False)[trial.number].state == states.RUNNING:
                # The fit ended before its TrialPruning told a result (a crash, a bad value).
                sys.stderr.write(f"trial {trial.number}: the fit exited with status {status}\n")
                study.tell(trial.number, state=states.FAIL)

    with ThreadPoolExecutor(max_workers=parallel) as pool:
        for future in [pool.submit(one_trial) for _ in range(remaining[0])]:
            future.result()
    return study


def _parser() -> argparse.ArgumentParser:
    parser = launcher_parser(
        "python -m unilab_lit.app.sweep",
        "An Optuna search over a fit config: one fit per trial, pruned at epoch ends, "
        "resumable from its storage.",
        "runs/sweep_<config>",
    )
    parser.add_argument("--space", required=True, help="the search space YAML file")
    parser.add_argument("--trials", type=int, required=True, help="trials in the study in all")
    parser.add_argument("--parallel", type=int, default=1, help="fits at once")
    parser.add_argument(
        "--storage", default=None, help="Optuna storage URL (default: sqlite:///<log_dir>/sweep.db)"
    )
    parser.add_argument("--study", default=None, help="study name (default: the config's stem)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns 0, or 2 with a one-line ``error:`` on bad input."""
    argv = list(sys.argv[1:] if argv is None else argv)
    own, extra = split_passthrough(argv)
    args = _parser().parse_args(own)
    stem = Path(args.config).stem
    log_dir = Path(args.log_dir or Path("runs") / f"sweep_{stem}").absolute()
    try:
        import optuna  # noqa: F401
    except ImportError:
        sys.stderr.write('error: sweeps need optuna: pip install -e ".[sweep]"\n')
        return 2
    try:
        if args.trials < 1 or args.parallel < 1:
            raise SweepError(
                f"--trials and --parallel must be >= 1, got {args.trials}, {args.parallel}"
            )
        space = read_space(args.space)
    except SweepError as err:
        sys.stderr.write(f"error: {err}\n")
        return 2
    log_dir.mkdir(parents=True, exist_ok=True)
    storage = args.storage or f"sqlite:///{log_dir / 'sweep.db'}"
    study = run_sweep(
        args.config, space, args.trials, storage, args.study or stem, log_dir, args.parallel, extra
    )
    sys.stdout.write(best_trials_table(study) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
