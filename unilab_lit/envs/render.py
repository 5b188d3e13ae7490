"""Offscreen RGB frames of single simulations of a ``mujoco.batch.Batch``, without a display."""

from __future__ import annotations

import copy
import os
from collections.abc import Sequence

import mujoco
import numpy as np
from mujoco import batch as mj_batch

from unilab_lit.validation import check_arg


class BatchFrameRenderer:
    """Renders chosen simulations of a batch with MuJoCo's offscreen renderer.

    The GL backend is the one ``MUJOCO_GL`` named when ``mujoco`` was imported (``unilab_lit``
    picks EGL, else OSMesa, on import; see :mod:`unilab_lit.gl_backend`). Each frame copies one
    simulation's state into a scratch ``MjData`` and runs ``mj_forward`` there, so rendering
    never touches the batch.

    Args:
        model: The model the batch simulates.
        batch: The batch whose simulations are drawn.
        width: Frame width in pixels (>= 1).
        height: Frame height in pixels (>= 1).
        camera: Name of a model camera; ``None`` takes the model's first camera, or, in a model
            without one, a free camera that tracks body 1 (the robot's root body).

    Raises:
        ValueError: If a size is not positive or ``camera`` names no camera of the model.
        RuntimeError: If no OpenGL context can be created (the message says what to install).
    """

    def __init__(
        self,
        model: mujoco.MjModel,
        batch: mj_batch.Batch,
        width: int,
        height: int,
        camera: str | None = None,
    ) -> None:
        check_arg(width >= 1, "width", width, ">= 1")
        check_arg(height >= 1, "height", height, ">= 1")
        # A copy, so that raising the offscreen buffer to the frame size leaves the env's model alone.
        self._model = copy.copy(model)
        self._model.vis.global_.offwidth = max(self._model.vis.global_.offwidth, width)
        self._model.vis.global_.offheight = max(self._model.vis.global_.offheight, height)
        # MuJoCo collides with every plane as infinite but draws it at its size: a walker that
        # outruns the floor (gymnasium's 40 m for HalfCheetah) would run on into a grey void.
        _infinite_planes(self._model)
        self._camera = self._resolve_camera(camera)
        self._batch = batch
        self._data = mujoco.MjData(self._model)
        self.size = (width, height)
        try:
            self._renderer = mujoco.Renderer(self._model, height, width)
        except Exception as err:
            raise RuntimeError(
                f"cannot render offscreen with MUJOCO_GL={os.environ.get('MUJOCO_GL')!r} ({err}); "
                "install EGL (apt-get install libegl1 libgl1-mesa-dri) or OSMesa (libosmesa6) "
                "and set MUJOCO_GL=egl or MUJOCO_GL=osmesa"
            ) from err
        # Under software GL (Mesa's llvmpipe, the 2-core machine's only GL) shadows and
        # reflections cost three quarters of a frame: a 320x240 Go1 frame took 0.65 s of wall
        # clock with them and 0.15 s without (bench: docs/play.md). Frames are drawn without.
        for flag in (mujoco.mjtRndFlag.mjRND_SHADOW, mujoco.mjtRndFlag.mjRND_REFLECTION):
            self._renderer.scene.flags[flag] = False

    def render(self, env_ids: Sequence[int]) -> np.ndarray:
        """Frames ``[len(env_ids), height, width, 3]`` (uint8) of the simulations' current state."""
        width, height = self.size
        frames = np.empty((len(env_ids), height, width, 3), dtype=np.uint8)
        for row, sim in enumerate(env_ids):
            self._batch.get_data(int(sim), self._data)
            mujoco.mj_forward(self._model, self._data)
            self._renderer.update_scene(self._data, camera=self._camera)
            frames[row] = self._renderer.render()
        return frames

    def close(self) -> None:
        """Release the GL context."""
        self._renderer.close()

    def _resolve_camera(self, camera: str | None) -> str | int | mujoco.MjvCamera:
        model = self._model
        if camera is not None:
            if mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, camera) < 0:
                names = [model.camera(i).name for i in range(model.ncam)]
                raise ValueError(f"camera {camera!r} is not in the model; its cameras: {names}")
            return camera
        if model.ncam > 0:
            return model.camera(0).name or 0
        tracking = mujoco.MjvCamera()
        tracking.type = mujoco.mjtCamera.mjCAMERA_TRACKING
        tracking.trackbodyid = min(1, model.nbody - 1)
        tracking.distance = 2.5 * float(model.stat.extent)
        tracking.elevation = -20.0
        tracking.azimuth = 90.0
        return tracking


class CachedFrameRenderer:
    """One :class:`BatchFrameRenderer` of a batch, kept while the size and camera stay the same.

    Nothing is created before the first :meth:`render` (a GL context costs time and memory that
    an env which is only stepped never needs).

    Args:
        model: The model the batch simulates.
        batch: The batch whose simulations are drawn.
    """

    def __init__(self, model: mujoco.MjModel, batch: mj_batch.Batch) -> None:
        self._model = model
        self._batch = batch
        self._renderer: BatchFrameRenderer | None = None
        self._key: tuple[int, int, str | None] | None = None

    def render(
        self, env_ids: Sequence[int], width: int, height: int, camera: str | None
    ) -> np.ndarray:
        """Frames ``[len(env_ids), height, width, 3]`` (uint8); see :class:`BatchFrameRenderer`."""
        key = (width, height, camera)
        if self._renderer is None or self._key != key:
            self.close()
            self._renderer = BatchFrameRenderer(self._model, self._batch, width, height, camera)
            self._key = key
        return self._renderer.render(env_ids)

    def close(self) -> None:
        """Release the GL context, if one was created; the next :meth:`render` makes a new one."""
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None


def _infinite_planes(model: mujoco.MjModel) -> None:
    """Draw every finite plane of ``model`` infinite, its checker at the size it had.

    A zero half-size draws a plane infinite; a non-uniform material repeats its texture per
    plane, so its repeat count becomes the same count per metre.
    """
    rescaled: set[int] = set()
    for geom in np.flatnonzero(model.geom_type == mujoco.mjtGeom.mjGEOM_PLANE):
        size = model.geom_size[geom, :2].copy()
        if (size <= 0).any():
            continue
        model.geom_size[geom, :2] = 0.0
        material = int(model.geom_matid[geom])
        if material >= 0 and not model.mat_texuniform[material] and material not in rescaled:
            model.mat_texrepeat[material] = model.mat_texrepeat[material] / (2 * size)
            rescaled.add(material)
