"""A task as a class path with typed arguments: checked when the config is parsed, rebuilt anywhere.

In YAML, ``data.init_args.collector.task`` is a built-in name (``CartpoleSwingup``), a gymnasium
env (``gym:Pendulum-v1``) or ``{class_path: my_package.robots.MyRobot, init_args: {...}}``.
jsonargparse hands the value to :meth:`TaskSpec.from_config` (a registered type), which imports
the class and checks ``init_args`` against its constructor the way LightningCLI checks a model's,
so a misspelled or mistyped argument fails before anything starts, and fills in the defaults, so
``--print_config`` shows every argument. The spec holds strings and plain values only: it is
pickled into the collector child, saved in checkpoints, and rebuilt by the evaluator, ``play``
and ``export`` with :meth:`TaskSpec.build`. The env itself is built only where it runs.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jsonargparse.typing import register_type

from unilab_lit.envs import GYM_PREFIX, TRAINER_ARGUMENTS, make_env, task_class

if TYPE_CHECKING:
    from unilab_lit.envs.base import BatchedMujocoEnv

# A task argument of this name is an MJCF file: a relative path is taken relative to the config
# file that names it (jsonargparse parses a config file from inside its directory).
MJCF_ARGUMENT = "xml_file"
_SPEC_KEYS = ("class_path", "init_args")


class TaskSpec:
    """Which task to build and with which constructor arguments.

    Args:
        class_path: ``package.module.Class`` of a ``BatchedMujocoEnv`` subclass (or of the
            gymnasium adapter), a built-in name (``unilab_lit.envs.registered_tasks()``) or
            ``"gym:<EnvId>"``.
        init_args: The task's own constructor arguments; the trainer passes ``num_envs``,
            ``seed`` and ``num_threads`` itself.

    An argument typed as a dataclass (e.g. ``randomization: DomainRandomization``) is held as
    the mapping of its fields, as YAML writes it, and built into the dataclass by :meth:`build`.

    Raises:
        ValueError: If ``init_args`` names an argument the trainer passes.
    """

    def __init__(self, class_path: str, init_args: Mapping[str, Any] | None = None) -> None:
        init_args = {
            key: dataclasses.asdict(value) if _is_dataclass_instance(value) else value
            for key, value in (init_args or {}).items()
        }
        reserved = sorted(TRAINER_ARGUMENTS & set(init_args))
        if reserved:
            raise ValueError(
                f"task {class_path!r}: init_args must not set {reserved}; the trainer passes "
                "them (data.init_args.collector.num_envs, seed, physics_threads)"
            )
        self.class_path = class_path
        self.init_args = init_args

    def build(self, num_envs: int, *, seed: int = 0, num_threads: int = 1) -> BatchedMujocoEnv:
        """The task with ``num_envs`` simulations (see :func:`unilab_lit.envs.make_env`)."""
        init_args = _dataclass_arguments(task_class(self.class_path), self.init_args)
        return make_env(self.class_path, num_envs, seed=seed, num_threads=num_threads, **init_args)

    def with_frames(self) -> TaskSpec:
        """This task, built so that ``render`` returns frames.

        gymnasium envs render only in the ``render_mode`` they were made with; every other
        task renders as it is.
        """
        if not _is_gym_adapter(task_class(self.class_path)):
            return self
        env_kwargs = {**(self.init_args.get("env_kwargs") or {}), "render_mode": "rgb_array"}
        return TaskSpec(self.class_path, {**self.init_args, "env_kwargs": env_kwargs})

    def to_config(self) -> dict[str, Any]:
        """``{class_path, init_args}``, as YAML, checkpoints and ``--print_config`` show it."""
        return {"class_path": self.class_path, "init_args": dict(self.init_args)}

    @classmethod
    def of(cls, value: TaskSpec | str | Mapping[str, Any]) -> TaskSpec:
        """``value`` as a spec, unchecked: a spec, a name or class path, or ``{class_path,
        init_args}`` (a checkpoint's or config file's). Building it checks it."""
        if isinstance(value, TaskSpec):
            return value
        if isinstance(value, str):
            return cls(value)
        return cls(value["class_path"], value.get("init_args"))

    @classmethod
    def from_config(cls, value: Any) -> TaskSpec:
        """The spec a config value means, with its class imported and its arguments checked.

        Raises:
            ValueError: One line: the value is neither a name nor ``{class_path, init_args}``,
                the class does not import or is not a task, or an argument is unknown or of
                the wrong type (naming the argument and the closest valid one).
        """
        if isinstance(value, TaskSpec):
            value = value.to_config()
        if isinstance(value, str):
            value = {"class_path": value}
        if (
            not isinstance(value, Mapping)
            or "class_path" not in value
            or set(value) - {*_SPEC_KEYS}
        ):
            raise ValueError(
                "a task is a name (CartpoleSwingup, gym:<EnvId>) or {class_path: "
                f"package.module.Class, init_args: {{...}}}}, got {value!r}"
            )
        class_path = str(value["class_path"])
        task = task_class(class_path)
        if class_path.startswith(GYM_PREFIX):
            # task_class imported the adapter: gymnasium is loaded for gym tasks only.
            from unilab_lit.envs.gym_adapter import check_env_id

            check_env_id(class_path[len(GYM_PREFIX) :])
        init_args = _checked_arguments(task, class_path, dict(value.get("init_args") or {}))
        mjcf = init_args.get(MJCF_ARGUMENT)
        if isinstance(mjcf, str) and not os.path.isabs(mjcf) and Path(mjcf).is_file():
            init_args[MJCF_ARGUMENT] = os.path.abspath(mjcf)
        return cls(class_path, init_args)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TaskSpec):
            return NotImplemented
        return self.to_config() == other.to_config()

    __hash__ = None  # init_args is a dict

    def __repr__(self) -> str:
        return f"TaskSpec({self.class_path!r}, {self.init_args!r})"


def _checked_arguments(task: type, class_path: str, init_args: dict[str, Any]) -> dict[str, Any]:
    """``init_args`` checked against ``task``'s constructor, with the defaults filled in."""
    from jsonargparse import ArgumentParser

    from unilab_lit.class_paths import closest
    from unilab_lit.config_errors import summarize

    skip = set(TRAINER_ARGUMENTS)
    if class_path.startswith(GYM_PREFIX):
        skip.add("env")  # the env id is the name's
    parser = ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(task, skip=skip, fail_untyped=False)
    try:
        parsed = parser.parse_object(init_args)
    except Exception as err:  # jsonargparse reports any bad value as an ArgumentError
        keys = [action.dest for action in parser._actions if action.dest != "help"]
        unknown = sorted(set(init_args) - set(keys))
        if unknown:
            key = unknown[0]
            raise ValueError(
                f"init_args.{key}: {task.__name__} has no argument {key!r}{closest(key, keys)}"
            ) from None
        raise ValueError(f"init_args.{summarize(str(err), keys)}") from None
    return parsed.as_dict()


