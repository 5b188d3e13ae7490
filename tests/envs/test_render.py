"""Offscreen frames of every kind of task, and full first episodes for evaluation."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

from unilab_lit.envs import make_env
from unilab_lit.envs.render import BatchFrameRenderer

# One task per kind: our own MJCF, gymnasium's MJCF, a model without cameras, the adapter.
TASKS = [
    ("CartpoleSwingup", {}),
    ("HalfCheetah", {}),
    ("QuadrupedJoystick", {}),
    ("gym:Hopper-v5", {"env_kwargs": {"render_mode": "rgb_array", "width": 96, "height": 64}}),
]


@pytest.mark.parametrize(("task", "kwargs"), TASKS, ids=[t for t, _ in TASKS])
def test_render_gives_rgb_frames_that_follow_the_state_for_every_task(task, kwargs):
    env = make_env(task, 2, seed=0, **kwargs)
    try:
        env.reset(seed=0)
        before = env.render([0, 1], 96, 64)
        rng = np.random.default_rng(0)
        for _ in range(10):
            env.step(rng.uniform(-1, 1, (2, env.spec.action_size)).astype(np.float32))
        after = env.render([1], 96, 64)
    finally:
        env.close()
    assert before.shape == (2, 64, 96, 3) and before.dtype == np.uint8
    assert before.std() > 1.0, "a blank frame"
    assert not np.array_equal(before[1], after[0]), "the frame did not follow the simulation"


def test_render_names_the_cameras_when_the_camera_is_unknown():
    env = make_env("CartpoleSwingup", 1)
    env.reset(seed=0)
    try:
        with pytest.raises(ValueError, match="'fixed'"):
            env.render([0], 32, 32, camera="nope")
    finally:
        env.close()


def test_gym_render_refuses_env_made_without_rgb_array():
    env = make_env("gym:Hopper-v5", 1)
    env.reset(seed=0)
    try:
        with pytest.raises(ValueError, match="render_mode"):
            env.render([0])
    finally:
        env.close()


def test_reset_without_stagger_gives_every_env_a_full_first_episode():
    env = make_env("CartpoleSwingup", 4, max_episode_steps=20)
    env.reset(seed=0, stagger=False)
    lengths = []
    for _ in range(20):
        _, _, _, _, info = env.step(np.zeros((4, 1), dtype=np.float32))
        lengths += info["episode"]["length"].tolist()
    env.close()
    assert lengths == [20.0] * 4


def test_render_draws_the_floor_under_a_walker_past_the_planes_edge():
    # gymnasium's HalfCheetah floor is a 40 m half-size plane; a good runner passes its edge.
    env = make_env("HalfCheetah", 2, seed=0)
    try:
        env.reset(seed=0, stagger=False)
        env.qpos[1, 0] += 60.0
        frames = env.render([0, 1], 96, 64).astype(np.float32)
    finally:
        env.close()
    floor = frames[:, 48:]  # the bottom quarter, below the walker
    # The checker shows in both (a grey void past the edge has a std of ~9).
    assert (floor.std(axis=(1, 2, 3)) > 40.0).all(), floor.std(axis=(1, 2, 3))


def test_frames_are_drawn_without_shadows_and_reflections():
    # Under software GL they cost three quarters of a frame (docs/play.md).
    env = make_env("QuadrupedJoystick", 1, seed=0)
    try:
        env.reset(seed=0)
        renderer = BatchFrameRenderer(env._model, env.batch, 96, 64)
        frame = renderer.render([0])
        flags = renderer._renderer.scene.flags
        renderer.close()
    finally:
        env.close()
    assert not flags[mujoco.mjtRndFlag.mjRND_SHADOW]
    assert not flags[mujoco.mjtRndFlag.mjRND_REFLECTION]
    assert frame.std() > 1.0, "a blank frame"
