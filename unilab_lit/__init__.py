"""unilab_lit: Lightning-native asynchronous RL on batched MuJoCo."""

from unilab_lit.gl_backend import choose_headless_backend

# Before any submodule imports mujoco, which fixes its GL backend on import (see gl_backend).
choose_headless_backend()
