"""One-line reasons for config errors: jsonargparse's multi-line reports and YAML syntax errors.

jsonargparse reports a misspelled or mistyped key inside its union-resolution report (~60 lines
with the usage text, the useful line in the middle and ``NestedArg(...)`` noise at the end), and a
YAML syntax error as ``in "<unicode string>", line 4`` without the file. :func:`summarize` turns
such a report into one line that names the key, what was expected and, for a misspelled key, the
closest valid one; :func:`check_yaml_files` names the file and line of a syntax error. A key of
the previous release that moved (:data:`MOVED_KEYS`) is refused in one line naming its new key, and
so is a library callback named by its previous class path (``callbacks.EnvStepBudget``, now
``unilab_lit.callbacks.EnvStepBudget``: :func:`unilab_lit.class_paths.moved_class_path`).
:func:`with_key_path` puts the full key into a constructor's range error.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from unilab_lit.class_paths import class_path_suggestion, closest, moved_class_path

PREFIX = "error: invalid config: "

_CLASS_PROBLEM = re.compile(r"Problem with given class_path '(?P<cls>[\w.]+)':")
_NOT_ACCEPTED = re.compile(r"Option '(?P<key>[\w.]+)' is not accepted")
_EXPECTED = re.compile(
    r"Parser key \"(?P<key>[\w.]+)\":\s*Expected a (?P<type>.+?)\. Got value: (?P<value>.*)"
)
# A registered type's own one-line reason (``unilab_lit.envs.task_spec.TaskSpec``'s).
_NOT_OF_TYPE = re.compile(r"Parser key \"(?P<key>[\w.]+)\":\s*Not of type \w+: (?P<reason>.+)")
_OUTER_KEY = re.compile(r"^Parser key \"(?P<key>[\w.]+)\":")
# "Group 'collector' does not accept option 'task_kwargs.a'": a key inside a dataclass argument.
_GROUP_OPTION = re.compile(r"Group '(?P<grp>[\w.]+)' does not accept option '(?P<key>[\w.]+)'")
_SUBCOMMAND_OPTION = re.compile(
    r"Subcommand '(?P<sub>\w+)' does not accept option '(?P<key>[\w.]+)'"
)
_CONFIG_FLAGS = ("-c", "--config")
# Options that are no config value: their place on the command line does not matter.
_ACTION_FLAGS = ("--print_config", "--help")
_UNRECOGNIZED = re.compile(r"unrecognized arguments: (?P<args>.*)")
_CLASS_IN_TYPE = re.compile(r"<class '(?:[\w.]+\.)?(?P<name>\w+)'>")
# Lines of jsonargparse's union report that never carry the cause.
_NOISE = (
    "Does not validate against any of the Union subtypes",
    "Subtypes:",
    "Errors:",
    "Given value",
    "Expected a <class 'NoneType'>",
)

_OFFPOLICY = "model.init_args.offpolicy."
_COLLECTOR = "data.init_args.collector."
_BOTH_OPTIMIZERS = "model.init_args.critic_optimizer.init_args.{} (and actor_optimizer's)"
# Keys of the previous release that moved: old key -> where it is now. Refused only when the
# class lacks the old key and has the new key's argument (``optimizer``, ``offpolicy``, ...), so
# APPO's own ``gamma`` and a user's class are never pointed elsewhere.
MOVED_KEYS: dict[str, str] = {
    "model.init_args.learning_rate": "model.init_args.optimizer.init_args.lr",
    "model.init_args.critic_learning_rate": "model.init_args.critic_optimizer.init_args.lr",
    "model.init_args.actor_learning_rate": "model.init_args.actor_optimizer.init_args.lr",
    "model.init_args.temperature_learning_rate": (
        "model.init_args.temperature_optimizer.init_args.lr"
    ),
    "model.init_args.weight_decay": _BOTH_OPTIMIZERS.format("weight_decay"),
    "model.init_args.adam_betas": _BOTH_OPTIMIZERS.format("betas"),
    **{
        f"model.init_args.{key}": _OFFPOLICY + key
        for key in (
            "num_atoms",
            "v_min",
            "v_max",
            "gamma",
            "tau",
            "updates_per_step",
            "policy_frequency",
            "use_cdq",
            "compile_losses",
            "max_grad_norm",
            "max_nonfinite_steps",
        )
    },
    **{
        f"data.init_args.{key}": _COLLECTOR + key
        for key in (
            "task",
            "num_envs",
            "seed",
            "physics_threads",
            "collector_torch_threads",
            "stall_timeout_s",
            "data_timeout_s",
            "startup_timeout_s",
            "learner_torch_threads",
        )
    },
    "data.init_args.task_kwargs": _COLLECTOR + "task: {class_path, init_args}",
    "data.init_args.collector.task_kwargs": _COLLECTOR + "task: {class_path, init_args}",
}


def moved(key: str, class_path: str | None = None) -> str | None:
    """``"<key>: moved to <new key>"`` for a key of the previous release, or ``None``.

    Args:
        key: The full dotted key (``model.init_args.learning_rate``), possibly with a tail
            inside the old key's value (``data.init_args.task_kwargs.scale``).
        class_path: The class the key was given to; the new key's argument must be one of its
            arguments.
    """
    for old, new in MOVED_KEYS.items():
        if key != old and not key.startswith(old + "."):
            continue
        argument = new.split(".")[2]  # optimizer, offpolicy, collector, ...
        if class_path is not None and argument not in _init_arguments(class_path):
            continue
        return f"{old}: moved to {new} in this release"
    return None


def moved_key_in(config: Any) -> str | None:
    """:func:`moved`'s line for the first key of the previous release in a loaded config file.

    Keys are looked up in the file itself, so an old key with an empty value
    (``task_kwargs: {}``), which the parser would take as an empty group and drop, is refused
    as well. A model or data class that still has the old argument keeps it.
    """
    for key, class_path in _mapping_keys(config, "", None):
        old_argument = key.split(".")[2] if key.count(".") == 2 else None
        if old_argument is not None and old_argument in _init_arguments(class_path or ""):
            continue
        if key in MOVED_KEYS:
            return moved(key, class_path)
    return None


def moved_class_in(config: Any) -> str | None:
    """``"<key>: <moved_class_path's line>"`` for the first library callback in a loaded config
    file named by its previous class path, or ``None``."""
    for key, value, _ in _leaves(config, "", ()):
        if key.endswith("class_path") and isinstance(value, str):
            line = moved_class_path(value)
            if line is not None:
                return f"{key}: {line}"
    return None


def check_moved_class_paths(args: Sequence[str]) -> None:
    """Refuse a library callback named by its previous class path on the command line
    (``--trainer.callbacks+=callbacks.Tracing``).

    Raises:
        SystemExit: with one line naming the option, the old class path and the new one.
    """
    option = "argument"
    for arg in args:
        value = arg
        if arg.startswith("--"):
            option, has_value, value = arg.partition("=")
            option = option.rstrip("+")
            if not has_value:
                continue
        line = moved_class_path(value)
        if line is not None:
            raise SystemExit(f"{PREFIX}{option}: {line}")


def _mapping_keys(node: Any, key: str, class_path: str | None) -> Iterator[tuple[str, str | None]]:
    """Every dotted key of nested mappings (leaves and groups), with its top group's class_path."""
    if not isinstance(node, Mapping):
        return
    for name, child in node.items():
        child_key = f"{key}.{name}" if key else str(name)
        top = class_path
        if not key and isinstance(child, Mapping) and isinstance(child.get("class_path"), str):
            top = child["class_path"]
        yield child_key, top
        yield from _mapping_keys(child, child_key, top)


