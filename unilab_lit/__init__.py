"""unilab_lit: Lightning-native asynchronous RL on batched MuJoCo."""

from unilab_lit.gl_backend import choose_headless_backend

# Before any submodule imports mujoco, which fixes its GL backend on import (see gl_backend).
choose_headless_backend()

__all__ = ["load_policy"]


def __getattr__(name: str):
    # Lazily: `import unilab_lit` (every collector child does) stays free of Lightning and the app.
    if name == "load_policy":
        from unilab_lit.app.policy import load_policy

        return load_policy
    raise AttributeError(f"module 'unilab_lit' has no attribute {name!r}")
