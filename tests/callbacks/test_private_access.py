"""House rule: a callback never reads another object's private attributes (checked on the source)."""

from __future__ import annotations

import ast
from pathlib import Path

from unilab_lit import callbacks

CALLBACKS_DIR = Path(callbacks.__file__).parent


def _private_reads(path: Path) -> list[tuple[str, int, str]]:
    """``obj._name`` in ``path`` where ``obj`` is not ``self`` / ``cls`` (imports excluded)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if not isinstance(node, ast.Attribute):
            continue
        name = node.attr
        if not name.startswith("_") or name.startswith("__"):
            continue
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            continue
        found.append((path.name, node.lineno, f"{ast.unparse(node.value)}.{name}"))
    return found


def test_callbacks_read_no_private_attribute_of_another_object():
    offenders = [
        (file, line, expr)
        for path in sorted(CALLBACKS_DIR.glob("*.py"))
        for file, line, expr in _private_reads(path)
    ]
    assert offenders == [], f"private attributes of other objects read in callbacks/: {offenders}"


def test_private_read_check_finds_a_private_read(tmp_path):
    source = tmp_path / "sample.py"
    source.write_text("def f(trainer, self):\n    self._ok = trainer.datamodule._session\n")
    assert _private_reads(source) == [("sample.py", 2, "trainer.datamodule._session")]
