"""Left-right mirror of a task's observations and actions, declared by the task for the learner.

A task whose robot and rewards are symmetric about its sagittal (x-z) plane declares a
:class:`MirrorSpec` on its ``EnvSpec``; off-policy learners with ``use_symmetry`` add the
mirrored copy of every sampled transition to their batch. A mirror is a signed permutation of
channels, ``mirrored[..., i] = sign[i] * x[..., index[i]]``, and must be an involution
(mirroring twice gives the input back), which is checked when it is built.

Under a reflection ``y -> -y``, a vector (linear velocity, gravity) flips its y component and an
axial vector (angular velocity, a rotation about an axis) flips its x and z components; left and
right limbs swap, and a joint whose axis is along x or z (abduction, roll, yaw) changes sign.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import mujoco
import numpy as np


@dataclass(frozen=True)
class Mirror:
    """A signed permutation of ``size`` channels that is its own inverse.

    Args:
        index: ``index[i]`` is the channel that channel ``i`` of the mirror is taken from.
        sign: ``+1.0`` or ``-1.0`` per channel, applied after the permutation.

    Raises:
        ValueError: If ``index`` is not a permutation, ``sign`` holds anything but ±1, the two
            differ in length, or mirroring twice is not the identity.
    """

    index: tuple[int, ...]
    sign: tuple[float, ...]

    def __post_init__(self) -> None:
        index = np.asarray(self.index)
        sign = np.asarray(self.sign)
        n = len(self.index)
        if len(self.sign) != n or sorted(self.index) != list(range(n)):
            raise ValueError(
                f"a mirror needs index to be a permutation of 0..{n - 1} and one sign per "
                f"channel, got index={self.index}, sign={self.sign}"
            )
        if not np.isin(sign, (-1.0, 1.0)).all():
            raise ValueError(f"a mirror's signs must be +1 or -1, got {self.sign}")
        if n and not (
            np.array_equal(index[index], np.arange(n)) and (sign * sign[index] == 1).all()
        ):
            raise ValueError(
                f"mirroring twice must give the input back: index={self.index}, sign={self.sign}"
            )

    @property
    def size(self) -> int:
        return len(self.index)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """The mirror of ``x [..., size]`` (numpy)."""
        return x[..., list(self.index)] * np.asarray(self.sign, dtype=x.dtype)

    @classmethod
    def signs(cls, *sign: float) -> Mirror:
        """Channels that stay in place, each multiplied by its sign."""
        return cls(tuple(range(len(sign))), tuple(float(s) for s in sign))

    @classmethod
    def vector(cls) -> Mirror:
        """A 3-vector (linear velocity, gravity): y flips."""
        return cls.signs(1, -1, 1)

    @classmethod
    def axial(cls) -> Mirror:
        """An axial 3-vector (angular velocity): x and z flip."""
        return cls.signs(-1, 1, -1)

    @classmethod
    def concat(cls, parts: Sequence[Mirror]) -> Mirror:
        """The mirror of the concatenation of the parts' channels, in order."""
        index: list[int] = []
        sign: list[float] = []
        offset = 0
        for part in parts:
            index.extend(offset + i for i in part.index)
            sign.extend(part.sign)
            offset += part.size
        return cls(tuple(index), tuple(sign))


def joint_mirror(
    names: Sequence[str], sides: Sequence[tuple[str, str]], flip: Sequence[bool]
) -> Mirror:
    """The mirror of per-joint channels (positions, velocities, actions) of joints ``names``.

    Each joint swaps with its twin, whose name has the other token of a pair in ``sides``
    (``("left_", "right_")``, or ``("FR_", "FL_")`` and ``("RR_", "RL_")``); a joint with no
    side token (a waist joint) stays. A joint with ``flip`` set (an axis along x or z under a
    y reflection: roll, yaw, abduction; see :func:`axis_flips`) changes sign.

    Raises:
        ValueError: If a joint's twin is not among ``names``.
    """
    position = {name: i for i, name in enumerate(names)}
    index = []
    for name in names:
        twin = name
        for a, b in sides:
            if a in name:
                twin = name.replace(a, b)
                break
            if b in name:
                twin = name.replace(b, a)
                break
        if twin not in position:
            raise ValueError(f"joint {name!r} has no mirror twin {twin!r} among {list(names)}")
        index.append(position[twin])
    return Mirror(tuple(index), tuple(-1.0 if f else 1.0 for f in flip))


def axis_flips(model: mujoco.MjModel, names: Sequence[str]) -> list[bool]:
    """For each hinge joint of ``names``: whether a reflection through the x-z plane flips its
    angle, i.e. whether its axis (in its body's frame) lies mostly along x or z."""
    axes = model.jnt_axis[[model.joint(name).id for name in names]]
    return [bool(i != 1) for i in np.argmax(np.abs(axes), axis=1)]


@dataclass(frozen=True)
class MirrorSpec:
    """The left-right mirror of a task: one :class:`Mirror` per observation group and the actions.

    Args:
        policy_obs: Mirror of the policy observation.
        critic_obs: Mirror of the critic observation.
        actions: Mirror of the action vector.
    """

    policy_obs: Mirror
    critic_obs: Mirror
    actions: Mirror

    def check_sizes(self, policy_obs_size: int, critic_obs_size: int, action_size: int) -> None:
        """Raise ``ValueError`` unless the mirrors fit these sizes."""
        expected = (policy_obs_size, critic_obs_size, action_size)
        actual = (self.policy_obs.size, self.critic_obs.size, self.actions.size)
        if actual != expected:
            raise ValueError(
                f"the mirror spec's sizes (policy obs, critic obs, actions) {actual} do not fit "
                f"the task's {expected}"
            )
