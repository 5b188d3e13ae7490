"""Which checkpoint ``fit --ckpt_path`` resumes, and which run directory its loggers continue.

Lightning resolves ``ckpt_path="last"`` in the checkpoint directory of the *current* logger
version, and loggers without a fixed ``version`` start a new one (``version_1``) on every run, so
a plain ``--ckpt_path last`` finds nothing and silently trains from scratch. Before the classes
are built, :func:`continue_run_directory` finds the checkpoint and sets every run-directory logger
(``save_dir`` + ``version``, e.g. TensorBoardLogger and CSVLogger) whose ``version`` is unset to
the version it had when the checkpoint was written, so the curves continue in the same directory.

:func:`check_checkpoint_matches` refuses a checkpoint written by another configuration (model
class, task, observation or action size, world size, the data module's env batch, rollout, ring,
staging and replay sizes) before anything starts; without it,
LightningCLI would silently swap in the checkpoint's model class from its saved hyper-parameters.
"""

from __future__ import annotations

import logging
import pickle
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from jsonargparse import Namespace

log = logging.getLogger(__name__)

# The state key RLCheckpoint's saved logger versions live under in a checkpoint's "callbacks".
_RL_CHECKPOINT_KEY = "RLCheckpoint"
_LAST_GLOB = "last*.ckpt"
# Checkpoint callbacks whose ``dirpath`` holds ``last.ckpt`` (Lightning's and our subclass).
_CHECKPOINT_CALLBACKS = ("ModelCheckpoint", "StopCheckpoint")
# What a resumed run must share with the run that wrote the checkpoint: name -> where the
# checkpoint keeps it (a path of keys).
RUN_IDENTITY: dict[str, tuple[str, ...]] = {
    "model class": ("hyper_parameters", "_class_path"),
    "task": ("callbacks", _RL_CHECKPOINT_KEY, "run", "task"),
    "policy_obs_size": ("hyper_parameters", "policy_obs_size"),
    "critic_obs_size": ("hyper_parameters", "critic_obs_size"),
    "action_size": ("hyper_parameters", "action_size"),
    "world size": ("callbacks", _RL_CHECKPOINT_KEY, "run", "world_size"),
    # The data module's sizes: the collector's saved state, the staging pool and the replay
    # sidecar are restored into blocks of these sizes.
    "num_envs": ("datamodule_hyper_parameters", "collector", "num_envs"),
    "num_steps": ("datamodule_hyper_parameters", "num_steps"),
    "ring_slots": ("datamodule_hyper_parameters", "ring_slots"),
    "staging_capacity": ("datamodule_hyper_parameters", "staging_capacity"),
    "buffer_size": ("datamodule_hyper_parameters", "buffer_size"),
}
# The RUN_IDENTITY names that are data-module arguments, as they are spelled under data.init_args.
DATA_SIZES = {
    "num_envs": "collector.num_envs",
    "num_steps": "num_steps",
    "ring_slots": "ring_slots",
    "staging_capacity": "staging_capacity",
    "buffer_size": "buffer_size",
}


class CheckpointMismatchError(ValueError):
    """The checkpoint cannot be resumed with this configuration; the message is one line."""


def resolve_checkpoint(fit_config: Namespace) -> Path | None:
    """The file ``fit_config.ckpt_path`` means (``"last"``: the newest ``last*.ckpt`` of the run's
    checkpoint directories), or ``None`` without a ``ckpt_path`` or a matching file.

    Raises:
        CheckpointMismatchError: ``ckpt_path`` names a local file that does not exist.
    """
    ckpt_path = fit_config.get("ckpt_path")
    if ckpt_path is None:
        return None
    if _is_local_path(ckpt_path) and not Path(ckpt_path).is_file():
        raise CheckpointMismatchError(
            f"checkpoint {ckpt_path} does not exist; pass a checkpoint file or --ckpt_path last"
        )
    loggers = _logger_entries(fit_config.trainer.get("logger"))
    run_dir_loggers = [entry for entry in loggers if _has_run_directory(entry)]
    path = _find_last(fit_config, run_dir_loggers) if ckpt_path == "last" else Path(ckpt_path)
    return path if path is not None and path.is_file() else None


def _is_local_path(ckpt_path: str) -> bool:
    # Not one of the names Lightning resolves itself (last, best, hpc, registry[:...]) nor a
    # remote URL, which fsspec opens.
    name = ckpt_path.split(":", 1)[0]
    return name not in ("last", "best", "hpc", "registry") and "://" not in ckpt_path


def read_checkpoint(path: Path) -> dict[str, Any]:
    """Load ``path`` lazily (memory-mapped) on the CPU.

    Raises:
        CheckpointMismatchError: the file is truncated or not a checkpoint; names the path.
    """
    try:
        return torch.load(path, map_location="cpu", mmap=True, weights_only=True)
    except pickle.UnpicklingError as err:
        raise CheckpointMismatchError(
            f"{weights_only_refusal(path, err)}; pass another --ckpt_path"
        ) from None
    except (RuntimeError, EOFError, OSError, ValueError) as err:
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise CheckpointMismatchError(
            f"checkpoint {path} cannot be read (truncated or not a checkpoint: {reason}); "
            "pass another --ckpt_path"
        ) from None


