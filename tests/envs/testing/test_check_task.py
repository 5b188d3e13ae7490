"""check_task: every built-in task and the example meet the contract; a broken task is named in
one line with the contract it breaks."""

from __future__ import annotations

import numpy as np
import pytest

from examples.reacher import Reacher
from unilab_lit.envs import registered_tasks, task_class
from unilab_lit.envs.base import Obs
from unilab_lit.envs.spec import POLICY
from unilab_lit.envs.task_spec import TaskSpec
from unilab_lit.envs.testing import TaskContractError, check_task


class NarrowReacher(Reacher):
    """Declares a 10-wide policy observation and returns 9 entries."""

    def _compute_obs(self) -> Obs:
        obs = super()._compute_obs()
        return {**obs, POLICY: obs[POLICY][:, :9]}


class UnseededReacher(Reacher):
    """Draws its resets from a generator of its own, not the env's seeded one."""

    def _reset_state(self, env_ids: np.ndarray, rng: np.random.Generator) -> None:
        super()._reset_state(env_ids, np.random.default_rng())


def _is_robot(task: str) -> bool:
    return task_class(task).__module__.startswith("unilab_lit.envs.robots")


@pytest.mark.parametrize("task", registered_tasks())
def test_check_task_passes_on_every_builtin_task(task: str, request: pytest.FixtureRequest) -> None:
    if _is_robot(task):
        request.getfixturevalue("robot_models")
        check_task(task, num_envs=4, episode_steps=8)
    else:
        check_task(task)


def test_check_task_passes_on_the_example_task_named_as_a_config_names_it() -> None:
    check_task({"class_path": "examples.reacher.Reacher", "init_args": {"target_radius": 0.1}})


@pytest.mark.parametrize(
    ("task", "contract", "cause"),
    [
        (NarrowReacher, "reset", r"'policy': \(6, 9\).* do not match the spec"),
        (UnseededReacher, "determinism", "two envs built with one seed: resets differ"),
    ],
)
def test_check_task_names_the_broken_contract_in_one_line(task, contract, cause) -> None:
    class_path = f"{__name__}.{task.__name__}"
    with pytest.raises(TaskContractError, match=f"^{class_path}: {contract}: .*{cause}") as error:
        check_task(TaskSpec(class_path))
    assert "\n" not in str(error.value)


def test_check_task_refuses_a_single_env() -> None:
    with pytest.raises(ValueError, match=">= 4 and episode_steps >= 2, got 1, 12"):
        check_task("CartpoleSwingup", num_envs=1)
