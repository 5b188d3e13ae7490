"""The README's Python-API example runs as written, so the two cannot drift apart."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
MARKER = "<!-- tested: python-api -->"


def readme_example(text: str) -> str:
    """The fenced ``python`` block that follows the marker line in ``text``."""
    _, found, after = text.partition(MARKER)
    assert found, f"README.md has no line {MARKER!r}"
    block = re.match(r"\s*```python\n(.*?)\n```", after, re.DOTALL)
    assert block is not None, f"no fenced python block right after {MARKER!r}"
    return block.group(1)


def test_readme_python_api_example_fits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # whatever the example writes lands here
    namespace: dict[str, object] = {"__name__": "readme_example"}
    exec(compile(readme_example(README.read_text()), str(README), "exec"), namespace)
    trainer = namespace["trainer"]
    assert trainer.global_step == 3
    assert trainer.state.finished
