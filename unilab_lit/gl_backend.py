"""Choose MuJoCo's OpenGL backend before MuJoCo is imported, so frames render without a display.

MuJoCo binds its offscreen GL context class when ``mujoco`` is first imported, from the
``MUJOCO_GL`` environment variable; its default (GLFW) needs a display. ``unilab_lit`` calls
:func:`choose_headless_backend` on import, before any of its modules imports ``mujoco``.
"""

from __future__ import annotations

import ctypes
import os

# Backends in order of preference, each with the shared libraries that provide it: EGL renders
# on a GPU where there is one (and through Mesa's software rasteriser elsewhere); OSMesa is the
# pure-software fallback.
_BACKENDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("egl", ("libEGL.so.1", "libEGL.so")),
    ("osmesa", ("libOSMesa.so.8", "libOSMesa.so.6", "libOSMesa.so")),
)


def choose_headless_backend() -> str | None:
    """Set ``MUJOCO_GL`` to the first headless backend whose library loads, unless it is set.

    A ``MUJOCO_GL`` the user set (``glfw``, ``egl``, ``osmesa``, ...) is kept.

    Returns:
        The value ``MUJOCO_GL`` now has, or ``None`` when it is unset and no headless library
        loads (rendering then needs ``apt-get install libegl1 libgl1-mesa-dri`` or
        ``libosmesa6``).
    """
    chosen = os.environ.get("MUJOCO_GL")
    if chosen:
        return chosen
    for backend, libraries in _BACKENDS:
        if any(_loads(library) for library in libraries):
            os.environ["MUJOCO_GL"] = backend
            return backend
    return None


def _loads(library: str) -> bool:
    try:
        ctypes.CDLL(library)
    except OSError:
        return False
    return True
