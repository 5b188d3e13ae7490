"""The README's Python-API example runs as written, so the two cannot drift apart."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from unilab_lit.app.export import main as export_main

README = Path(__file__).resolve().parent.parent / "README.md"
MARKER = "<!-- tested: python-api -->"
LOAD_POLICY = "<!-- tested: load-policy -->"


def readme_example(text: str, marker: str = MARKER) -> str:
    """The fenced ``python`` block that follows the ``marker`` line in ``text``."""
    _, found, after = text.partition(marker)
    assert found, f"README.md has no line {marker!r}"
    block = re.match(r"\s*```python\n(.*?)\n```", after, re.DOTALL)
    assert block is not None, f"no fenced python block right after {marker!r}"
    return block.group(1)


def test_readme_python_api_example_fits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # whatever the example writes lands here
    namespace: dict[str, object] = {"__name__": "readme_example"}
    exec(compile(readme_example(README.read_text()), str(README), "exec"), namespace)
    trainer = namespace["trainer"]
    assert trainer.global_step == 3
    assert trainer.state.finished


def test_readme_load_policy_example_acts_on_an_exported_policy(
    appo_cartpole_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (checkpoint,) = appo_cartpole_run.rglob("last.ckpt")
    assert (
        export_main(["--ckpt_path", str(checkpoint), "--output", str(tmp_path / "policy.onnx")])
        == 0
    )
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"obs": np.zeros((4, 5), np.float32)}
    exec(compile(readme_example(README.read_text(), LOAD_POLICY), str(README), "exec"), namespace)
    assert namespace["actions"].shape == (4, 1)


def test_ci_runs_the_readmes_test_command_in_a_fresh_virtualenv() -> None:
    script = (README.parent / ".ci" / "run").read_text()
    test_command = re.search(r'^    (pip install -e "\.\[dev\]".*)$', README.read_text(), re.M)
    assert test_command is not None, "README.md has no indented test command"
    lines = [line for line in script.splitlines() if line and not line.startswith("#")]
    assert lines[-1] == test_command.group(1)
    venv = next(i for i, line in enumerate(lines) if " -m venv " in line)
    activate = next(
        i for i, line in enumerate(lines) if line.startswith("source ") and "activate" in line
    )
    torch = next(i for i, line in enumerate(lines) if "install --quiet torch==" in line)
    assert venv < activate < torch < len(lines) - 1
    assert "unset PYTHONPATH" in lines
