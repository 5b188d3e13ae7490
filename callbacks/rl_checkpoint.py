"""Puts what Lightning's checkpoint lacks for an exact RL resume into it: RNG states and the replay."""

from __future__ import annotations

import logging
import pickle
import random
import shutil
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from typing_extensions import override

from unilab_lit import distributed
from unilab_lit.collector.link import collector_link
from unilab_lit.ipc.budget import MemoryBudgetError, format_bytes
from unilab_lit.ipc.reclaim import remove_dead_writers_files
from unilab_lit.ipc.replay_sidecar import (
    ReplaySidecarError,
    load_replay,
    read_identity,
    save_replay,
)
from unilab_lit.ipc.replay_storage import ReplayStorage
from unilab_lit.validation import check_arg

log = logging.getLogger(__name__)

_FLOAT32_BYTES = 4  # replay rows are packed float32


def _sidecar_prefix(rank: int | str | None = None) -> str:
    # Under DDP every rank saves its own replay shard: "replay-rank<r>-step=<n>.bin"; ``rank``
    # is this process's unless given ("*" globs every rank's).
    if distributed.is_distributed():
        return f"replay-rank{distributed.global_rank() if rank is None else rank}"
    return "replay"


def _sidecar_name(step: int) -> str:
    return f"{_sidecar_prefix()}-step={step}.bin"


def _sidecar_step(path: Path) -> int:
    return int(path.stem.split("=")[1])


