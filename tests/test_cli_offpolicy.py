"""The off-policy GPU configs' ``--print_config`` in-process; each 2-core config's fit, resume,
play and export journey is in ``tests/journeys/test_configs.py``."""

from __future__ import annotations

import pytest
import yaml

from tests.conftest import REPO
from tests.test_cli import cli_output


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
