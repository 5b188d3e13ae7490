"""Left-right mirror specs: their contract, and QuadrupedJoystick's against its physics."""

from __future__ import annotations

import numpy as np
import pytest

from unilab_lit.envs import make_env
from unilab_lit.envs.quadruped import JOINT_NAMES, MIRROR, QuadrupedJoystick
from unilab_lit.envs.spec import CRITIC, POLICY
from unilab_lit.envs.symmetry import Mirror, axis_flips, joint_mirror

LEG_SWAP = [3, 4, 5, 0, 1, 2, 9, 10, 11, 6, 7, 8]
ABDUCTION_SIGN = np.array([-1.0, 1.0, 1.0] * 4)


def _mirror_joints(x: np.ndarray) -> np.ndarray:
    return x[..., LEG_SWAP] * ABDUCTION_SIGN


def _mirror_physics(qpos: np.ndarray, qvel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The quadruped's state reflected through the world's x-z plane, written out by hand."""
    mirrored_qpos = qpos.copy()
    mirrored_qpos[1] = -qpos[1]  # y
    mirrored_qpos[3:7] = qpos[3:7] * [1.0, -1.0, 1.0, -1.0]  # (w, x, y, z) -> (w, -x, y, -z)
    mirrored_qpos[7:] = _mirror_joints(qpos[7:])
    mirrored_qvel = qvel.copy()
    mirrored_qvel[0:3] = qvel[0:3] * [1.0, -1.0, 1.0]  # world linear velocity: a vector
    mirrored_qvel[3:6] = qvel[3:6] * [-1.0, 1.0, -1.0]  # body angular velocity: axial
    mirrored_qvel[6:] = _mirror_joints(qvel[6:])
    return mirrored_qpos, mirrored_qvel


@pytest.mark.parametrize("mirror", [MIRROR.policy_obs, MIRROR.critic_obs, MIRROR.actions])
def test_mirroring_twice_gives_the_input_back(mirror):
    x = np.random.default_rng(0).normal(size=(5, mirror.size))
    assert np.array_equal(mirror(mirror(x)), x)
    assert not np.array_equal(mirror(x), x)


@pytest.mark.parametrize(
    ("index", "sign", "match"),
    [
        ((0, 0), (1.0, 1.0), "permutation"),
        ((1, 0), (1.0, 0.5), r"\+1 or -1"),
        ((1, 2, 0), (1.0, 1.0, 1.0), "twice"),  # a 3-cycle is no reflection
        ((1, 0), (1.0, -1.0), "twice"),  # swapped channels need one sign
    ],
)
def test_a_mirror_that_is_not_a_signed_involution_is_refused(index, sign, match):
    with pytest.raises(ValueError, match=match):
        Mirror(index, sign)


def test_joint_mirror_swaps_twins_by_name_and_negates_roll_and_yaw_axes():
    names = [
        "left_hip_roll",
        "left_knee",
        "waist_yaw",
        "waist_pitch",
        "right_hip_roll",
        "right_knee",
    ]
    flip = [name.endswith(("roll", "yaw")) for name in names]
    mirror = joint_mirror(names, [("left_", "right_")], flip)
    assert mirror.index == (4, 5, 2, 3, 0, 1)
    assert mirror.sign == (-1.0, 1.0, -1.0, 1.0, -1.0, 1.0)
    with pytest.raises(ValueError, match="no mirror twin 'right_elbow'"):
        joint_mirror(["left_elbow"], [("left_", "right_")], [False])


def test_quadruped_joint_names_are_its_actuated_joints_in_action_order():
    model = QuadrupedJoystick(1).model
    assert tuple(model.joint(int(j)).name for j in model.actuator_trnid[:, 0]) == JOINT_NAMES
    # Only the abduction joints turn about an axis off y: they are the ones whose sign flips.
    assert axis_flips(model, JOINT_NAMES) == [n.endswith("abduction") for n in JOINT_NAMES]


def test_quadruped_spec_carries_its_mirror_and_the_plain_tasks_none():
    assert make_env("QuadrupedJoystick", 1).spec.mirror == MIRROR
    assert make_env("CartpoleSwingup", 1).spec.mirror is None


def test_quadruped_mirrored_state_and_mirrored_action_give_the_mirrored_step():
    # Env 0 runs a generic state; env 1 is set to its reflection by hand (physics, command,
    # last actions). The mirror spec must then map env 0's observation to env 1's, and the
    # mirrored action must carry env 1 to the reflection of env 0's next state, same reward.
    env = QuadrupedJoystick(2, seed=3)
    env.reset(stagger=False)
    rng = np.random.default_rng(1)
    for _ in range(10):
        env.step(rng.uniform(-0.5, 0.5, (2, 12)).astype(np.float32))
    state = env.state_dict()
    task = state["task"]
    for key in ("command", "tracked_command"):
        task[key][1] = task[key][0] * [1.0, -1.0, -1.0]  # (vx, vy, yaw rate)
    for key in ("last_action", "previous_action"):
        task[key][1] = _mirror_joints(task[key][0])
    env.load_state_dict(state)
    env.qpos[1], env.qvel[1] = _mirror_physics(env.qpos[0], env.qvel[0])
    # The solver starts from the last accelerations: mirrored as well, for a mirrored solution.
    warmstart = env.batch.bind("qacc_warmstart")
    warmstart[1] = _mirror_physics(env.qpos[0], warmstart[0])[1]
    env.batch.forward()

    for _ in range(5):
        action = rng.uniform(-0.5, 0.5, 12).astype(np.float32)
        obs, reward, terminated, *_ = env.step(np.stack([action, MIRROR.actions(action)]))
        np.testing.assert_allclose(obs[POLICY][1], MIRROR.policy_obs(obs[POLICY][0]), atol=1e-6)
        np.testing.assert_allclose(obs[CRITIC][1], MIRROR.critic_obs(obs[CRITIC][0]), atol=1e-6)
        np.testing.assert_allclose(reward[1], reward[0], rtol=1e-4)
        assert not terminated.any()
