"""Command-line overrides of one argument of the collector's task.

``--data.init_args.collector.task.init_args.<arg>=<value>`` changes one argument of the task that
the config files give, as ``--model.init_args.optimizer.init_args.lr=...`` does for a class-typed
argument. jsonargparse cannot merge it itself for a registered type (:class:`TaskSpec`), so the
CLI rewrites the command line before parsing (:func:`with_task_overrides`).
"""

from __future__ import annotations

import contextlib
import re
from typing import Any

import yaml
from jsonargparse import get_loader
from lightning.pytorch.cli import LightningArgumentParser

from unilab_lit.config_errors import PREFIX
from unilab_lit.envs.task_spec import TaskSpec

# ``--data.init_args.collector.task.init_args.<arg>[.<key>...]`` (``init_args.`` optional, as
# jsonargparse allows for a class path's arguments) and ``...task.class_path``.
_TASK_KEY = "data.init_args.collector.task"
_TASK_OPTION = re.compile(
    r"--data\.(?:init_args\.)?collector\.task\.(?:init_args\.)?(?P<key>[\w.]+)"
)
_PRINT_CONFIG = "--print_config"


class _FlowDumper(yaml.SafeDumper):
    """One-line YAML of a task's arguments: YAML, unlike JSON, spells ``.inf`` and ``.nan``."""


_FlowDumper.add_representer(tuple, _FlowDumper.represent_list)


def _task_override(args: list[str], i: int) -> tuple[str, str, int] | None:
    """(the key under the task, its value, how many arguments it spans) if ``args[i]`` sets one
    argument of the task, else ``None``."""
    option, equals, value = args[i].partition("=")
    match = _TASK_OPTION.fullmatch(option)
    if match is None:
        return None
    if equals:
        return match["key"], value, 1
    if i + 1 < len(args):
        return match["key"], args[i + 1], 2
    return None  # no value: the parser reports it


def _without_print_config(args: list[str]) -> list[str]:
    kept: list[str] = []
    for arg in args:
        if kept and kept[-1] == _PRINT_CONFIG and not arg.startswith("-"):
            continue  # its flags: ``--print_config skip_null``
        kept.append(arg)
    return [arg for arg in kept if arg.partition("=")[0] != _PRINT_CONFIG]


def _task_before(parser: LightningArgumentParser, args: list[str], option: str) -> TaskSpec:
    """The task that ``args`` (config files and arguments before an override) give."""
    try:
        config = parser.parse_args(_without_print_config(args))  # only the last parse prints
    except SystemExit as err:
        reason = str(err.code).removeprefix(PREFIX)
        raise SystemExit(
            f"{PREFIX}{option}: the arguments before it do not parse: {reason}"
        ) from None
    task = config.get(str(config.get("subcommand")), config).get(_TASK_KEY)
    if task is None:
        raise SystemExit(
            f"{PREFIX}{option}: no task before it to change; give the config or task first"
        )
    return task


def _with_key(mapping: Any, names: list[str], value: Any) -> Any:
    """A copy of ``mapping`` with the key path ``names`` set to ``value``. A value in class-path
    form (``{class_path, init_args}``, how the parser holds a dataclass argument) takes the keys
    of its ``init_args``, as jsonargparse's ``--model.lr`` does."""
    if not names:
        return value
    copy = dict(mapping) if isinstance(mapping, dict) else {}
    if "init_args" in copy and names[0] not in ("class_path", "init_args"):
        names = ["init_args", *names]
    copy[names[0]] = _with_key(copy.get(names[0]), names[1:], value)
    return copy


def with_task_overrides(parser: LightningArgumentParser, args: list[str]) -> list[str]:
    """``args`` with the task-argument overrides merged into the task they change.

    ``--data.init_args.collector.task.init_args.<arg>=<value>`` (or a key inside a mapping or
    dataclass argument, ``...randomization.push_velocity=0.3``) changes one argument of the task
    the config files and earlier arguments give. jsonargparse hands a registered type
    (:class:`TaskSpec`) such a key without the value it changes, so the merge happens here: each
    run of overrides becomes, in its place, the whole changed task, which the parser checks as it
    checks a config file's task. It is given as ``--data={init_args: {collector: {task: ...}}}``
    (merged into the data module's arguments): under ``--data.init_args...`` jsonargparse would
    turn the parsed value back into a string with ``str``, and ``None`` into ``'None'``.
    ``...task.class_path=X`` replaces the task, as ``...task=X`` does.
    """
    merged: list[str] = []
    task: dict[str, Any] = {}
    merged_task_at = -1  # where the last merged task is in ``merged``
    i = 0
    while i < len(args):
        override = _task_override(args, i)
        if override is None:
            merged.append(args[i])
            i += 1
            continue
        key, value, used = override
        option = args[i].partition("=")[0].removeprefix("--")
        i += used
        if key == "class_path":
            merged.append(f"--{_TASK_KEY}={value}")
            continue
        if merged_task_at == len(merged) - 1:
            merged.pop()  # the override before this one: add to its task
        else:
            task = _task_before(parser, merged, option).to_config()
        loaded: Any = value
        with contextlib.suppress(yaml.YAMLError):  # not YAML: the string, as jsonargparse takes it
            loaded = get_loader(parser.parser_mode)(value)
        if key == "init_args" and isinstance(loaded, dict):
            task["init_args"].update(loaded)
        else:
            task["init_args"] = _with_key(task["init_args"], key.split("."), loaded)
        merged_task_at = len(merged)
        data = {"init_args": {"collector": {"task": task}}}
        merged.append(
            "--data="
            + yaml.dump(data, Dumper=_FlowDumper, default_flow_style=True, width=1e9).rstrip()
        )
    return merged
