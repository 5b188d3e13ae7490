"""The README's Python-API example runs as written, so the two cannot drift apart."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from importlib.metadata import requires
from pathlib import Path

import numpy as np
import pytest

from unilab_lit.app.export import ONNX_EXTRA_INSTALL
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


def test_readme_load_policy_example_names_the_extra_that_brings_onnxruntime() -> None:
    extra = re.search(r'"\.\[(\w+)\]"', readme_example(README.read_text(), LOAD_POLICY))
    assert extra is not None, "the load_policy example names no extra"
    assert f'".[{extra[1]}]"' in ONNX_EXTRA_INSTALL  # and load_policy's error names it too
    brought = [r for r in requires("unilab-lit") or [] if f'extra == "{extra[1]}"' in r]
    assert any(r.startswith("onnxruntime") for r in brought), brought


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


def test_readme_csv_logger_line_fits_and_writes_metrics_csv(tmp_path: Path) -> None:
    line = next(
        line.strip() for line in README.read_text().splitlines() if "--trainer.logger+=" in line
    )
    args = [arg for arg in line.split() if arg.startswith("--trainer.logger")]
    assert args == ["--trainer.logger+=ResumableCSVLogger"]
    done = subprocess.run(
        [sys.executable, str(README.parent / "cli.py"), "fit", "--config", "appo.yaml", *args,
         "--trainer.max_steps=6", "--trainer.enable_progress_bar=false"],
        cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(README.parent)),
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    assert list((tmp_path / "runs").rglob("metrics.csv"))


def test_readme_fits_its_150_line_budget_with_the_set_up_commands_first() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 150
    commands = re.findall(r"^    (\S.*)$", text, re.M)
    assert commands[0].startswith("git clone ")
    assert commands[1] == "pip install -e . && python cli.py fit --config configs/appo.yaml"
