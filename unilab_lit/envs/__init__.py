"""Registry of batched tasks by name, and ``make_env`` to build one.

Task classes are imported only when first built, so listing or building one task never imports
the others (or gymnasium). A task class is called as
``cls(num_envs, seed=seed, num_threads=num_threads, **task_kwargs)``.
Names of the form ``"gym:<EnvId>"`` build a
``unilab_lit.envs.gym_adapter.GymnasiumVectorAdapter(env_id, num_envs, seed=..., num_threads=...,
**task_kwargs)`` around any gymnasium environment.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from unilab_lit.validation import check_arg

if TYPE_CHECKING:
    from unilab_lit.envs.base import BatchedMujocoEnv

GYM_PREFIX = "gym:"

# Name -> class, or "module:attribute" resolved (and cached) on first use.
_REGISTRY: dict[str, type | str] = {
    "CartpoleSwingup": "unilab_lit.envs.cartpole:CartpoleSwingup",
    "HalfCheetah": "unilab_lit.envs.locomotion:HalfCheetah",
    "Hopper": "unilab_lit.envs.locomotion:Hopper",
    "Ant": "unilab_lit.envs.walkers:Ant",
    "Humanoid": "unilab_lit.envs.walkers:Humanoid",
    "QuadrupedJoystick": "unilab_lit.envs.quadruped:QuadrupedJoystick",
}


def register_task(name: str, cls: type | str) -> None:
    """Register a task class (or its ``"module:attribute"`` path) under ``name``.

    Raises:
        ValueError: If ``name`` is empty, uses the ``"gym:"`` prefix or is taken by another class.
    """
    check_arg(
        bool(name) and not name.startswith(GYM_PREFIX),
        "register_task: name",
        name,
        f"non-empty and not start with {GYM_PREFIX!r}",
    )
    existing = _REGISTRY.get(name)
    if existing is not None and existing is not cls and _resolve(name) is not cls:
        raise ValueError(f"register_task: {name!r} is already registered to {existing!r}")
    _REGISTRY[name] = cls


def registered_tasks() -> list[str]:
    """Names ``make_env`` accepts (besides ``"gym:<EnvId>"``), sorted."""
    return sorted(_REGISTRY)


def task_class(name: str) -> type:
    """The class registered under ``name``.

    Raises:
        KeyError: If ``name`` is not registered; the message lists the registered names.
    """
    if name not in _REGISTRY:
        raise KeyError(
            f"unknown task {name!r}; registered tasks: {registered_tasks()} "
            f"(or '{GYM_PREFIX}<EnvId>' for a gymnasium environment)"
        )
    return _resolve(name)


def make_env(
    name: str, num_envs: int, *, seed: int = 0, num_threads: int = 1, **task_kwargs: Any
) -> BatchedMujocoEnv:
    """Build the task ``name`` with ``num_envs`` simulations.

    Args:
        name: A registered task name, or ``"gym:<EnvId>"`` for a gymnasium environment.
        num_envs: Number of simulations stepped together.
        seed: Seed of the env's reset noise and timeout stagger.
        num_threads: Threads stepping the physics.
        **task_kwargs: Passed on to the task's constructor (its own typed arguments).

    Raises:
        KeyError: If ``name`` is not registered; the message lists the registered names.
    """
    if name.startswith(GYM_PREFIX):
        from unilab_lit.envs.gym_adapter import GymnasiumVectorAdapter

        return GymnasiumVectorAdapter(
            name[len(GYM_PREFIX) :], num_envs, seed=seed, num_threads=num_threads, **task_kwargs
        )
    return task_class(name)(num_envs, seed=seed, num_threads=num_threads, **task_kwargs)


def _resolve(name: str) -> type:
    entry = _REGISTRY[name]
    if isinstance(entry, str):
        module_name, _, attribute = entry.partition(":")
        entry = getattr(importlib.import_module(module_name), attribute)
        _REGISTRY[name] = entry
    return entry
