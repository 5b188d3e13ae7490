"""A trained run rebuilt from its checkpoint alone: the algorithm module and the task it trained on.

``play``, ``export`` and anything else that uses a trained policy start here. The user names a
checkpoint (or ``last``); the model class and the task come from what the run saved with it:
the LightningCLI hyper-parameters inside the checkpoint (``_class_path`` of the model, the data
module's collector options: ``task``, its class path and arguments), else the ``config.yaml`` the CLI writes into the run
directory next to ``checkpoints/``.
"""

from __future__ import annotations

import dataclasses
import importlib
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml
from lightning.pytorch import LightningModule

from unilab_lit.app.cli_io import find_config, one_line
from unilab_lit.app.resume import last_checkpoints, newest, weights_only_refusal
from unilab_lit.collector.options import CollectorOptions
from unilab_lit.envs.spec import EnvSpec
from unilab_lit.envs.task_spec import TaskSpec

CONFIG_FILE = "config.yaml"
LAST = "last"


class RunLoadError(Exception):
    """A checkpoint cannot be turned into a trained run; the message is one line for the user."""


@dataclass
class TrainedRun:
    """The trained algorithm module (on the CPU, in eval mode) and the task it learned.

    Args:
        model: The algorithm, with its networks, normalisers and hyper-parameters restored.
        task: The task the run trained on (class path and arguments).
        checkpoint: The checkpoint file the run was loaded from.
        global_step: Learner iterations the checkpoint had trained.
    """

    model: LightningModule
    task: TaskSpec
    checkpoint: Path
    global_step: int

    def task_facts(self) -> tuple[EnvSpec, dict[str, Any]]:
        """The task's spec (sizes, action bounds, control period) and its
        ``deployment_metadata()`` (joints, default pose, action map, gains, observation
        layout), from a one-env instance."""
        env = self.task.build(1)
        try:
            return env.spec, env.deployment_metadata()
        finally:
            env.close()


def resolve_checkpoint(ckpt_path: str | Path, run_dir: str | Path = "runs") -> Path:
    """The checkpoint file ``ckpt_path`` names.

    ``"last"`` is the newest ``last*.ckpt`` under ``run_dir`` (a run, an experiment
    ``<save_dir>/<name>`` whose versions ``fit --ckpt_path last`` continues, or a directory of
    experiments), refused when those belong to more than one experiment: the newest file of
    an unrelated experiment would silently stand in for the one meant.

    Raises:
        RunLoadError: If there is no such file, or ``"last"`` is ambiguous (the message lists
            the run directories to choose from).
    """
    if str(ckpt_path) != LAST:
        path = Path(ckpt_path)
        if not path.is_file():
            raise RunLoadError(f"checkpoint not found: {str(path)!r}")
        return path
    by_experiment: dict[Path, list[Path]] = {}
    for candidate in last_checkpoints(run_dir):
        by_experiment.setdefault(_run_directory(candidate).parent, []).append(candidate)
    if len(by_experiment) > 1:
        runs = sorted({str(_run_directory(p)) for found in by_experiment.values() for p in found})
        raise RunLoadError(
            f"--ckpt_path last is ambiguous: {len(by_experiment)} experiments under "
            f"{str(run_dir)!r} have a last checkpoint; pass --run_dir with one of: "
            + ", ".join(runs)
        )
    path = newest(next(iter(by_experiment.values()), []))
    if path is None:
        raise RunLoadError(
            f"--ckpt_path last: no last*.ckpt under {str(run_dir)!r}; pass a checkpoint "
            "path, --run_dir or --config"
        )
    return path


def experiment_dir(config: str | Path) -> Path:
    """``<save_dir>/<name>`` of the first logger with a ``save_dir`` in a fit config (a file or
    a shipped config's name): where that config's runs write their checkpoints.

    Raises:
        RunLoadError: If the config cannot be read or names no such logger.
    """
    path = Path(find_config(str(config)))
    try:
        loaded = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise RunLoadError(f"cannot read --config {str(config)!r}: {one_line(err)}") from err
    loggers = _get(loaded if isinstance(loaded, dict) else {}, "trainer", "logger")
    for logger in loggers if isinstance(loggers, list) else [loggers]:
        init_args = _get(logger, "init_args")
        if isinstance(init_args, dict) and init_args.get("save_dir") is not None:
            return Path(init_args["save_dir"]) / str(init_args.get("name") or "")
    raise RunLoadError(f"--config {str(config)!r} names no logger save_dir; pass --run_dir")


