"""deployment_metadata(): what a deployment script needs, derived from the task's model."""

from __future__ import annotations

import json

import numpy as np
import pytest

from unilab_lit.envs import make_env
from unilab_lit.envs.quadruped import POLICY_OBS_LAYOUT, QuadrupedJoystick


def test_quadruped_metadata_names_joints_pose_action_map_gains_and_layout():
    env = QuadrupedJoystick(1)
    meta = env.deployment_metadata()
    json.dumps(meta)  # plain JSON values
    model = env.model
    assert meta["joint_names"] == [
        model.joint(int(model.actuator_trnid[i, 0])).name for i in range(12)
    ]
    assert meta["joint_names"][:3] == ["FR_abduction", "FR_flexion", "FR_knee"]
    home = model.key("home").qpos[7:]
    assert meta["default_joint_pos"] == pytest.approx(home.tolist())
    assert meta["action_offset"] == pytest.approx(home.tolist())
    assert meta["action_scale"] == [0.25] * 12
    assert meta["actuator_kp"] == [60.0] * 12 and meta["actuator_kd"] == [1.5] * 12
    assert meta["actuator_gear"] == [1.0] * 12
    assert meta["effort_limit"] == pytest.approx([23.7, 23.7, 35.5] * 4)
    layout = meta["observation_layout"]
    assert [entry["name"] for entry in layout] == [name for name, _ in POLICY_OBS_LAYOUT]
    assert layout[0]["start"] == 0 and layout[-1]["stop"] == env.spec.obs_sizes["policy"]
    assert all(a["stop"] == b["start"] for a, b in zip(layout, layout[1:], strict=False))


def test_action_map_of_the_metadata_is_the_control_the_env_applies():
    env = QuadrupedJoystick(2, seed=0)
    env.reset()
    meta = env.deployment_metadata()
    actions = np.random.default_rng(0).uniform(-1, 1, (2, 12)).astype(np.float32)
    env.step(actions)
    expected = np.asarray(meta["action_offset"]) + np.asarray(meta["action_scale"]) * actions
    np.testing.assert_allclose(env.ctrl, expected, rtol=1e-6)


def test_a_motor_driven_task_gets_no_pd_gains_its_gears_and_one_observation_term():
    env = make_env("HalfCheetah", 1)
    meta = env.deployment_metadata()
    # gymnasium's half_cheetah.xml: ctrl 1.0 on the back thigh is 120 N m.
    assert meta["actuator_gear"] == [120.0, 90.0, 60.0, 120.0, 60.0, 30.0]
    assert meta["effort_limit"] == [None] * 6
    assert meta["actuator_kp"] == [None] * 6 and meta["actuator_kd"] == [None] * 6
    assert meta["action_offset"] == [0.0] * 6 and meta["action_scale"] == [1.0] * 6
    assert meta["observation_layout"] == [{"name": "policy", "start": 0, "stop": 17}]
