"""The library does not import the application layer: nothing under unilab_lit/ imports callbacks."""

from __future__ import annotations

import ast
from pathlib import Path

LIBRARY = Path(__file__).resolve().parents[1] / "unilab_lit"


def _imported_roots(tree: ast.Module) -> set[str]:
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_no_library_module_imports_the_callbacks_package():
    modules = sorted(LIBRARY.rglob("*.py"))
    assert len(modules) > 50  # the walk found the library
    importers = [
        str(path.relative_to(LIBRARY.parent))
        for path in modules
        if "callbacks" in _imported_roots(ast.parse(path.read_text(), str(path)))
    ]
    # Not at module level, and not lazily inside a function either.
    assert importers == []
