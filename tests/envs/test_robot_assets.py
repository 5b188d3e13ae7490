"""Robot model fetch: pinned wheel into the cache, only the robot folders, errors in one line."""

from __future__ import annotations

import shutil
import zipfile

import pytest

from unilab_lit.envs.robots import assets
from unilab_lit.envs.robots.assets import RobotModelError, fetch_models, model_file


def test_fetch_extracts_only_the_two_robot_folders_and_the_licence(robot_models):
    top = sorted(p.name for p in robot_models.iterdir())
    # And the digests a later fetch checks the files against.
    assert top == ["LICENSE", assets.MANIFEST, "unitree_g1", "unitree_go1"]
    assert "Apache License" in (robot_models / "LICENSE").read_text()
    go1 = sorted(p.name for p in (robot_models / "unitree_go1" / "assets").iterdir())
    assert go1 == ["calf.stl", "hip.stl", "thigh.stl", "thigh_mirror.stl", "trunk.stl"]
    assert len(list((robot_models / "unitree_g1" / "assets").iterdir())) == 35
    assert not list(robot_models.rglob("*.py"))
    assert model_file("unitree_g1") == robot_models / "unitree_g1" / "g1.xml"


def test_fetch_refuses_a_wheel_whose_hash_is_not_the_pinned_one(tmp_path, monkeypatch):
    monkeypatch.setenv(assets.CACHE_ENV, str(tmp_path / "cache"))
    wheel = tmp_path / assets.WHEEL_NAME
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("mjlab/asset_zoo/robots/unitree_go1/xmls/go1.xml", "<mujoco/>")
    with pytest.raises(RobotModelError, match="not the pinned") as error:
        fetch_models(wheel)
    assert "\n" not in str(error.value)
    # Nothing half-written is left where the models would go.
    assert not assets.models_dir().exists()


def test_missing_model_dir_names_both_ways_to_get_the_model(tmp_path):
    with pytest.raises(RobotModelError) as error:
        model_file("unitree_go1", str(tmp_path))
    message = str(error.value)
    assert "\n" not in message
    assert assets.FETCH_COMMAND in message and "model_dir" in message


def test_model_dir_copy_is_used_instead_of_the_cache(robot_models, tmp_path):
    copy = shutil.copytree(robot_models / "unitree_go1", tmp_path / "unitree_go1")
    assert model_file("unitree_go1", str(copy)) == copy / "go1.xml"