def weights_only_refusal(path: Path, err: pickle.UnpicklingError) -> str:
    """One line for a checkpoint that torch will not load weights-only, naming the offending
    object (not torch's advice to load it with ``weights_only=False``, which runs its code)."""
    # torch names a class it does not allow ("Unsupported global: GLOBAL argparse.Namespace")
    # and a function of a module it blocks ("unsupported GLOBAL posix.system") differently.
    unsupported = re.search(r"[Uu]nsupported (?:global: )?GLOBAL ([\w.]+)", str(err))
    if unsupported is None:
        what = "it holds arbitrary objects"
    else:
        # os.system pickles as posix.system (nt.system on Windows): name it as it is written.
        what = f"it holds {re.sub(r'^(posix|nt)[.]', 'os.', unsupported.group(1))}"
    return (
        f"checkpoint {path} does not load weights-only ({what}), so it was not written by "
        "this trainer"
    )


def check_checkpoint_matches(
    path: Path, checkpoint: dict[str, Any], expected: dict[str, Any]
) -> None:
    """Refuse a checkpoint whose run identity differs from the configuration's.

    Args:
        path: The checkpoint file (named in the message).
        checkpoint: Its contents (:func:`read_checkpoint`).
        expected: Values of :data:`RUN_IDENTITY` names this configuration has; names the
            checkpoint does not record (older checkpoints) are not compared.

    Raises:
        CheckpointMismatchError: one line naming each differing item with both sides.
    """
    differences = []
    for name, value in expected.items():
        saved = _lookup(checkpoint, RUN_IDENTITY[name])
        if saved is not None and value is not None and saved != value:
            differences.append(f"{name} {saved} in the checkpoint, {value} in the config")
    if differences:
        raise CheckpointMismatchError(
            f"checkpoint {path} was written by another configuration: {'; '.join(differences)}"
        )


def _lookup(tree: Any, keys: tuple[str, ...]) -> Any:
    # Dicts by key; saved option records (the data module's ``collector``) by attribute.
    for key in keys:
        tree = tree.get(key) if isinstance(tree, dict) else getattr(tree, key, None)
        if tree is None:
            return None
    return tree


def continue_run_directory(fit_config: Namespace) -> None:
    """Resolve ``fit_config.ckpt_path`` to a file and point the loggers at that run's directory.

    Does nothing without a ``ckpt_path`` or when ``"last"`` matches no file (Lightning then
    warns and starts afresh). Loggers with an explicit ``version`` are left alone.
    """
    path = resolve_checkpoint(fit_config)
    if path is None:
        return
    loggers = _logger_entries(fit_config.trainer.get("logger"))
    fit_config.ckpt_path = str(path)
    versions = _saved_versions(path, loggers)
    for entry, version in zip(loggers, versions, strict=True):
        if _has_run_directory(entry) and entry.init_args.version is None and version is not None:
            entry.init_args.version = version
            log.info("resuming %s into version %r of %s", entry.class_path, version, _root(entry))


def _logger_entries(logger: Any) -> list[Any]:
    if isinstance(logger, list):
        return logger
    if isinstance(logger, Namespace) and "class_path" in logger:
        return [logger]
    return []


def _has_run_directory(entry: Any) -> bool:
    init_args = entry.get("init_args") if isinstance(entry, Namespace) else None
    return init_args is not None and "save_dir" in init_args and "version" in init_args


def _root(entry: Namespace) -> Path:
    # TensorBoardLogger and CSVLogger: <save_dir>/<name>/<version>/...
    name = entry.init_args.get("name")
    return Path(entry.init_args.save_dir) / name if name else Path(entry.init_args.save_dir)


def _find_last(fit_config: Namespace, run_dir_loggers: list[Namespace]) -> Path | None:
    """The newest ``last*.ckpt`` where ModelCheckpoint writes: its ``dirpath`` or
    ``<first logger's root>/<version>/checkpoints``."""
    candidates: list[Path] = []
    for callback in fit_config.trainer.get("callbacks") or []:
        if isinstance(callback, Namespace) and str(callback.get("class_path", "")).endswith(
            _CHECKPOINT_CALLBACKS
        ):
            dirpath = (callback.get("init_args") or {}).get("dirpath")
            if dirpath is not None:
                candidates += Path(dirpath).glob(_LAST_GLOB)
    if run_dir_loggers:
        candidates += _root(run_dir_loggers[0]).glob(f"*/checkpoints/{_LAST_GLOB}")
    return newest(candidates)


def last_checkpoints(root: str | Path) -> list[Path]:
    """Every ``last*.ckpt`` under ``root``, for ``play`` and ``export`` to choose from."""
    return sorted(Path(root).rglob(_LAST_GLOB))


def newest(candidates: Iterable[Path]) -> Path | None:
    """The most recently written of ``candidates``, or ``None``."""
    return max(candidates, key=lambda p: p.stat().st_mtime, default=None)


def _saved_versions(path: Path, loggers: list[Namespace]) -> list[Any]:
    """Logger versions RLCheckpoint saved in the checkpoint; else the version directory the
    checkpoint lies in, for the loggers rooted above it."""
    checkpoint = read_checkpoint(path)
    saved = checkpoint.get("callbacks", {}).get(_RL_CHECKPOINT_KEY, {}).get("logger_versions")
    if saved is not None and len(saved) == len(loggers):
        return list(saved)
    version_dir = path.parent.parent
    return [
        _as_version(version_dir.name)
        if path.parent.name == "checkpoints"
        and _has_run_directory(entry)
        and _root(entry).resolve() == version_dir.parent.resolve()
        else None
        for entry in loggers
    ]


def _as_version(name: str) -> int | str:
    # Lightning names automatic versions "version_<n>"; the logger wants the number back.
    suffix = name.removeprefix("version_")
    return int(suffix) if suffix != name and suffix.isdigit() else name