def load_trained_run(
    ckpt_path: str | Path, run_dir: str | Path = "runs", config: str | Path | None = None
) -> TrainedRun:
    """Rebuild the algorithm module and its task from a checkpoint.

    Args:
        ckpt_path: A checkpoint file, or ``"last"`` (see :func:`resolve_checkpoint`).
        run_dir: Where ``"last"`` is looked for.
        config: A fit config whose logger directory (:func:`experiment_dir`) replaces
            ``run_dir``.

    Raises:
        RunLoadError: If the checkpoint is missing, ambiguous or unreadable, or neither it nor
            a ``config.yaml`` in its run directory says which model and task it belongs to.
    """
    path = resolve_checkpoint(ckpt_path, run_dir if config is None else experiment_dir(config))
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        raise RunLoadError(weights_only_refusal(path, err)) from None
    except Exception as err:
        raise RunLoadError(f"cannot read checkpoint {str(path)!r}: {one_line(err)}") from err
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise RunLoadError(f"{str(path)!r} is not a Lightning checkpoint (it has no state_dict)")
    model_hparams = dict(checkpoint.get("hyper_parameters") or {})
    data_hparams = dict(checkpoint.get("datamodule_hyper_parameters") or {})
    config = _run_config(path)
    class_path = model_hparams.get("_class_path") or _get(config, "model", "class_path")
    # The data module's collector options: saved with the checkpoint, or in the run's config.
    collector = data_hparams.get("collector") or _get(config, "data", "init_args", "collector")
    if isinstance(collector, CollectorOptions):
        collector = dataclasses.asdict(collector)
    collector = collector if isinstance(collector, dict) else {}
    task = collector.get("task")
    if class_path is None or task is None:
        raise RunLoadError(
            f"{str(path)!r} carries no run config: neither LightningCLI hyper-parameters in the "
            f"checkpoint nor a {CONFIG_FILE} in {str(path.parent)!r} or "
            f"{str(path.parent.parent)!r} names its model and task (train with `python cli.py fit`)"
        )
    model_cls = _import_class(class_path, path)
    try:
        model = model_cls.load_from_checkpoint(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        raise RunLoadError(weights_only_refusal(path, err)) from None
    except Exception as err:
        raise RunLoadError(
            f"cannot rebuild {class_path} from {str(path)!r}: {one_line(err)}"
        ) from err
    model.eval().requires_grad_(False)
    return TrainedRun(
        model=model,
        task=TaskSpec.of(task),
        checkpoint=path,
        global_step=int(checkpoint.get("global_step", 0)),
    )


def _run_directory(checkpoint: Path) -> Path:
    # ModelCheckpoint writes into <run>/checkpoints unless given a dirpath.
    return (
        checkpoint.parent.parent if checkpoint.parent.name == "checkpoints" else checkpoint.parent
    )


def _run_config(checkpoint: Path) -> dict[str, Any]:
    # LightningCLI saves config.yaml in the logger's version directory, the parent of checkpoints/.
    for directory in (checkpoint.parent, checkpoint.parent.parent):
        candidate = directory / CONFIG_FILE
        if candidate.is_file():
            with candidate.open() as stream:
                loaded = yaml.safe_load(stream)
            return loaded if isinstance(loaded, dict) else {}
    return {}


def _get(config: dict[str, Any], *keys: str) -> Any:
    value: Any = config
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _import_class(class_path: str, checkpoint: Path) -> type[LightningModule]:
    module_name, _, name = class_path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError, ValueError) as err:
        raise RunLoadError(
            f"the model class {class_path!r} of {str(checkpoint)!r} cannot be imported: "
            f"{one_line(err)}"
        ) from err
    if not (isinstance(cls, type) and issubclass(cls, LightningModule)):
        raise RunLoadError(f"{class_path!r} of {str(checkpoint)!r} is not a LightningModule")
    return cls
