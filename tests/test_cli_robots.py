"""The robot GPU config's ``--print_config`` in-process; each 2-core robot config's fit, resume,
play and export journey is in ``tests/journeys/test_configs.py``."""

from __future__ import annotations

import yaml

from tests.conftest import REPO
from tests.test_cli import cli_output


def test_g1_gpu_config_parses_with_seed_scale_sizes(robot_models, capsys):
    config = str(REPO / "configs" / "fast_sac_g1_gpu.yaml")
    printed = yaml.safe_load(cli_output(["fit", "--config", config, "--print_config"], capsys))
    assert printed["data"]["init_args"]["collector"]["task"]["class_path"] == "G1Walk"
    assert printed["data"]["init_args"]["collector"]["num_envs"] == 4096
