"""The actuated robot model: a Unitree MJCF plus motors, a floor, an IMU, foot sites and "home".

The MJCF files carry bodies, joints and meshes only. :func:`build_robot` adds, with
``mujoco.MjSpec``, what a task needs: a position actuator per joint with the stiffness,
damping, armature and effort limit of the motor that drives it (Unitree's rotor inertias and
gear ratios, a 10 Hz natural frequency and a damping ratio of 2, as mjlab sizes them), a floor,
a gyro on the base, one site per foot, the standing keyframe ``home`` and a camera that keeps the
robot centred. Robot geoms touch the floor only (no self-collision), which keeps the contact
solver cheap on CPU.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import mujoco
import numpy as np

from unilab_lit.envs.robots.assets import (
    RobotModelError,
    how_to_get,
    how_to_repair,
    model_file,
)
from unilab_lit.validation import check_arg

_NATURAL_FREQ = 2.0 * math.pi * 10.0  # rad/s
_DAMPING_RATIO = 2.0
FLOOR = "floor"
IMU_SITE = "unilab_imu"
GYRO_SENSOR = "unilab_gyro"
_TRACKING_CAMERA = "unilab_track"
# Where the tracking camera sits, seen from the robot's centre of mass: model extents away,
# 20 degrees up, from the front right of the world's x axis (resets draw the heading anyway).
_CAMERA_EXTENTS = 2.0
_CAMERA_ELEVATION = math.radians(20.0)
_CAMERA_AZIMUTH = math.radians(-60.0)


@dataclass(frozen=True)
class Motor:
    """A joint motor: reflected rotor inertia (kg m^2) and peak torque (N m)."""

    armature: float
    effort_limit: float

    @property
    def stiffness(self) -> float:
        return self.armature * _NATURAL_FREQ**2

    @property
    def damping(self) -> float:
        return 2.0 * _DAMPING_RATIO * self.armature * _NATURAL_FREQ

    def doubled(self) -> Motor:
        """Two of these motors driving one joint through a linkage (ankles, waist pitch/roll)."""
        return Motor(2.0 * self.armature, 2.0 * self.effort_limit)


@dataclass(frozen=True)
class PDGains:
    """One set of PD gains for every joint, in place of the motor figures (the seed's style).

    Args:
        stiffness: Actuator kp (N m/rad), > 0.
        damping: Actuator kd (N m s/rad), >= 0.
        armature: Reflected rotor inertia of every joint (kg m^2), >= 0.
        joint_damping: Passive joint damping (N m s/rad), >= 0, on top of ``damping``.
        frictionloss: Dry joint friction (N m), >= 0.

    Raises:
        ValueError: If a figure is out of its range (the message names it).
    """

    stiffness: float
    damping: float
    armature: float
    joint_damping: float = 0.0
    frictionloss: float = 0.0

    def __post_init__(self) -> None:
        check_arg(self.stiffness > 0, "pd_gains.stiffness", self.stiffness, "> 0")
        for name in ("damping", "armature", "joint_damping", "frictionloss"):
            value = getattr(self, name)
            check_arg(value >= 0, f"pd_gains.{name}", value, ">= 0")


def two_stage_planetary(rotor_inertias: Sequence[float], gears: Sequence[float]) -> float:
    """Reflected inertia of a rotor and two planetary stages of ratios ``gears`` (g1, g2)."""
    rotor, stage1, stage2 = rotor_inertias
    g1, g2 = gears
    return rotor * (g1 * g2) ** 2 + stage1 * g2**2 + stage2


@dataclass(frozen=True)
class RobotDescription:
    """What :func:`build_robot` needs to know of one robot.

    Args:
        folder: Menagerie folder name (``unitree_go1``), which names the MJCF file too.
        base_body: The floating base.
        motors: ``(joint-name regex, motor)`` pairs; the first match drives a joint.
        home_base_height: Base height (m) of the standing keyframe.
        home_joints: ``(joint-name regex, angle)`` pairs of the keyframe; other joints at 0.
        feet: ``(body, site position in that body)`` per foot: where foot height is read.
        timestep: Physics timestep (s).
    """

    folder: str
    base_body: str
    motors: tuple[tuple[str, Motor], ...]
    home_base_height: float
    home_joints: tuple[tuple[str, float], ...]
    feet: tuple[tuple[str, tuple[float, float, float]], ...]
    timestep: float


@dataclass(frozen=True)
class RobotModel:
    """The compiled model and what a task and a deployment need to know about it.

    Per-joint arrays are in actuator order, which is the order of ``joint_names`` and of the
    task's actions.
    """

    model: mujoco.MjModel
    joint_names: tuple[str, ...]
    home_qpos: np.ndarray
    default_joint_pos: np.ndarray
    stiffness: np.ndarray
    damping: np.ndarray
    armature: np.ndarray
    effort_limit: np.ndarray
    joint_qpos_adr: np.ndarray
    joint_dof_adr: np.ndarray
    actuator_ids: np.ndarray
    base_body_id: int
    floor_geom_id: int
    gyro_adr: int
    foot_site_ids: np.ndarray


def add_pd_actuators(spec: mujoco.MjSpec, motors: Sequence[tuple[str, Motor]]) -> dict[str, Motor]:
    """Give every hinge joint of ``spec`` a position (PD) actuator sized by its motor.

    For one's own robot as for the Unitree ones: each hinge gets the motor of the first
    ``(joint-name regex, motor)`` pair that matches it, its ``armature``, and an actuator named
    after the joint with ``kp = armature * (2 pi 10 Hz)^2``, ``kd = 2 * 2 * armature * 2 pi
    10 Hz`` (damping ratio 2) and the motor's effort limit as ``forcerange``. The actuator's
    control is the joint's target angle (rad); add them in action order (the joints' order).

    Args:
        spec: The model being edited; existing actuators stay.
        motors: ``(joint-name regex, motor)`` pairs.

    Returns:
        The motor of each actuated joint, by joint name, in actuator order.

    Raises:
        KeyError: If a hinge matches no pattern.
    """
    driven: dict[str, Motor] = {}
    for joint in spec.joints:
        if joint.type != mujoco.mjtJoint.mjJNT_HINGE:
            continue
        motor = driven[joint.name] = _motor_of(joint.name, motors)
        joint.armature = motor.armature
        actuator = spec.add_actuator(
            name=joint.name, target=joint.name, trntype=mujoco.mjtTrn.mjTRN_JOINT
        )
        actuator.set_to_position(kp=motor.stiffness, kv=motor.damping)
        actuator.forcelimited = mujoco.mjtLimited.mjLIMITED_TRUE
        actuator.forcerange = [-motor.effort_limit, motor.effort_limit]
    return driven


def build_robot(robot: RobotDescription, model_dir: str | None = None) -> RobotModel:
    """Compile ``robot`` from the fetched cache or ``model_dir``, with motors, floor and sensors.

    Raises:
        RobotModelError: If the MJCF is missing, does not parse or lacks a named joint or body.
    """
    path = model_file(robot.folder, model_dir)
    try:
        spec = mujoco.MjSpec.from_file(str(path))
        return _compile(spec, robot)
    except (ValueError, KeyError) as err:
        reason = " ".join(str(err).split())
        if model_dir is None:
            raise RobotModelError(how_to_repair(robot.folder, path, reason)) from None
        raise RobotModelError(
            f"{robot.folder}: {path} is not a usable model ({reason}); {how_to_get(robot.folder)}"
        ) from None


def with_pd_gains(robot: RobotModel, gains: PDGains) -> RobotModel:
    """``robot`` with ``gains`` on every actuated joint (its model is edited in place).

    The effort limits stay the motors'; the returned per-joint arrays show the new figures.
    """
    model = robot.model
    ids = robot.actuator_ids
    model.actuator_gainprm[ids, 0] = gains.stiffness
    model.actuator_biasprm[ids, 1] = -gains.stiffness
    model.actuator_biasprm[ids, 2] = -gains.damping
    model.dof_armature[robot.joint_dof_adr] = gains.armature
    model.dof_damping[robot.joint_dof_adr] = gains.joint_damping
    model.dof_frictionloss[robot.joint_dof_adr] = gains.frictionloss
    mujoco.mj_setConst(model, mujoco.MjData(model))
    joints = len(robot.joint_names)
    # The joint's own damping and friction model the hardware; a deployment sets kp and kd.
    return dataclasses.replace(
        robot,
        stiffness=np.full(joints, gains.stiffness),
        damping=np.full(joints, gains.damping),
        armature=np.full(joints, gains.armature),
    )


def _compile(spec: mujoco.MjSpec, robot: RobotDescription) -> RobotModel:
    # A Menagerie copy brings its own actuators and keyframes; ours replace them.
    for element in [*spec.actuators, *spec.keys]:
        spec.delete(element)
    spec.option.timestep = robot.timestep
    spec.option.integrator = mujoco.mjtIntegrator.mjINT_IMPLICITFAST
    for geom in spec.geoms:
        if geom.contype or geom.conaffinity:
            geom.contype, geom.conaffinity = 0, 1
    _add_floor(spec)
    base = spec.body(robot.base_body)
    if base is None:
        raise KeyError(f"no body {robot.base_body!r}")
    base.add_site(name=IMU_SITE)
    spec.add_sensor(
        name=GYRO_SENSOR,
        type=mujoco.mjtSensor.mjSENS_GYRO,
        objtype=mujoco.mjtObj.mjOBJ_SITE,
        objname=IMU_SITE,
    )
    for body_name, position in robot.feet:
        body = spec.body(body_name)
        if body is None:
            raise KeyError(f"no foot body {body_name!r}")
        body.add_site(name=f"unilab_foot_{body_name}", pos=list(position))

    motors = add_pd_actuators(spec, robot.motors)
    names = tuple(motors)
    motors = list(motors.values())

    model = spec.compile()
    joint_ids = np.array([model.joint(name).id for name in names])
    default = np.array([_home_angle(name, robot.home_joints) for name in names])
    home = np.concatenate([[0.0, 0.0, robot.home_base_height, 1.0, 0.0, 0.0, 0.0], default])
    if home.size != model.nq:
        raise KeyError(f"expected a free base and {len(names)} hinges, got nq={model.nq}")
    spec.add_key(name="home", qpos=home.tolist(), ctrl=default.tolist())
    _add_tracking_camera(spec, model)
    model = spec.compile()

    return RobotModel(
        model=model,
        joint_names=names,
        home_qpos=home,
        default_joint_pos=default,
        stiffness=np.array([m.stiffness for m in motors]),
        damping=np.array([m.damping for m in motors]),
        armature=np.array([m.armature for m in motors]),
        effort_limit=np.array([m.effort_limit for m in motors]),
        joint_qpos_adr=model.jnt_qposadr[joint_ids].copy(),
        joint_dof_adr=model.jnt_dofadr[joint_ids].copy(),
        actuator_ids=np.array([model.actuator(name).id for name in names]),
        base_body_id=model.body(robot.base_body).id,
        floor_geom_id=model.geom(FLOOR).id,
        gyro_adr=int(model.sensor_adr[model.sensor(GYRO_SENSOR).id]),
        foot_site_ids=np.array([model.site(f"unilab_foot_{b}").id for b, _ in robot.feet]),
    )


def _add_floor(spec: mujoco.MjSpec) -> None:
    spec.add_texture(
        name="unilab_grid",
        type=mujoco.mjtTexture.mjTEXTURE_2D,
        builtin=mujoco.mjtBuiltin.mjBUILTIN_CHECKER,
        rgb1=[0.2, 0.3, 0.4],
        rgb2=[0.1, 0.2, 0.3],
        width=300,
        height=300,
    )
    material = spec.add_material(name="unilab_grid", texrepeat=[5, 5], reflectance=0.1)
    material.textures[mujoco.mjtTextureRole.mjTEXROLE_RGB] = "unilab_grid"
    spec.worldbody.add_geom(
        name=FLOOR,
        type=mujoco.mjtGeom.mjGEOM_PLANE,
        size=[0.0, 0.0, 0.05],
        material="unilab_grid",
        contype=1,
        conaffinity=1,
    )
    spec.worldbody.add_light(
        pos=[0.0, 0.0, 3.0], dir=[0.0, 0.0, -1.0], type=mujoco.mjtLightType.mjLIGHT_DIRECTIONAL
    )


def _add_tracking_camera(spec: mujoco.MjSpec, model: mujoco.MjModel) -> None:
    """A camera that looks at the robot's centre of mass from a fixed offset and moves with it,
    so the robot is centred in every frame. It is the model's first camera (world cameras come
    before body cameras, and Menagerie's files have none), so ``play`` films with it by default.

    Menagerie's ``tracking`` cameras follow the centre of mass too, but aim below it, at the
    middle of the straight-legged pose the XML is drawn in; with the legs bent for ``home`` that
    aim point is near the floor and the robot sits high and to one side of the frame.
    """
    data = mujoco.MjData(model)
    # A world camera in trackcom mode keeps its offset from the world's centre of mass (the
    # robot's: nothing else has mass) as compiled at qpos0; placing it from qpos0's centre of
    # mass makes that offset exactly the one chosen here.
    mujoco.mj_kinematics(model, data)
    mujoco.mj_comPos(model, data)
    back = np.array(
        [
            math.cos(_CAMERA_ELEVATION) * math.cos(_CAMERA_AZIMUTH),
            math.cos(_CAMERA_ELEVATION) * math.sin(_CAMERA_AZIMUTH),
            math.sin(_CAMERA_ELEVATION),
        ]
    )
    right = np.cross([0.0, 0.0, 1.0], back)
    right /= np.linalg.norm(right)
    axes = np.column_stack([right, np.cross(back, right), back])  # camera x, y, z (z backward)
    quat = np.empty(4)
    mujoco.mju_mat2Quat(quat, axes.flatten())
    spec.worldbody.add_camera(
        name=_TRACKING_CAMERA,
        mode=mujoco.mjtCamLight.mjCAMLIGHT_TRACKCOM,
        pos=(data.subtree_com[0] + _CAMERA_EXTENTS * model.stat.extent * back).tolist(),
        quat=quat.tolist(),
    )


def _motor_of(joint: str, motors: Sequence[tuple[str, Motor]]) -> Motor:
    for pattern, motor in motors:
        if re.fullmatch(pattern, joint):
            return motor
    raise KeyError(f"no motor for joint {joint!r}")


def _home_angle(joint: str, angles: Sequence[tuple[str, float]]) -> float:
    for pattern, angle in angles:
        if re.fullmatch(pattern, joint):
            return angle
    return 0.0
