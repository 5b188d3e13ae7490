"""``python -m unilab_lit.app.seeds``: one fit per seed into sibling runs, and their spread."""

from __future__ import annotations

import re

import yaml

from tests.conftest import REPO
from unilab_lit.app.seeds import main, spread


def test_two_seeds_give_two_runs_with_their_own_collector_seed_and_a_spread_line(tmp_path, capsys):
    status = main(
        [
            "--config",
            str(REPO / "configs" / "appo.yaml"),
            "--seeds",
            "0",
            "1",
            "--log_dir",
            str(tmp_path),
            "--",
            "--trainer.max_steps=6",
            "--trainer.log_every_n_steps=1",
            "--trainer.enable_progress_bar=false",
            "--data.init_args.collector.num_envs=8",
        ]
    )
    assert status == 0
    seeds = {}
    for seed in (0, 1):
        (config,) = (tmp_path / f"seed_{seed}").glob("version_*/config.yaml")
        saved = yaml.safe_load(config.read_text())
        seeds[seed] = (saved["seed_everything"], saved["data"]["init_args"]["collector"]["seed"])
    assert seeds == {0: (0, 0), 1: (1, 1)}
    out = capsys.readouterr().out
    assert re.search(r"Train/mean_reward over 2 of 2 seeds: median \S+, min \S+, max \S+", out)


def test_spread_takes_median_min_max_over_the_seeds_with_a_value():
    line = spread("Loss/value", {0: 1.0, 1: 3.0, 2: 2.0, 3: None})
    assert line == (
        "Loss/value over 3 of 4 seeds: median 2, min 1, max 3 (seed 0: 1, 1: 3, 2: 2, 3: -)"
    )
