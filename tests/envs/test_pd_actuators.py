"""``add_pd_actuators``: position actuators sized by motor, for any MJCF's hinge joints."""

from __future__ import annotations

import math

import mujoco
import pytest

from unilab_lit.envs.deployment import actuator_metadata
from unilab_lit.envs.robots.model import Motor, add_pd_actuators

_ARM = """
<mujoco>
  <worldbody>
    <body name="upper"><joint name="shoulder" type="hinge"/><geom type="capsule" size="0.05" fromto="0 0 0 0.3 0 0"/>
      <body name="lower" pos="0.3 0 0"><joint name="elbow" type="hinge"/>
        <geom type="capsule" size="0.04" fromto="0 0 0 0.3 0 0"/></body>
    </body>
  </worldbody>
</mujoco>
"""


def test_own_robot_gets_one_pd_actuator_per_hinge_with_its_motors_gains_and_limit():
    spec = mujoco.MjSpec.from_string(_ARM)
    shoulder, elbow = Motor(armature=0.01, effort_limit=20.0), Motor(0.005, 10.0)
    driven = add_pd_actuators(spec, [("shoulder", shoulder), (".*", elbow)])
    assert driven == {"shoulder": shoulder, "elbow": elbow}
    model = spec.compile()
    omega = 2 * math.pi * 10.0
    meta = actuator_metadata(model, [0.0, 0.0], [1.0, 1.0], {})
    assert meta["joint_names"] == ["shoulder", "elbow"]
    assert meta["actuator_kp"] == pytest.approx([0.01 * omega**2, 0.005 * omega**2])
    assert meta["actuator_kd"] == pytest.approx([4 * 0.01 * omega, 4 * 0.005 * omega])
    assert meta["effort_limit"] == [20.0, 10.0]
    assert model.dof_armature.tolist() == pytest.approx([0.01, 0.005])


def test_a_hinge_without_a_motor_is_named():
    with pytest.raises(KeyError, match="no motor for joint 'elbow'"):
        add_pd_actuators(mujoco.MjSpec.from_string(_ARM), [("shoulder", Motor(0.01, 1.0))])
