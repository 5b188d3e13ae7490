"""How long the Unitree robots stand on their motors' PD alone (zero action), and with what gains.

Each robot starts at its ``home`` keyframe with the PD targets there (the zero action) and runs
3 s of physics. Printed: how far the keyframe's lowest robot geom is from the floor, how long
the base stays within 5 cm of the keyframe height (the standing test's bound), when the base
tilts past 60 degrees (the tasks' termination) and the height at 3 s; then the same under
mjlab's simulation settings (0.005 s steps, 10 solver and 20 line-search iterations, feet with
friction 0.6 and priority, every other geom frictionless). For the G1 the same with
every leg and waist gain scaled (stiffness, effort limit and damping at the same damping ratio),
with the ankles alone scaled, and with the leg gains of Unitree's RL deployments (hip 100, knee
150, ankle 40 N m/rad), to show what a PD needs to hold the humanoid up. Last, why: the
stiffness of the G1's sagittal posture with both feet held flat where ``home`` puts them (an
ideal floor that neither slips nor lets a foot roll, so contact cannot be the cause): the
Hessian of gravity's potential plus the PD springs over symmetric ankle-pitch, knee, hip-pitch
and waist-pitch angles, at each leg-gain scale. A negative eigenvalue means no equilibrium
near ``home`` is stable on those gains alone; the gradient is the torque gravity puts on those
joints at ``home``, which the PDs must answer with a sag.

    python bench/zero_action_standing.py
    python bench/zero_action_standing.py --smoke    # 0.2 s stands (CI)
"""

from __future__ import annotations

import argparse
import copy
import re

import mujoco
import numpy as np
from smoke import parse_args

from unilab_lit.envs.robots.g1 import G1Walk
from unilab_lit.envs.robots.go1 import Go1Joystick
from unilab_lit.envs.robots.legged import LeggedRobotEnv

_SECONDS = 3.0  # physics per stand (--seconds)
_BAND = 0.05  # m
_LEGS_AND_WAIST = r".*_(hip|knee|ankle)_.*|waist_.*"
_FEET = {Go1Joystick: r"[FR][LR]_foot_collision", G1Walk: r"(left|right)_foot[1-7]_collision"}
_UNITREE_LEG_KP = ((r".*_hip_.*", 100.0), (r".*_knee_joint", 150.0), (r".*_ankle_.*", 40.0))
_SAGITTAL = ("ankle pitch", r".*_ankle_pitch_joint"), ("knee", r".*_knee_joint")
_SAGITTAL += ("hip pitch", r".*_hip_pitch_joint"), ("waist pitch", r"waist_pitch_joint")


def _stand(env: LeggedRobotEnv, model: mujoco.MjModel, seconds: float) -> str:
    data = mujoco.MjData(model)
    data.qpos[:] = env.robot.home_qpos
    data.ctrl[:] = env.default_joint_pos
    start = float(data.qpos[2])
    steps = round(seconds / model.opt.timestep)
    heights = np.empty(steps)
    fell = None
    for i in range(steps):
        mujoco.mj_step(model, data)
        heights[i] = data.qpos[2]
        quat = data.qpos[3:7]
        if fell is None and 1.0 - 2.0 * (quat[1] ** 2 + quat[2] ** 2) <= 0.5:
            fell = (i + 1) * model.opt.timestep
    inside = np.abs(heights - start) < _BAND
    held = seconds if inside.all() else np.argmin(inside) * model.opt.timestep
    fell_text = "never" if fell is None else f"{fell:.2f} s"
    return f"within 5 cm for {held:.2f} s, tilts past 60 deg: {fell_text}, z({seconds:g} s) {heights[-1]:.3f}"


def _scaled(env: LeggedRobotEnv, kp: dict[int, float]) -> mujoco.MjModel:
    """The model with the stiffness of actuator ``i`` set to ``kp[i]`` (same damping ratio)."""
    model = copy.deepcopy(env.model)
    for actuator, stiffness in kp.items():
        factor = stiffness / model.actuator_gainprm[actuator, 0]
        model.actuator_gainprm[actuator, 0] = stiffness
        model.actuator_biasprm[actuator, 1] = -stiffness
        model.actuator_biasprm[actuator, 2] *= np.sqrt(factor)
        model.actuator_forcerange[actuator] *= max(factor, 1.0)
    return model


def _mjlab_settings(env: LeggedRobotEnv, feet: str) -> mujoco.MjModel:
    model = copy.deepcopy(env.model)
    model.opt.timestep = 0.005
    model.opt.iterations, model.opt.ls_iterations = 10, 20
    for geom in range(model.ngeom):
        if geom == env.floor_geom_id or not model.geom_conaffinity[geom]:
            continue
        if re.fullmatch(feet, model.geom(geom).name):
            model.geom_priority[geom] = 1
            model.geom_friction[geom, 0] = 0.6
        else:
            model.geom_condim[geom] = 1
    return model


def _matching(env: LeggedRobotEnv, pattern: str) -> list[int]:
    ids = env.actuator_ids
    return [int(ids[i]) for i, name in enumerate(env.joint_names) if re.fullmatch(pattern, name)]