def summarize(message: str, option_keys: Sequence[str]) -> str:
    """The one-line reason of a jsonargparse error ``message``.

    Args:
        message: The parser's error message (possibly many lines).
        option_keys: Every option key of the parser that failed (``trainer.max_steps``, ...),
            for suggestions on a misspelled top-level key.

    Returns:
        One line without the :data:`PREFIX`.
    """
    outer = _OUTER_KEY.match(message.strip())
    group = outer["key"] if outer else None
    class_problem = _CLASS_PROBLEM.search(message)
    if class_problem is not None and group is not None:
        class_path = class_problem["cls"]
        suggestion = class_path_suggestion(class_path)
        if suggestion:
            return f"{group}: class_path {class_path!r} does not import{suggestion}"
        tail = message[class_problem.end() :]
        not_accepted = _NOT_ACCEPTED.search(tail)
        if not_accepted is not None:
            key = not_accepted["key"]
            renamed = moved(f"{group}.init_args.{key}", class_path)
            if renamed is not None:
                return renamed
            return (
                f"{group}.init_args.{key}: {class_path.rsplit('.', 1)[-1]} has no argument "
                f"{key!r}{closest(key, _init_arguments(class_path))}"
            )
        expected = _EXPECTED.search(tail)
        if expected is not None:
            return _expected_line(f"{group}.init_args.{expected['key']}", expected)
        group_option = _GROUP_OPTION.search(tail)
        if group_option is not None:
            key = f"{group}.init_args.{group_option['grp']}.{group_option['key']}"
            return (
                moved(key) or f"{key}: {group_option['grp']} has no option {group_option['key']!r}"
            )
        not_of_type = _NOT_OF_TYPE.search(tail)
        if not_of_type is not None:
            key, reason = f"{group}.init_args.{not_of_type['key']}", not_of_type["reason"]
            # The reason names a key inside the value ("init_args.x: ...") or the whole value.
            return f"{key}.{reason}" if reason.startswith("init_args.") else f"{key}: {reason}"
    expected = _EXPECTED.search(message)
    if expected is not None:
        return _expected_line(expected["key"], expected)
    for pattern in (_SUBCOMMAND_OPTION, _UNRECOGNIZED):
        found = pattern.search(message)
        if found is not None:
            key = found["key"] if "key" in pattern.groupindex else _first_option(found["args"])
            return f"unknown option {key!r}{closest(key, option_keys)}"
    lines = [line.strip(" -") for line in message.splitlines()]
    return "; ".join(line for line in lines if line and not line.startswith(_NOISE))