class RLCheckpoint(Callback):
    """Makes ``fit --ckpt_path`` continue a run as if it had never stopped; use with ``ModelCheckpoint``.

    Lightning's checkpoint already holds the module (networks, target networks, normaliser
    buffers, counters), the optimiser states (learning rates included, so APPO's adaptive-KL
    rate), the loop counters, every callback's ``state_dict`` and the data module's
    ``state_dict`` (env-step counter and the collector's env, observation and RNG state). It
    does not hold the process's random number generators or a replay buffer. This callback adds:

    - the states of python's ``random``, numpy's global generator and torch's (CPU and every
      initialised CUDA device), put back in ``on_train_start``, right before the resumed run's
      first iteration, so it draws what the uninterrupted run would have drawn (minibatch
      orders, target-policy noise). Without them ``seed_everything`` restarts every stream.
    - with ``save_replay``, the data module's ``replay`` as a sidecar file
      ``replay-step=<global_step>.bin`` in ``replay_dir`` (under DDP one per rank,
      ``replay-rank<r>-step=<global_step>.bin``), written in chunks straight from
      shared memory (peak memory does not grow by the buffer's size) and loaded back into the
      new run's replay before the collector writes into it. Checkpoints of one step of one
      run share one sidecar; the ``keep_replays`` newest are kept, and a sidecar that no
      checkpoint on disk names (its checkpoint was pruned, or a stop fell between the two
      writes) is removed whatever ``keep_replays`` says: before each new sidecar is written,
      at the end of ``fit`` and on an exception. A sidecar carries its run's
      id (one per ``fit``, the same on every rank) and step, and so does the checkpoint's
      record of it: a run that reaches step K writes its own step-K sidecar over whatever an
      earlier, killed run left under that name, and a resume refuses a sidecar whose id is
      not the checkpoint's.
    - on start, the partial sidecars that killed runs left in ``replay_dir`` are removed
      (:func:`~unilab_lit.ipc.reclaim.remove_dead_writers_files`).
    - the loggers' versions, which ``cli.py fit --ckpt_path`` uses to continue writing into
      the same run directory.
    - the run's identity (the data module's task, the world size), which ``cli.py fit
      --ckpt_path`` compares with the configuration before it starts (``unilab_lit.app.resume``).

    Args:
        save_replay: Save and restore the data module's ``replay`` (off-policy data modules).
        replay_dir: Directory of the sidecars; ``None`` is ``<trainer.log_dir>/checkpoints``,
            where ``ModelCheckpoint`` writes by default.
        keep_replays: Sidecars kept, newest first (>= 1), of those that a checkpoint names. A
            checkpoint whose sidecar was deleted cannot be resumed with its replay.

    Raises:
        ValueError: if ``keep_replays`` is smaller than 1.
        ReplaySidecarError: on resume, if the checkpoint's sidecar is gone, is another run's or
            does not fit this run's replay (one line naming both files).
    """

    def __init__(
        self, save_replay: bool = False, replay_dir: str | None = None, keep_replays: int = 2
    ) -> None:
        check_arg(keep_replays >= 1, "RLCheckpoint.keep_replays", keep_replays, ">= 1")
        self.save_replay = save_replay
        self.replay_dir = replay_dir
        self.keep_replays = keep_replays
        self._rng_to_restore: dict[str, Any] | None = None
        # This fit's id in its sidecars, and the record of the sidecar it wrote or resumed from.
        self._run_id = uuid.uuid4().hex
        self._sidecar: dict[str, Any] | None = None
        # Found once per fit on every rank: trainer.log_dir is a collective under DDP, and rank 0
        # alone prunes sidecars (a hook on one rank must not call it).
        self._directory: Path | None = None

    @override
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        # Every rank's sidecar of one checkpoint carries the same id: rank 0's.
        self._run_id = trainer.strategy.broadcast(self._run_id)
        self._directory = None
        if self.save_replay:
            self._sidecar_dir(trainer)
        if self.save_replay and collector_link(trainer).transport.replay is None:
            raise ValueError(
                "RLCheckpoint(save_replay=True) needs a data module with a `replay` storage "
                f"(e.g. ReplayDataModule); got {type(trainer.datamodule).__name__}"
            )
        if self.save_replay and stage == "fit":
            remove_dead_writers_files(self._sidecar_dir(trainer))
            self._check_sidecar_disk(
                collector_link(trainer).transport.replay, self._sidecar_dir(trainer)
            )

    def _check_sidecar_disk(self, replay: Any, directory: Path) -> None:
        """Refuse a run whose replay sidecars cannot fit on the checkpoint disk.

        ``keep_replays`` sidecars are kept, and one more exists while the newest is written.

        Raises:
            MemoryBudgetError: one line with both sizes and the keys that shrink them.
        """
        needed = (self.keep_replays + 1) * replay.capacity * replay.width * _FLOAT32_BYTES
        existing = directory
        while not existing.exists():
            existing = existing.parent
        free = shutil.disk_usage(existing).free
        if needed > free:
            raise MemoryBudgetError(
                f"replay sidecars need {format_bytes(needed)} on disk ({self.keep_replays + 1} "
                f"x the replay) but {existing} has {format_bytes(free)} free; shrink: "
                "data.init_args.buffer_size, data.init_args.num_envs, keep_replays, or set "
                "save_replay: false"
            )

    @override
    def state_dict(self) -> dict[str, Any]:
        return {"rng": _rng_states()}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # A checkpoint without RNG states leaves the generators as seed_everything set them.
        self._rng_to_restore = state_dict.get("rng")

    @override
    def on_save_checkpoint(
        self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        own = checkpoint["callbacks"][self.state_key]
        own["logger_versions"] = [_version(logger) for logger in trainer.loggers]
        own["run"] = {
            "task": collector_link(trainer).options.task.class_path,
            "world_size": trainer.world_size,
        }
        if self.save_replay:
            own["replay_file"] = self._save_replay_sidecar(trainer)

    @override
    def on_load_checkpoint(
        self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        own = checkpoint.get("callbacks", {}).get(self.state_key, {})
        if self.save_replay:
            self._load_replay_sidecar(trainer, own.get("replay_file"))

    @override
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._rng_to_restore is not None:
            _set_rng_states(self._rng_to_restore)
            self._rng_to_restore = None

    @override
    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        # After every callback's on_train_end: the last checkpoint is written, pruning is done.
        if self.save_replay:
            self._remove_orphan_sidecars(trainer)

    @override
    def on_exception(
        self, trainer: Trainer, pl_module: LightningModule, exception: BaseException
    ) -> None:
        # A second Ctrl-C can land between a sidecar's write and its checkpoint's.
        if self.save_replay:
            self._remove_orphan_sidecars(trainer)

    # ------------------------------------------------------------------------------ replay
    def _sidecar_dir(self, trainer: Trainer) -> Path:
        if self._directory is None:
            self._directory = (
                Path(self.replay_dir)
                if self.replay_dir is not None
                else Path(trainer.log_dir or trainer.default_root_dir) / "checkpoints"
            )
        return self._directory

    def _save_replay_sidecar(self, trainer: Trainer) -> dict[str, Any]:
        step = trainer.global_step
        # Checkpoints of one step (``last`` and a periodic one) hold the same replay; so does
        # one at the step this run resumed from, before it trained. Unless it was removed as an
        # orphan in between (on an exception, before ``last`` was written at the stop step).
        if (
            self._sidecar is not None
            and self._sidecar["step"] == step
            and Path(self._sidecar["path"]).exists()
        ):
            return self._sidecar
        # Other ranks may be writing their shards of this step already.
        self._remove_orphan_sidecars(trainer, writing_step=step)
        directory = self._sidecar_dir(trainer)
        path = directory / _sidecar_name(step)
        identity = {"run_id": self._run_id, "step": step}
        directory.mkdir(parents=True, exist_ok=True)
        # Replaces a sidecar of this name that a killed run left without its checkpoint.
        save_replay(_replay(trainer), path, identity)
        log.info("replay buffer saved to %s", path)
        self._delete_old_sidecars(directory)
        self._sidecar = {"name": path.name, "path": str(path.resolve()), **identity}
        return self._sidecar

    def _delete_old_sidecars(self, directory: Path) -> None:
        sidecars = sorted(directory.glob(f"{_sidecar_prefix()}-step=*.bin"), key=_sidecar_step)
        for old in sidecars[: -self.keep_replays]:
            old.unlink()

    def _remove_orphan_sidecars(self, trainer: Trainer, writing_step: int | None = None) -> None:
        """Remove every rank's sidecars of the steps that no checkpoint on disk names.

        Rank 0 alone decides: it alone writes checkpoints, and on several nodes it alone may see
        them. ``writing_step``'s sidecars are kept: their checkpoint is being written.
        """
        if not trainer.is_global_zero:
            return
        named = self._steps_named_by_checkpoints(trainer)
        if named is None:
            return
        for path in self._sidecar_dir(trainer).glob(f"{_sidecar_prefix('*')}-step=*.bin"):
            step = _sidecar_step(path)
            if step not in named and step != writing_step:
                path.unlink(missing_ok=True)
                log.info("removed replay sidecar %s: no checkpoint names it", path)

    def _steps_named_by_checkpoints(self, trainer: Trainer) -> set[int] | None:
        """The sidecar steps that the checkpoints on disk name; ``None`` if one is unreadable."""
        # Lightning's public record of the checkpoint callbacks: their directories, where the
        # sidecars may not be (``replay_dir``).
        directories = {self._sidecar_dir(trainer)} | {
            Path(callback.dirpath) for callback in trainer.checkpoint_callbacks if callback.dirpath
        }
        steps = set()
        for path in {path for directory in directories for path in directory.glob("*.ckpt")}:
            try:
                # mmap: the tensors are not read.
                checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
            except (OSError, RuntimeError, EOFError, pickle.UnpicklingError) as error:
                log.warning(
                    "no replay sidecar removed: checkpoint %s is unreadable (%s)", path, error
                )
                return None
            record = checkpoint.get("callbacks", {}).get(self.state_key, {}).get("replay_file")
            if record is not None:
                steps.add(
                    record["step"] if "step" in record else _sidecar_step(Path(record["name"]))
                )
        return steps

    def _load_replay_sidecar(self, trainer: Trainer, replay_file: dict[str, Any] | None) -> None:
        if replay_file is None:
            raise ReplaySidecarError(
                f"RLCheckpoint(save_replay=True): checkpoint {trainer.ckpt_path} holds no replay "
                "buffer (it was written without save_replay); resume with save_replay=false"
            )
        # This rank's shard of the checkpoint (the record is rank 0's).
        name = _sidecar_name(replay_file["step"]) if "step" in replay_file else replay_file["name"]
        # Next to the checkpoint first: a run directory that was moved still resumes.
        candidates = [Path(replay_file["path"]).with_name(name)]
        if trainer.ckpt_path is not None:
            candidates.insert(0, Path(trainer.ckpt_path).parent / name)
        for path in candidates:
            if path.exists():
                self._check_identity(trainer, path, replay_file)
                load_replay(_replay(trainer), path)
                log.info("replay buffer restored from %s", path)
                return
        raise ReplaySidecarError(
            f"the replay sidecar of checkpoint {trainer.ckpt_path} is gone (looked for "
            f"{[str(p) for p in candidates]}); only the newest keep_replays={self.keep_replays} "
            "are kept"
        )

    def _check_identity(self, trainer: Trainer, path: Path, replay_file: dict[str, Any]) -> None:
        if "run_id" not in replay_file:
            log.warning(
                "checkpoint %s does not name its replay sidecar's run (written by an older "
                "version); %s is loaded unchecked",
                trainer.ckpt_path,
                path,
            )
            return
        expected = {"run_id": replay_file["run_id"], "step": replay_file["step"]}
        found = read_identity(path)
        if found != expected:
            written = "no run id" if not found else f"run {found['run_id']} at step {found['step']}"
            raise ReplaySidecarError(
                f"replay sidecar {path} is not the one of checkpoint {trainer.ckpt_path} (it "
                f"holds {written}, the checkpoint names run {expected['run_id']} at step "
                f"{expected['step']}; a killed run left it): resume from another checkpoint, or "
                "with save_replay=false to start with an empty replay"
            )
        self._sidecar = {**replay_file, "name": path.name, "path": str(path.resolve())}


def _replay(trainer: Trainer) -> ReplayStorage:
    replay = collector_link(trainer).transport.replay
    assert replay is not None  # checked in setup
    return replay


def _version(logger: Any) -> str | int | None:
    # Loggers without run directories (e.g. a custom one) have no version to continue.
    return getattr(logger, "version", None)


def _rng_states() -> dict[str, Any]:
    # numpy's key array as a tensor: Lightning loads checkpoints with weights_only=True.
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    states: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": (kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, cached),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["torch_cuda"] = torch.cuda.get_rng_state_all()
    return states


def _set_rng_states(states: dict[str, Any]) -> None:
    random.setstate(states["python"])
    kind, keys, pos, has_gauss, cached = states["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(states["torch"])
    if "torch_cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["torch_cuda"])
