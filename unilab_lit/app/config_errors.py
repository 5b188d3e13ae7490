"""One-line reasons for config errors: jsonargparse's multi-line reports and YAML syntax errors.

jsonargparse reports a misspelled or mistyped key inside its union-resolution report (~60 lines
with the usage text, the useful line in the middle and ``NestedArg(...)`` noise at the end), and a
YAML syntax error as ``in "<unicode string>", line 4`` without the file. :func:`summarize` turns
such a report into one line that names the key, what was expected and, for a misspelled key, the
closest valid one; :func:`check_yaml_files` names the file and line of a syntax error.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import yaml

PREFIX = "error: invalid config: "

_CLASS_PROBLEM = re.compile(r"Problem with given class_path '(?P<cls>[\w.]+)':")
_NOT_ACCEPTED = re.compile(r"Option '(?P<key>[\w.]+)' is not accepted")
_EXPECTED = re.compile(
    r"Parser key \"(?P<key>[\w.]+)\":\s*Expected a (?P<type>.+?)\. Got value: (?P<value>.*)"
)
_OUTER_KEY = re.compile(r"^Parser key \"(?P<key>[\w.]+)\":")
_SUBCOMMAND_OPTION = re.compile(
    r"Subcommand '(?P<sub>\w+)' does not accept option '(?P<key>[\w.]+)'"
)
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


def closest(key: str, candidates: Iterable[str]) -> str:
    """``"; did you mean <candidate>?"`` for the closest candidate, or ``""`` if none is close."""
    matches = difflib.get_close_matches(key, list(candidates), n=1, cutoff=0.6)
    return f"; did you mean {matches[0]}?" if matches else ""


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
        tail = message[class_problem.end() :]
        not_accepted = _NOT_ACCEPTED.search(tail)
        if not_accepted is not None:
            key = not_accepted["key"]
            return (
                f"{group}.init_args.{key}: {class_path.rsplit('.', 1)[-1]} has no argument "
                f"{key!r}{closest(key, _init_arguments(class_path))}"
            )
        expected = _EXPECTED.search(tail)
        if expected is not None:
            return _expected_line(f"{group}.init_args.{expected['key']}", expected)
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
        SystemExit: with one line ``error: invalid config: <file>, line L, column C: <problem>``.
    """
    for path in paths:
        file = Path(path)
        if not file.is_file():
            continue  # jsonargparse reports a missing file itself
        try:
            yaml.safe_load(file.read_text())
        except yaml.MarkedYAMLError as err:
            mark = err.problem_mark
            where = f", line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            raise SystemExit(f"{PREFIX}{file}{where}: {err.problem or err.context}") from None


def config_files(args: Sequence[str]) -> list[str]:
    """The values of ``-c`` / ``--config`` in a command line."""
    files = []
    for i, arg in enumerate(args):
        if arg in ("-c", "--config") and i + 1 < len(args):
            files.append(args[i + 1])
        elif arg.startswith("--config="):
            files.append(arg.split("=", 1)[1])
    return files


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