def check_yaml_files(paths: Iterable[str]) -> None:
    """Parse each existing YAML file; a syntax error ends the run naming the file and line.

    Raises:
        SystemExit: with one line ``error: invalid config: <file>, line L, column C: <problem>``,
            or ``<old key>: moved to <new key> in this release`` for a key of the previous
            release (:func:`moved_key_in`), or ``<key>: callbacks.X moved to
            unilab_lit.callbacks.X in this release`` for a class path of the previous release
            (:func:`moved_class_in`).
    """
    for path in paths:
        file = Path(path)
        if not file.is_file():
            continue  # jsonargparse reports a missing file itself
        try:
            loaded = yaml.safe_load(file.read_text())
        except yaml.MarkedYAMLError as err:
            mark = err.problem_mark
            where = f", line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            raise SystemExit(f"{PREFIX}{file}{where}: {err.problem or err.context}") from None
        renamed = moved_key_in(loaded) or moved_class_in(loaded)
        if renamed is not None:
            raise SystemExit(f"{PREFIX}{renamed}")


def check_override_order(args: Sequence[str]) -> None:
    """Refuse an override placed before the first ``--config``: options apply in order, so the
    config would replace its value (a later ``--config`` file is the user's own layering) (and an ``init_args`` key before its ``class_path`` is known fails
    with "Logger is abstract").

    Raises:
        SystemExit: with one line naming the first such option.
    """
    configs = [
        i for i, arg in enumerate(args) if arg in _CONFIG_FLAGS or arg.startswith("--config=")
    ]
    if not configs:
        return
    for arg in args[: configs[0]]:
        if arg.startswith("--") and arg.split("=", 1)[0] not in (*_CONFIG_FLAGS, *_ACTION_FLAGS):
            raise SystemExit(
                f"{PREFIX}{arg.split('=', 1)[0]} comes before --config, which would replace it: "
                "put overrides after --config"
            )


def config_files(args: Sequence[str]) -> list[str]:
    """The values of ``-c`` / ``--config`` in a command line."""
    files = []
    for i, arg in enumerate(args):
        if arg in ("-c", "--config") and i + 1 < len(args):
            files.append(args[i + 1])
        elif arg.startswith("--config="):
            files.append(arg.split("=", 1)[1])
    return files


# A constructor's range check (``unilab_lit.validation.check_arg``): "<name> must be <valid>, got
# <value>", the name bare (``num_envs``) or with its owner (``RLCheckpoint.keep_replays``).
_RANGE_ERROR = re.compile(r"^(?P<name>[A-Za-z_][\w.]*) must be .*, got (?P<value>.+)$")


def with_key_path(message: str, config: Mapping[str, Any]) -> str:
    """A range error ``message`` with the argument's full key in ``config``.

    ``num_envs must be >= 1, got 0`` becomes ``data.init_args.collector.num_envs must be >= 1,
    got 0`` when exactly one key of ``config`` ends with that argument (under the owner class
    or group, if the message names one) and holds that value; any other message is returned as
    it is.
    """
    found = _RANGE_ERROR.match(message)
    if found is None:
        return message
    owner, _, argument = found["name"].rpartition(".")
    keys = {
        key
        for key, value, parents in _leaves(config, "", ())
        if key.rsplit(".", 1)[-1] == argument
        and (not owner or owner in parents)
        and repr(value) == found["value"]
    }
    if len(keys) != 1:
        return message
    return keys.pop() + message[len(found["name"]) :]


def _leaves(node: Any, key: str, parents: tuple[str, ...]) -> Iterator[tuple[str, Any, tuple]]:
    """``(dotted key, value, names above it)`` for each leaf; the names are the keys' parts and
    the short names of the enclosing ``class_path``s."""
    if isinstance(node, Mapping):
        class_path = node.get("class_path")
        if isinstance(class_path, str):
            parents = (*parents, class_path.rsplit(".", 1)[-1])
        for name, child in node.items():
            yield from _leaves(child, f"{key}.{name}" if key else str(name), (*parents, str(name)))
    elif isinstance(node, list):
        for index, child in enumerate(node):
            yield from _leaves(child, f"{key}[{index}]", parents)
    else:
        yield key, node, parents


def _expected_line(key: str, found: re.Match[str]) -> str:
    expected = _CLASS_IN_TYPE.sub(lambda m: m["name"], found["type"])
    return f"{key}: expected {expected}, got {found['value'].strip()!r}"


def _first_option(args: str) -> str:
    first = args.split()[0] if args.split() else args
    return first.lstrip("-").split("=", 1)[0]


def _init_arguments(class_path: str) -> list[str]:
    module_name, _, name = class_path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), name)
        parameters = inspect.signature(cls).parameters
    except (ImportError, AttributeError, TypeError, ValueError):
        return []
    return [p for p in parameters if p not in ("self", "args", "kwargs")]
