"""bench/plot_curves.py draws a PNG from a run's TensorBoard events."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from torch.utils.tensorboard import SummaryWriter

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.fixture
def plot_curves(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(BENCH))  # the script imports its neighbour returns.py
    return importlib.import_module("plot_curves")


def _write_run(log_dir: Path, with_eval: bool) -> None:
    writer = SummaryWriter(str(log_dir))
    for step in range(5):
        writer.add_scalar("Train/learned_env_steps", 1000 * (step + 1), step)
        writer.add_scalar("Train/mean_reward", 10.0 * step, step)
        if with_eval and step % 2 == 0:
            writer.add_scalar("Eval/mean_reward", 12.0 * step, step)
    writer.close()


def test_plot_curves_writes_one_png_for_runs_with_and_without_eval(plot_curves, tmp_path: Path):
    _write_run(tmp_path / "a", with_eval=True)
    _write_run(tmp_path / "b", with_eval=False)
    curves = plot_curves.run_curves(str(tmp_path / "a"))
    assert set(curves) == {"Train/mean_reward", "Eval/mean_reward"}
    assert [steps for _, steps, _ in curves["Train/mean_reward"]] == [1000, 2000, 3000, 4000, 5000]
    assert set(plot_curves.run_curves(str(tmp_path / "b"))) == {"Train/mean_reward"}
    out = tmp_path / "figs" / "curves.png"
    plot_curves.plot([str(tmp_path / "a"), str(tmp_path / "b")], ["a", "b"], out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
