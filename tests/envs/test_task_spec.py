"""TaskSpec: a config value checked against the task's constructor, and what survives a process."""

from __future__ import annotations

import io
import pickle

import pytest
import torch

from tests.conftest import REPO
from unilab_lit.app.unilab_cli import UnilabCLI
from unilab_lit.collector.options import CollectorOptions
from unilab_lit.envs.cartpole import CartpoleSwingup
from unilab_lit.envs.task_spec import TaskSpec

REACHER = "examples.reacher.Reacher"


def test_from_config_fills_in_the_constructor_defaults():
    spec = TaskSpec.from_config({"class_path": "CartpoleSwingup", "init_args": {"frame_skip": 3}})
    assert spec.init_args == {"frame_skip": 3, "max_episode_steps": 500, "reset_noise_scale": 0.01}
    assert TaskSpec.from_config(spec.to_config()) == spec
    assert TaskSpec.from_config("CartpoleSwingup").init_args["frame_skip"] == 2


def test_unregistered_gym_id_names_the_key_and_the_module_form():
    task = "--data.init_args.collector.task=gym:NanEnv-v0"
    with pytest.raises(SystemExit) as refused:
        UnilabCLI(args=["fit", "--config", str(REPO / "configs" / "appo.yaml"), task], run=False)
    line = refused.value.code
    assert isinstance(line, str) and "\n" not in line, line
    assert line.startswith(
        "error: invalid config: data.init_args.collector.task: gymnasium has no env 'NanEnv-v0'"
    ), line
    assert line.endswith("gym:<module>:NanEnv-v0"), line


def test_gym_id_in_the_module_form_imports_its_module_first():
    spec = TaskSpec.from_config("gym:gymnasium.envs.classic_control:Pendulum-v1")
    assert spec.class_path == "gym:gymnasium.envs.classic_control:Pendulum-v1"


def test_from_config_names_the_misspelled_argument_and_the_closest_one():
    with pytest.raises(ValueError) as error:
        TaskSpec.from_config({"class_path": REACHER, "init_args": {"ctrl_cost_wieght": 0.1}})
    assert str(error.value) == (
        "init_args.ctrl_cost_wieght: Reacher has no argument 'ctrl_cost_wieght'; "
        "did you mean ctrl_cost_weight?"
    )


def test_init_args_may_not_set_what_the_trainer_passes():
    with pytest.raises(ValueError, match=r"must not set \['num_envs'\]"):
        TaskSpec("CartpoleSwingup", {"num_envs": 4})


def test_spec_survives_pickling_and_weights_only_checkpoints():
    options = CollectorOptions(TaskSpec(REACHER, {"max_episode_steps": 7}), 2)
    buffer = io.BytesIO()
    torch.save({"collector": options}, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True)["collector"]
    assert loaded == options and pickle.loads(pickle.dumps(options.task)) == options.task
    env = loaded.task.build(2, seed=1)
    assert env.spec.max_episode_steps == 7 and env.spec.obs_sizes == {"policy": 10, "critic": 11}


def test_a_name_is_a_spec_without_arguments():
    options = CollectorOptions("CartpoleSwingup", 2)
    assert options.task == TaskSpec("CartpoleSwingup")
    assert isinstance(options.task.build(1), CartpoleSwingup)


def test_gym_tasks_are_built_to_render_frames_and_others_as_they_are():
    gym = TaskSpec("gym:Pendulum-v1", {"max_episode_steps": 5})
    assert gym.with_frames().init_args == {
        "max_episode_steps": 5,
        "env_kwargs": {"render_mode": "rgb_array"},
    }
    plain = TaskSpec(REACHER)
    assert plain.with_frames() is plain
