"""Deployment metadata derived from a compiled model: what a robot's deployment script needs
besides the policy (export writes it beside the ONNX/TorchScript policy)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import mujoco
import numpy as np


def actuator_metadata(
    model: mujoco.MjModel,
    action_offset: np.ndarray,
    action_scale: np.ndarray,
    obs_slices: Mapping[str, tuple[int, int]],
) -> dict[str, Any]:
    """Per actuator in action order, as JSON values: ``joint_names`` (the actuated joint, or the
    actuator's name when it drives no joint), ``default_joint_pos`` (the joint's position in the
    ``home`` keyframe, else in ``qpos0``), ``action_offset`` / ``action_scale``
    (``ctrl = action_offset + action_scale * action``), ``actuator_kp`` / ``actuator_kd`` (the
    PD gains of a position actuator, ``null`` for other kinds), ``actuator_gear`` (the
    transmission's gear: a motor's joint torque is ``actuator_gear * ctrl``, so with gear 100
    ctrl 1.0 is 100 N m), ``effort_limit`` (``null`` when unlimited); and ``observation_layout``, the ``name``, ``start`` and ``stop`` of each term of
    the policy observation (``obs_slices``)."""
    keyframe = next((k for k in range(model.nkey) if model.key(k).name == "home"), None)
    qpos = model.qpos0 if keyframe is None else model.key(keyframe).qpos
    names: list[str] = []
    default_pos: list[float | None] = []
    kp: list[float | None] = []
    kd: list[float | None] = []
    for i in range(model.nu):
        joint = int(model.actuator_trnid[i, 0])
        drives_joint = model.actuator_trntype[i] == mujoco.mjtTrn.mjTRN_JOINT
        names.append(model.joint(joint).name if drives_joint else model.actuator(i).name)
        default_pos.append(float(qpos[model.jnt_qposadr[joint]]) if drives_joint else None)
        gain, bias = model.actuator_gainprm[i], model.actuator_biasprm[i]
        position = (
            model.actuator_gaintype[i] == mujoco.mjtGain.mjGAIN_FIXED
            and model.actuator_biastype[i] == mujoco.mjtBias.mjBIAS_AFFINE
            and bias[1] == -gain[0]
        )
        kp.append(float(gain[0]) if position else None)
        kd.append(float(-bias[2]) if position else None)
    limited = model.actuator_forcelimited.astype(bool)
    return {
        "joint_names": names,
        "default_joint_pos": default_pos,
        "action_offset": [float(v) for v in action_offset],
        "action_scale": [float(v) for v in action_scale],
        "actuator_kp": kp,
        "actuator_kd": kd,
        "actuator_gear": [float(g) for g in model.actuator_gear[:, 0]],
        "effort_limit": [
            float(high) if on else None
            for on, high in zip(limited, model.actuator_forcerange[:, 1], strict=True)
        ],
        "observation_layout": [
            {"name": name, "start": start, "stop": stop}
            for name, (start, stop) in obs_slices.items()
        ],
    }
