"""Built-in tasks by name, task classes by class path, and ``make_env`` to build one.

Task classes are imported only when first built, so listing or building one task never imports
the others (or gymnasium). A task class is called as
``cls(num_envs=num_envs, seed=seed, num_threads=num_threads, **task_kwargs)``; a user's task is
any ``BatchedMujocoEnv`` subclass named by its class path (``my_package.robots.MyRobot``), which
every process imports for itself. Names of the form ``"gym:<EnvId>"`` build a
``unilab_lit.envs.gym_adapter.GymnasiumVectorAdapter(env=env_id, ...)`` around any gymnasium
environment. :class:`unilab_lit.envs.task_spec.TaskSpec` is how configs name a task.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from typing import TYPE_CHECKING, Any

from unilab_lit.class_paths import class_path_suggestion

if TYPE_CHECKING:
    from unilab_lit.envs.base import BatchedMujocoEnv

GYM_PREFIX = "gym:"
# What the trainer passes every task; a task's own arguments never set them.
TRAINER_ARGUMENTS = frozenset({"num_envs", "seed", "num_threads"})

# Built-in name -> "module:attribute", resolved (and cached) on first use.
_REGISTRY: dict[str, type | str] = {
    "CartpoleSwingup": "unilab_lit.envs.cartpole:CartpoleSwingup",
    "HalfCheetah": "unilab_lit.envs.locomotion:HalfCheetah",
    "Hopper": "unilab_lit.envs.locomotion:Hopper",
    "Ant": "unilab_lit.envs.walkers:Ant",
    "Humanoid": "unilab_lit.envs.walkers:Humanoid",
    "QuadrupedJoystick": "unilab_lit.envs.quadruped:QuadrupedJoystick",
    "Go1Joystick": "unilab_lit.envs.robots.go1:Go1Joystick",
    "G1Walk": "unilab_lit.envs.robots.g1:G1Walk",
}


def registered_tasks() -> list[str]:
    """The built-in task names ``make_env`` accepts (besides ``"gym:<EnvId>"`` and class
    paths), sorted."""
    return sorted(_REGISTRY)


def task_class(name: str) -> type:
    """The class ``name`` means: a built-in name, ``"gym:<EnvId>"`` or ``package.module.Class``.

    Raises:
        ValueError: One line: ``name`` is not a built-in name and does not import (naming it
            and the built-in names), or names something that is not a task class.
    """
    if name.startswith(GYM_PREFIX):
        from unilab_lit.envs.gym_adapter import GymnasiumVectorAdapter

        return GymnasiumVectorAdapter
    if name in _REGISTRY:
        return _resolve(name)
    module_name, _, attribute = name.rpartition(".")
    if not module_name:
        raise ValueError(
            f"unknown task {name!r}: built-in tasks are {registered_tasks()}; or give "
            f"'{GYM_PREFIX}<EnvId>' or the class path of your task (package.module.Class)"
        )
    try:
        found = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as err:
        hint = class_path_suggestion(name) or "; is its package installed or on PYTHONPATH?"
        raise ValueError(
            f"task {name!r} cannot be imported ({type(err).__name__}: {err}){hint}"
        ) from None
    _check_task_class(name, found)
    return found


def make_env(
    name: str, num_envs: int, *, seed: int = 0, num_threads: int = 1, **task_kwargs: Any
) -> BatchedMujocoEnv:
    """Build the task ``name`` with ``num_envs`` simulations.

    Args:
        name: A built-in task name, ``"gym:<EnvId>"`` for a gymnasium environment, or the
            class path of a task class.
        num_envs: Number of simulations stepped together.
        seed: Seed of the env's reset noise and timeout stagger.
        num_threads: Threads stepping the physics.
        **task_kwargs: Passed on to the task's constructor (its own typed arguments).

    Raises:
        ValueError: If ``name`` means no task (see :func:`task_class`).
    """
    fixed = {"env": name[len(GYM_PREFIX) :]} if name.startswith(GYM_PREFIX) else {}
    return task_class(name)(
        num_envs=num_envs, seed=seed, num_threads=num_threads, **fixed, **task_kwargs
    )


def _check_task_class(name: str, found: Any) -> None:
    from unilab_lit.envs.base import BatchedMujocoEnv

    # The adapter is a task too; it is looked up, not imported, so that other tasks never
    # import gymnasium (a subclass of it has imported it already).
    adapter = sys.modules.get("unilab_lit.envs.gym_adapter")
    bases = (
        (BatchedMujocoEnv,)
        if adapter is None
        else (BatchedMujocoEnv, adapter.GymnasiumVectorAdapter)
    )
    if not (inspect.isclass(found) and issubclass(found, bases)):
        raise ValueError(
            f"task {name!r} is not a task: {found!r} is not a subclass of "
            "unilab_lit.envs.base.BatchedMujocoEnv"
        )


def _resolve(name: str) -> type:
    entry = _REGISTRY[name]
    if isinstance(entry, str):
        module_name, _, attribute = entry.partition(":")
        entry = getattr(importlib.import_module(module_name), attribute)
        _REGISTRY[name] = entry
    return entry
