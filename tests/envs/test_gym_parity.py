"""Our HalfCheetah, Hopper, Ant and Humanoid against gymnasium's own v5 environments, step for step."""

from __future__ import annotations

import pytest

from unilab_lit.envs import make_env
from unilab_lit.envs.testing import compare_with_gymnasium

pytest.importorskip("gymnasium")


@pytest.mark.parametrize(
    ("task", "gym_id"),
    [
        ("HalfCheetah", "HalfCheetah-v5"),
        ("Hopper", "Hopper-v5"),
        ("Ant", "Ant-v5"),
        ("Humanoid", "Humanoid-v5"),
    ],
)
def test_matches_gymnasium_v5_from_the_same_state(task: str, gym_id: str) -> None:
    report = compare_with_gymnasium(task, gym_id, num_envs=2, steps=250, seed=3)
    report.check(1e-6)
    # gymnasium reports every one of our terms, so each episode's term sums were compared.
    assert set(report.terms) == set(make_env(task, 1).spec.reward_terms)
    if task in ("Hopper", "Humanoid"):
        # Random actions topple these quickly, so termination was exercised.
        assert report.resyncs > 0