def _is_dataclass_instance(value: Any) -> bool:
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


def _dataclass_arguments(task: type, init_args: dict[str, Any]) -> dict[str, Any]:
    """``init_args`` with each mapping given for a dataclass-typed argument built into it."""
    try:
        hints = typing.get_type_hints(task.__init__)
    except (NameError, TypeError):  # a user task whose annotations do not resolve: as they are
        return init_args
    built = dict(init_args)
    for key, value in init_args.items():
        if not isinstance(value, Mapping):
            continue
        hint = hints.get(key)
        union = typing.get_origin(hint) in (typing.Union, types.UnionType)
        members = typing.get_args(hint) if union else (hint,)
        classes = [m for m in members if dataclasses.is_dataclass(m) and isinstance(m, type)]
        if len(classes) == 1:
            if set(value) == {"class_path", "init_args"}:
                # The CLI's parser hands a dataclass value over in its class-path form.
                value = value["init_args"]
            built[key] = classes[0](**value)
    return built


def _is_gym_adapter(task: type) -> bool:
    # Looked up, not imported: a task that is not the adapter never imports gymnasium.
    adapter = sys.modules.get("unilab_lit.envs.gym_adapter")
    return adapter is not None and issubclass(task, adapter.GymnasiumVectorAdapter)


# jsonargparse parses a config's ``task`` with from_config and dumps it with to_config.
register_type(TaskSpec, TaskSpec.to_config, TaskSpec.from_config)
