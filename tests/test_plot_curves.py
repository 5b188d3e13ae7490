"""bench/plot_curves.py draws a grid PNG from runs' TensorBoard events."""

from __future__ import annotations

import importlib
from pathlib import Path

import imageio.v3 as iio
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


def test_plot_curves_draws_a_panel_per_run_in_a_grid_with_and_without_eval(
    plot_curves, tmp_path: Path
):
    _write_run(tmp_path / "a", with_eval=True)
    _write_run(tmp_path / "b", with_eval=False)
    curves = plot_curves.run_curves(str(tmp_path / "a"))
    assert set(curves) == {"Train/mean_reward", "Eval/mean_reward"}
    assert [steps for _, steps, _ in curves["Train/mean_reward"]] == [1000, 2000, 3000, 4000, 5000]
    assert set(plot_curves.run_curves(str(tmp_path / "b"))) == {"Train/mean_reward"}
    runs = [str(tmp_path / name) for name in ("a", "b", "a")]
    for by in plot_curves.BY:
        out = tmp_path / "figs" / f"curves-{by}.png"
        plot_curves.plot(runs, ["a", "b", "a again"], out, columns=2, by=by)
        # Three panels, two a row: a grid of 2 x 2 panels (3.4 x 2.5 inches each, 90 dpi).
        assert iio.imread(out).shape[:2] == (450, 612)
