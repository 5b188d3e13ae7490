"""CLI smoke tests for the robot configs: each trains its robot for a few iterations at tiny
sizes through ``cli.py`` (a real collector subprocess that rebuilds the task from its spec)."""

from __future__ import annotations

import pytest
import yaml

from tests.conftest import REPO
from tests.test_cli import SMOKE_OVERRIDES as APPO_OVERRIDES
from tests.test_cli import assert_smoke_fit, cli_output
from tests.test_cli_offpolicy import SMOKE_OVERRIDES as OFFPOLICY_OVERRIDES


@pytest.mark.parametrize(
    ("config", "overrides"),
    [
        ("configs/appo_go1.yaml", APPO_OVERRIDES),
        # Same task and overrides as appo_go1.yaml; only the (overridden) sizes differ.
        pytest.param("configs/appo_go1_gpu.yaml", APPO_OVERRIDES, marks=pytest.mark.slow),
        ("configs/fast_sac_g1.yaml", OFFPOLICY_OVERRIDES),
    ],
)
def test_robot_config_fit_writes_checkpoint_and_events_without_leaks(
    robot_models, config, overrides, tmp_path, marked_env
):
    assert_smoke_fit(config, overrides, tmp_path, marked_env)


def test_g1_gpu_config_parses_with_seed_scale_sizes(robot_models, capsys):
    config = str(REPO / "configs" / "fast_sac_g1_gpu.yaml")
    printed = yaml.safe_load(cli_output(["fit", "--config", config, "--print_config"], capsys))
    assert printed["data"]["init_args"]["collector"]["task"]["class_path"] == "G1Walk"
    assert printed["data"]["init_args"]["collector"]["num_envs"] == 4096
