"""Names of classes and options as a user writes them: the closest valid name to a typo, and the
library callbacks' previous class paths (``callbacks.EnvStepBudget``, now
``unilab_lit.callbacks.EnvStepBudget``)."""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import pkgutil
from collections.abc import Iterable
from pathlib import Path

# The library's callbacks import as unilab_lit.callbacks; the previous release installed their
# folder as a top-level ``callbacks`` package.
_OLD_CALLBACKS = "callbacks"
_CALLBACKS = "unilab_lit.callbacks"


def closest(key: str, candidates: Iterable[str]) -> str:
    """``"; did you mean <candidate>?"`` for a candidate a typo away, or ``""`` if none is.

    A typo is a few edits (about one in four characters), so ``learning_rate`` never suggests
    ``min_learning_rate``, an option with another meaning.
    """
    limit = max(1, len(key) // 4)
    near = [c for c in candidates if _typo_distance(key, c) <= limit]
    matches = difflib.get_close_matches(key, near, n=1, cutoff=0.0)
    return f"; did you mean {matches[0]}?" if matches else ""


def class_path_suggestion(class_path: str) -> str:
    """``"; did you mean <name>?"`` for a class path with a part a typo away from a name that
    exists (``mypusher.Puhser``: ``Pusher``), or ``""`` (the path imports, or nothing is close).

    The candidates are the public names and submodules of the deepest module of ``class_path``
    that imports.
    """
    parts = class_path.split(".")
    for depth in range(len(parts) - 1, 0, -1):
        try:
            module = importlib.import_module(".".join(parts[:depth]))
        except ImportError:
            continue
        names = {name for name in dir(module) if not name.startswith("_")}
        if hasattr(module, "__path__"):
            names |= {info.name for info in pkgutil.iter_modules(module.__path__)}
        # A part that is there failed to import for a reason of its own.
        return "" if parts[depth] in names else closest(parts[depth], names)
    return ""


def moved_class_path(class_path: str) -> str | None:
    """``"callbacks.X moved to unilab_lit.callbacks.X in this release"`` for a library callback
    named by its previous class path, or ``None``.

    A user's own top-level ``callbacks`` module keeps its names: only a path that the library
    has under its new name, and that no other ``callbacks`` module on ``sys.path`` could hold, is
    pointed at the new one.
    """
    if not class_path.startswith(_OLD_CALLBACKS + "."):
        return None
    new = f"unilab_lit.{class_path}"
    module_name, _, name = new.rpartition(".")
    try:
        if not hasattr(importlib.import_module(module_name), name) or _users_own_callbacks():
            return None
    except ImportError:
        return None
    return f"{class_path} moved to {new} in this release"


def _users_own_callbacks() -> bool:
    """Whether a top-level ``callbacks`` on ``sys.path`` is a module other than the library's
    callbacks folder (found, not imported)."""
    try:
        found = importlib.util.find_spec(_OLD_CALLBACKS)
    except (ImportError, ValueError):  # a loaded module without a spec: not the library's
        return True
    if found is None:
        return False
    library = importlib.util.find_spec(_CALLBACKS)
    if found.origin is None or library is None or library.origin is None:
        return True  # a namespace package: the library's folder has an __init__.py
    return Path(found.origin).resolve() != Path(library.origin).resolve()


def _typo_distance(a: str, b: str) -> int:
    """Edits (insert, delete, substitute, swap two neighbours) that turn ``a`` into ``b``."""
    previous, current = None, list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        before, previous, current = previous, current, [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = a[i - 1] != b[j - 1]
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                current[j] = min(current[j], before[j - 2] + 1)
    return current[len(b)]
