"""Our HalfCheetah, Hopper, Ant and Humanoid against gymnasium's own v5 environments, step for step."""

from __future__ import annotations

import numpy as np
import pytest

from unilab_lit.envs import make_env
from unilab_lit.envs.spec import POLICY

gym = pytest.importorskip("gymnasium")

NUM_ENVS = 2
NUM_STEPS = 250
TOLERANCE = {"rtol": 1e-6, "atol": 1e-6}


def _sync(reference, ours, row: int) -> np.ndarray:
    """Put gymnasium's env in our env's state (a fresh reset zeroes its warm start as ours)."""
    reference.reset(seed=row)
    reference.set_state(ours.qpos[row].copy(), ours.qvel[row].copy())
    return reference._get_obs()


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
    ours = make_env(task, NUM_ENVS, seed=3)
    references = [gym.make(gym_id).unwrapped for _ in range(NUM_ENVS)]
    obs = ours.reset()
    for row, reference in enumerate(references):
        np.testing.assert_allclose(obs[POLICY][row], _sync(reference, ours, row), **TOLERANCE)

    rng = np.random.default_rng(0)
    low, high = ours.spec.action_low, ours.spec.action_high
    compared_resets = 0
    # gymnasium's per-step reward terms (info["reward_<term>"]) summed since each row's reset.
    term_sums = np.zeros((NUM_ENVS, len(ours.spec.reward_terms)))
    for _ in range(NUM_STEPS):
        actions = rng.uniform(low, high, size=(NUM_ENVS, ours.spec.action_size))
        actions = actions.astype(np.float32)
        obs, reward, terminated, _, info = ours.step(actions)
        for row, reference in enumerate(references):
            ref_obs, ref_reward, ref_terminated, _, ref_info = reference.step(actions[row])
            term_sums[row] += [ref_info[f"reward_{term}"] for term in ours.spec.reward_terms]
            assert bool(terminated[row]) == bool(ref_terminated)
            np.testing.assert_allclose(reward[row], ref_reward, **TOLERANCE)
            np.testing.assert_allclose(info["final_obs"][POLICY][row], ref_obs, **TOLERANCE)
            if info["done"][row]:
                # Our env reset itself (termination or its staggered timeout): compare the
                # episode's term sums, then follow it.
                k = int(np.flatnonzero(info["episode"]["env_ids"] == row)[0])
                for column, term in enumerate(ours.spec.reward_terms):
                    ours_sum = info["episode"][f"reward/{term}"][k]
                    np.testing.assert_allclose(ours_sum, term_sums[row, column], **TOLERANCE)
                term_sums[row] = 0.0
                np.testing.assert_allclose(
                    obs[POLICY][row], _sync(reference, ours, row), **TOLERANCE
                )
                compared_resets += 1
            else:
                np.testing.assert_allclose(obs[POLICY][row], ref_obs, **TOLERANCE)
    if task in ("Hopper", "Humanoid"):
        # Random actions topple these quickly, so termination was exercised.
        assert compared_resets > 0
