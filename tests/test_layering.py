"""No module imports one on a higher floor (docs/architecture.md): the tree is the layering.

Every ``import`` is read from the source (ast), at module level, inside functions and under
``TYPE_CHECKING`` alike, so a lazy import cannot hide a dependency that runs back up.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Low to high; a module may import its own floor and the ones below. The single modules at the
# top of unilab_lit/ (validation, distributed, checkpoint_io, config_errors, gl_backend) are floor 0.
FLOORS = {
    "unilab_lit": 0,
    "unilab_lit.telemetry": 1,
    "unilab_lit.envs": 2,
    "unilab_lit.ipc": 2,
    "unilab_lit.nn": 2,
    "unilab_lit.collector": 3,
    "unilab_lit.callbacks": 4,
    "unilab_lit.data": 5,
    "unilab_lit.algos": 6,
    "unilab_lit.app": 7,
    "unilab_lit.__main__": 7,
}
# The package itself is the public face (``unilab_lit.load_policy``): it may name the top floor,
# lazily, since every collector child imports it (tests/collector/test_import_light.py).
PUBLIC_FACE = "unilab_lit"
# The top-level callbacks/ folder is the package unilab_lit.callbacks (pyproject.toml); a
# top-level ``callbacks`` is a user's own module, never the library's.
CALLBACKS_FOLDER, CALLBACKS_PACKAGE = "callbacks", "unilab_lit.callbacks"


def _floor(module: str) -> int | None:
    """The floor of the longest ``FLOORS`` prefix of ``module``; ``None`` outside the project."""
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        prefix = ".".join(parts[:end])
        if prefix in FLOORS:
            return FLOORS[prefix]
    return None


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[0] == CALLBACKS_FOLDER:
        parts = [*CALLBACKS_PACKAGE.split("."), *parts[1:]]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(tree: ast.Module, package: str) -> list[tuple[int, str]]:
    """``(line, dotted name)`` of every import in ``tree``; ``from a import b`` names ``a.b``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def upward_imports(root: Path = REPO) -> list[str]:
    """``"file:line imports name (floor a -> b)"`` for every import that runs up a floor, and
    every import of the callbacks by their folder's name instead of the package's."""
    modules = sorted((root / "unilab_lit").rglob("*.py")) + sorted(
        (root / CALLBACKS_FOLDER).glob("*.py")
    )
    offences = []
    for path in modules:
        name = _module_name(path, root)
        own = max(FLOORS.values()) if name == PUBLIC_FACE else _floor(name)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for line, imported in _imports(ast.parse(path.read_text(), str(path)), package):
            where = path.relative_to(root)
            if imported.split(".")[0] == CALLBACKS_FOLDER:
                offences.append(f"{where}:{line} imports {imported} (not {CALLBACKS_PACKAGE})")
                continue
            floor = _floor(imported)
            if floor is not None and floor > own:
                offences.append(f"{where}:{line} imports {imported} (floor {own} -> {floor})")
    return offences


def test_no_module_imports_one_on_a_higher_floor():
    assert upward_imports() == []


def test_the_check_names_the_file_and_the_import_that_runs_up(tmp_path):
    (tmp_path / "unilab_lit" / "envs").mkdir(parents=True)
    (tmp_path / "callbacks").mkdir()
    (tmp_path / "unilab_lit" / "envs" / "task.py").write_text(
        "def build():\n    from unilab_lit.app.config_errors import closest\n"
    )
    (tmp_path / "callbacks" / "sync.py").write_text("from unilab_lit.collector import link\n")
    (tmp_path / "callbacks" / "budget.py").write_text("from unilab_lit.data import base\n")
    (tmp_path / "unilab_lit" / "envs" / "stats.py").write_text("from callbacks import sync\n")
    assert upward_imports(tmp_path) == [
        "unilab_lit/envs/stats.py:1 imports callbacks.sync (not unilab_lit.callbacks)",
        "unilab_lit/envs/task.py:2 imports unilab_lit.app.config_errors.closest (floor 2 -> 7)",
        "callbacks/budget.py:1 imports unilab_lit.data.base (floor 4 -> 5)",
    ]
