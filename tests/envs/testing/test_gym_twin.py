"""compare_with_gymnasium: the example task against gymnasium's Reacher on the example's model,
and a copy of it whose reward is wrong."""

from __future__ import annotations

import numpy as np
import pytest

from examples.reacher import XML_FILE, Reacher
from unilab_lit.envs.testing import TaskContractError, TwinReport, compare_with_gymnasium

pytest.importorskip("gymnasium")

# gymnasium's Reacher on the example's MJCF, with the example's weight of the squared action.
TWIN_KWARGS = {"xml_file": str(XML_FILE), "reward_control_weight": 0.01}


class CostlyReacher(Reacher):
    """The example with its action cost counted twice: a reward gymnasium does not give."""

    def _compute_reward(self, actions: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        reward, terms = super()._compute_reward(actions)
        return reward + terms["ctrl"], terms


def _compare(class_path: str) -> TwinReport:
    return compare_with_gymnasium(class_path, "Reacher-v5", gym_kwargs=TWIN_KWARGS, steps=120)


def test_example_task_matches_gymnasium_reacher_from_the_same_states() -> None:
    report = _compare("examples.reacher.Reacher")
    report.check(1e-6)
    assert set(report.terms) == {"dist", "ctrl"}
    assert report.resyncs > 0 and report.steps == 120  # episodes ended and were followed


def test_a_wrong_reward_is_reported_and_refused_in_one_line() -> None:
    report = _compare(f"{__name__}.CostlyReacher")
    assert report.obs <= 1e-6 and report.terms["dist"] <= 1e-6
    assert report.reward > 1e-4
    with pytest.raises(
        TaskContractError, match=r"CostlyReacher and Reacher-v5 differ beyond 1e-06: reward \d"
    ) as error:
        report.check(1e-6)
    assert "obs" not in str(error.value) and "\n" not in str(error.value)


def test_a_twin_that_is_not_a_mujoco_env_is_refused() -> None:
    with pytest.raises(ValueError, match="'CartPole-v1' is not a gymnasium MuJoCo env"):
        compare_with_gymnasium("examples.reacher.Reacher", "CartPole-v1")
