"""Contact forces of an RK4 model's last integration stage, as gymnasium's Ant reads them."""

from __future__ import annotations

from pathlib import Path

import mujoco
import numpy as np
from mujoco import batch as mj_batch


class LastStageContactForces:
    """``cfrc_ext`` as gymnasium reads it after ``mj_step`` with the RK4 integrator.

    Gymnasium calls ``mj_rnePostConstraint`` after ``mj_step``; with RK4 the contacts and
    constraint forces left in ``mjData`` then belong to the last Runge-Kutta stage of the last
    substep, not to the state the step ends in. ``Batch`` does not run ``mj_rnePostConstraint``,
    so this probe recovers that stage's ``qpos``/``qvel`` from the derived fields the main batch
    reports (they describe that stage), loads them on a second batch over the state saved
    before the substep (same warm start and controls) and reads ``cfrc_ext`` from a forward
    pass, which an accelerometer makes compute it. Recovering the stage needs a free root joint
    and hinges driven one-to-one by joint actuators (the gymnasium Ant).

    Args:
        xml_path: The MJCF file of the main model.
        main: The batch whose last step is probed.
        num_threads: Threads of the probe's batch.

    Raises:
        ValueError: If the model's joints are not a free root plus actuated hinges.
    """

    def __init__(self, xml_path: Path, main: mj_batch.Batch, num_threads: int) -> None:
        spec = mujoco.MjSpec.from_file(str(xml_path))
        spec.worldbody.add_site(name="_rne_post_constraint_probe")
        spec.add_sensor(
            type=mujoco.mjtSensor.mjSENS_ACCELEROMETER,
            objtype=mujoco.mjtObj.mjOBJ_SITE,
            objname="_rne_post_constraint_probe",
        )
        model = spec.compile()
        joints = model.actuator_trnid[:, 0]
        hinges = set(range(1, model.njnt))
        if (
            model.jnt_type[0] != mujoco.mjtJoint.mjJNT_FREE
            or any(model.jnt_type[j] != mujoco.mjtJoint.mjJNT_HINGE for j in hinges)
            or (model.actuator_trntype != mujoco.mjtTrn.mjTRN_JOINT).any()
            or sorted(joints.tolist()) != sorted(hinges)
        ):
            raise ValueError(
                f"{xml_path.name}: the contact-force probe needs a free root joint and hinges "
                "each driven by one joint actuator"
            )
        self._root = int(model.jnt_bodyid[0])
        self._hinge_q = model.jnt_qposadr[joints]
        self._hinge_v = model.jnt_dofadr[joints]
        self._gear = model.actuator_gear[:, 0].copy()
        self._main = {
            name: main.bind(name)
            for name in ("xpos", "xquat", "cvel", "cdof", "actuator_length", "actuator_velocity")
        }
        self._batch = mj_batch.Batch(model, nsim=main.nsim, nthread=num_threads)
        self._state = self._batch.state
        self._qpos = self._batch.bind("qpos")
        self._qvel = self._batch.bind("qvel")
        self._cfrc_ext = self._batch.bind("cfrc_ext")

    def forces(self, state_before_last_substep: np.ndarray) -> np.ndarray:
        """``cfrc_ext`` ``[num_envs, nbody, 6]`` of the last stage of the main batch's last step."""
        main, root = self._main, self._root
        self._state[:] = state_before_last_substep
        # A free joint places its body directly: xpos/xquat are qpos[0:3] and the normalised
        # qpos[3:7]; joint actuators report gear * (hinge position, hinge velocity).
        self._qpos[:, 0:3] = main["xpos"][:, root]
        self._qpos[:, 3:7] = main["xquat"][:, root]
        self._qpos[:, self._hinge_q] = main["actuator_length"] / self._gear
        self._qvel[:, self._hinge_v] = main["actuator_velocity"] / self._gear
        # The root's com-based velocity is the free joint's six motion axes times its qvel.
        axes = np.swapaxes(main["cdof"][:, 0:6], 1, 2)
        self._qvel[:, 0:6] = np.linalg.solve(axes, main["cvel"][:, root, :, None])[..., 0]
        self._batch.forward()
        return self._cfrc_ext