def _clearance(env: LeggedRobotEnv) -> float:
    model = env.model
    data = mujoco.MjData(model)
    data.qpos[:] = env.robot.home_qpos
    mujoco.mj_forward(model, data)
    floor = env.floor_geom_id
    robot = [g for g in range(model.ngeom) if g != floor and model.geom_conaffinity[g]]
    return min(mujoco.mj_geomDistance(model, data, floor, g, 1.0, None) for g in robot)


def _sagittal_stiffness(env: LeggedRobotEnv, factor: float) -> tuple[np.ndarray, np.ndarray]:
    """Gradient (N m) and Hessian (N m/rad) of the potential energy at ``home`` over the
    ``_SAGITTAL`` angles, both feet held at their ``home`` pose, leg gains x ``factor``."""
    model, home = env.model, env.robot.home_qpos
    data = mujoco.MjData(model)
    groups = [_matching(env, pattern) for _, pattern in _SAGITTAL]
    qpos_adr = [model.jnt_qposadr[model.actuator_trnid[ids, 0]] for ids in groups]
    kp = [factor * model.actuator_gainprm[ids, 0] for ids in groups]
    foot = model.body("left_ankle_roll_link").id
    data.qpos[:] = home
    mujoco.mj_kinematics(model, data)
    foot_pos, foot_quat = data.xpos[foot].copy(), data.xquat[foot].copy()

    def energy(angles: np.ndarray) -> float:
        data.qpos[:] = home
        data.qpos[:7] = [0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]
        for adr, angle in zip(qpos_adr, angles, strict=True):
            data.qpos[adr] += angle
        mujoco.mj_kinematics(model, data)
        # Move the base so that the left foot is back at its home pose (symmetric angles bring
        # the right foot back with it).
        inverse = np.empty(4)
        mujoco.mju_negQuat(inverse, data.xquat[foot])
        base_quat, base_mat = np.empty(4), np.empty(9)
        mujoco.mju_mulQuat(base_quat, foot_quat, inverse)
        mujoco.mju_quat2Mat(base_mat, base_quat)
        data.qpos[:3] = foot_pos - base_mat.reshape(3, 3) @ data.xpos[foot]
        data.qpos[3:7] = base_quat
        mujoco.mj_kinematics(model, data)
        gravity = -model.opt.gravity[2] * float(model.body_mass @ data.xipos[:, 2])
        springs = sum(0.5 * k.sum() * a**2 for k, a in zip(kp, angles, strict=True))
        return gravity + springs

    n, eps = len(groups), 1e-4
    steps = np.eye(n) * eps
    gradient = np.array([(energy(e) - energy(-e)) / (2 * eps) for e in steps])
    hessian = np.array(
        [
            [
                (energy(a + b) - energy(a - b) - energy(b - a) + energy(-a - b)) / (4 * eps**2)
                for b in steps
            ]
            for a in steps
        ]
    )
    return gradient, hessian


def _explain_g1(env: LeggedRobotEnv) -> None:
    names = ", ".join(name for name, _ in _SAGITTAL)
    print(f"  sagittal stiffness, feet held ({names}):")
    for factor in (1, 2, 4, 8):
        gradient, hessian = _sagittal_stiffness(env, factor)
        eigenvalues = np.linalg.eigvalsh(hessian)
        verdict = "unstable" if eigenvalues[0] < 0 else "stable"
        print(f"    x{factor}: eigenvalues {np.round(eigenvalues, 1)} N m/rad ({verdict})")
        if factor == 1:
            ankles = env.model.actuator_gainprm[_matching(env, _SAGITTAL[0][1]), 0].sum()
            print(
                f"    gravity's torque at home {np.round(-gradient, 1)} N m; tipping about the "
                f"ankles alone: m g h {ankles - hessian[0, 0]:.0f} N m/rad against the ankle "
                f"PDs' {ankles:.0f}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=_SECONDS, help="physics per stand")
    args = parse_args(parser, seconds=0.2)
    for task in (Go1Joystick, G1Walk):
        env = task(num_envs=1, reset_joint_noise=0.0)
        name = task.__name__
        print(
            f"{name}: keyframe base height {env.robot.home_qpos[2]:.3f} m, lowest geom "
            f"{100 * _clearance(env):+.1f} cm from the floor"
        )
        print(f"  as built: {_stand(env, env.model, args.seconds)}")
        print(
            f"  mjlab's simulation settings: {_stand(env, _mjlab_settings(env, _FEET[task]), args.seconds)}"
        )
        if task is not G1Walk:
            continue
        gain = env.model.actuator_gainprm[:, 0]
        for factor in (2, 4, 8):
            legs = {i: factor * gain[i] for i in _matching(env, _LEGS_AND_WAIST)}
            print(f"  legs and waist x{factor}: {_stand(env, _scaled(env, legs), args.seconds)}")
        ankles = {i: 8 * gain[i] for i in _matching(env, r".*_ankle_.*")}
        print(f"  ankles alone x8: {_stand(env, _scaled(env, ankles), args.seconds)}")
        unitree = {i: kp for pattern, kp in _UNITREE_LEG_KP for i in _matching(env, pattern)}
        print(f"  Unitree's leg gains: {_stand(env, _scaled(env, unitree), args.seconds)}")
        _explain_g1(env)


if __name__ == "__main__":
    main()
