"""``unilab_lit.load_policy(path)``: a trained policy to call from one's own code.

``policy = load_policy("runs/.../last.ckpt")`` (a checkpoint), ``load_policy("policy.onnx")`` or
``load_policy("policy.pt2")`` (``python -m unilab_lit.app.export``), then ``actions = policy(obs)``: raw policy observations
in (the normaliser is inside), actions out, as numpy for numpy and as torch for torch,
``[obs_size]`` or ``[N, obs_size]``. A checkpoint acts deterministically unless asked to
sample; an exported file holds the deterministic policy only.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, overload

import numpy as np
import torch

from unilab_lit.app.export import (
    INPUT_NAME,
    METADATA_FILE,
    ONNX_EXTRA_INSTALL,
    PROGRAM_SUFFIX,
)
from unilab_lit.app.trained_run import load_trained_run
from unilab_lit.envs.policy_episodes import policy_actions

_ONNX = ".onnx"


class Policy:
    """Raw policy observations → actions, with the observation normaliser inside.

    Args:
        act: Float32 tensor ``[N, obs_size]`` → tensor ``[N, action_size]``.
        obs_size: Length of one policy observation.
        action_size: Length of one action.
        source: The file the policy was loaded from.
    """

    def __init__(
        self,
        act: Callable[[torch.Tensor], torch.Tensor],
        obs_size: int,
        action_size: int,
        source: Path,
    ) -> None:
        self._act = act
        self.obs_size = obs_size
        self.action_size = action_size
        self.source = source

    @overload
    def __call__(self, obs: np.ndarray) -> np.ndarray: ...
    @overload
    def __call__(self, obs: torch.Tensor) -> torch.Tensor: ...
    def __call__(self, obs: np.ndarray | torch.Tensor) -> np.ndarray | torch.Tensor:
        """The actions for ``obs`` (``[obs_size]`` or ``[N, obs_size]``), of the same kind.

        Raises:
            ValueError: If the last dimension is not ``obs_size``.
        """
        as_torch = isinstance(obs, torch.Tensor)
        batch = (
            obs.detach().to("cpu", torch.float32)
            if as_torch
            else torch.from_numpy(np.asarray(obs, dtype=np.float32))
        )
        if batch.ndim not in (1, 2) or batch.shape[-1] != self.obs_size:
            raise ValueError(
                f"obs must be [{self.obs_size}] or [N, {self.obs_size}], got {tuple(batch.shape)}"
            )
        with torch.no_grad():
            actions = self._act(batch.reshape(-1, self.obs_size)).reshape(
                *batch.shape[:-1], self.action_size
            )
        return actions.to(obs.device) if as_torch else actions.numpy()

    def __repr__(self) -> str:
        return f"Policy({str(self.source)!r}, obs_size={self.obs_size}, action_size={self.action_size})"


def load_policy(path: str | Path, deterministic: bool = True) -> Policy:
    """The policy of a checkpoint or of an exported file (ONNX or ExportedProgram).

    Args:
        path: A Lightning checkpoint of a run (``.ckpt``) or a file written by
            ``python -m unilab_lit.app.export`` (``.onnx`` or ``.pt2``).
        deterministic: The deterministic action (as ``play`` and the export); ``False`` samples
            as the collector does (checkpoints only).

    Raises:
        RunLoadError: If a checkpoint cannot be rebuilt into its run.
        ValueError: If ``deterministic=False`` is asked of an exported file.
        RuntimeError: If an ONNX file is given and ``onnxruntime`` is missing (one line naming
            the ``onnx`` extra).
    """
    path = Path(path)
    if path.suffix in (_ONNX, PROGRAM_SUFFIX):
        if not deterministic:
            raise ValueError(
                f"{str(path)!r} holds the deterministic policy only; load a checkpoint to sample"
            )
        return _onnx_policy(path) if path.suffix == _ONNX else _program_policy(path)
    run = load_trained_run(path)
    model = run.model
    return Policy(
        policy_actions(model, deterministic),
        obs_size=model.obs_normalizer.size,
        action_size=model.hparams.action_size,
        source=run.checkpoint,
    )


def _onnx_policy(path: Path) -> Policy:
    try:
        import onnxruntime
    except ImportError as err:
        raise RuntimeError(
            f"loading {str(path)!r} needs onnxruntime, which the onnx extra brings: "
            f"{ONNX_EXTRA_INSTALL}"
        ) from err
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    metadata: dict[str, Any] = session.get_modelmeta().custom_metadata_map

    def act(obs: torch.Tensor) -> torch.Tensor:
        (actions,) = session.run(None, {INPUT_NAME: obs.numpy()})
        return torch.from_numpy(actions)

    return Policy(
        act,
        obs_size=int(json.loads(metadata["obs_size"])),
        action_size=int(json.loads(metadata["action_size"])),
        source=path,
    )


def _program_policy(path: Path) -> Policy:
    extra = {METADATA_FILE: ""}
    module = torch.export.load(path, extra_files=extra).module()
    metadata = json.loads(extra[METADATA_FILE])
    return Policy(
        module, obs_size=metadata["obs_size"], action_size=metadata["action_size"], source=path
    )
