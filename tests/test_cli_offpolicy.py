"""CLI tests for the off-policy configs: ``cli.py`` as a real subprocess per config; the GPU
configs' ``--print_config`` in-process."""

from __future__ import annotations

import pytest
import yaml

from tests.conftest import REPO
from tests.test_cli import assert_smoke_fit, cli_output

# A few iterations on a few envs; learning_starts=2 keeps the warm-up short.
SMOKE_OVERRIDES = [
    "--trainer.max_steps=3",
    "--trainer.enable_progress_bar=false",
    "--data.init_args.collector.num_envs=4",
    "--data.init_args.batch_size=16",
    "--data.init_args.learning_starts=2",
]


@pytest.mark.parametrize(
    "config", ["configs/fast_td3.yaml", "configs/fast_sac.yaml", "configs/fast_sac_humanoid.yaml"]
)
def test_offpolicy_config_fit_writes_checkpoint_and_events_without_leaks(
    config, tmp_path, marked_env
):
    assert_smoke_fit(config, SMOKE_OVERRIDES, tmp_path, marked_env)


@pytest.mark.parametrize(
    ("config", "model"),
    [
        ("configs/fast_td3_gpu.yaml", "unilab_lit.algos.fast_td3.FastTD3"),
        ("configs/fast_sac_gpu.yaml", "unilab_lit.algos.fast_sac.FastSAC"),
        ("configs/fast_sac_humanoid_gpu.yaml", "unilab_lit.algos.fast_sac.FastSAC"),
    ],
)
def test_gpu_config_parses_with_paper_scale_sizes(config, model, capsys):
    printed = yaml.safe_load(
        cli_output(["fit", "--config", str(REPO / config), "--print_config"], capsys)
    )
    assert printed["model"]["class_path"] == model
    assert printed["data"]["init_args"]["collector"]["num_envs"] == 1024
    assert printed["data"]["init_args"]["batch_size"] == 32768
