"""QuadrupedJoystick: spec, standing, falling, commands, rewards and determinism."""

from __future__ import annotations

import numpy as np
import pytest

from unilab_lit.envs import make_env
from unilab_lit.envs.quadruped import DEFAULT_REWARD_WEIGHTS, QuadrupedJoystick, rotate_to_body
from unilab_lit.envs.spec import CRITIC, POLICY

# Column layout of the policy observation (see the class docstring).
ANG_VEL, GRAVITY, COMMAND = slice(0, 3), slice(3, 6), slice(6, 9)
JOINT_POS, JOINT_VEL, LAST_ACTION = slice(9, 21), slice(21, 33), slice(33, 45)


def _zeros(env: QuadrupedJoystick) -> np.ndarray:
    return np.zeros((env.num_envs, env.spec.action_size), dtype=np.float32)


def _body_axis_in_world(quat: np.ndarray, axis: int) -> np.ndarray:
    """Column ``axis`` of the rotation matrix of each (w, x, y, z) quaternion."""
    w, x, y, z = quat.T
    columns = [
        np.stack([1 - 2 * (y * y + z * z), 2 * (x * y + w * z), 2 * (x * z - w * y)], axis=1),
        np.stack([2 * (x * y - w * z), 1 - 2 * (x * x + z * z), 2 * (y * z + w * x)], axis=1),
    ]
    return columns[axis]


def test_spec_declares_groups_actions_and_timing_when_built_by_name():
    env = make_env("QuadrupedJoystick", num_envs=3, seed=0)
    obs = env.reset()
    assert isinstance(env, QuadrupedJoystick)
    assert env.spec.obs_sizes == {POLICY: 45, CRITIC: 48}
    assert env.spec.action_size == 12
    np.testing.assert_array_equal(env.spec.action_low, -np.ones(12, dtype=np.float32))
    np.testing.assert_array_equal(env.spec.action_high, np.ones(12, dtype=np.float32))
    assert env.spec.control_dt == pytest.approx(0.02)
    assert env.spec.max_episode_steps == 1000
    assert env.spec.reward_terms == tuple(DEFAULT_REWARD_WEIGHTS)
    for group, size in env.spec.obs_sizes.items():
        assert obs[group].shape == (3, size)
        assert obs[group].dtype == np.float32
    next_obs, reward, terminated, truncated, info = env.step(_zeros(env))
    assert next_obs[POLICY].shape == (3, 45) and next_obs[CRITIC].shape == (3, 48)
    assert reward.dtype == np.float32 and reward.shape == (3,)
    assert terminated.dtype == bool and truncated.dtype == bool
    assert set(info) >= {"final_obs", "done", "episode", "nonfinite_resets"}


def test_stands_without_falling_under_zero_actions_for_two_seconds():
    env = make_env("QuadrupedJoystick", num_envs=16, seed=3)
    env.reset()
    steps = round(2.0 / env.spec.control_dt)
    for _ in range(steps):
        obs, _, terminated, _, info = env.step(_zeros(env))
        assert not terminated.any()
        assert info["nonfinite_resets"] == 0
    assert np.all(env.qpos[:, 2] > 0.22)
    # Level trunk: gravity points straight down in the body frame.
    assert np.all(obs[POLICY][:, GRAVITY][:, 2] < -0.99)


def test_terminates_when_pushed_over_sideways():
    env = make_env("QuadrupedJoystick", num_envs=8, seed=1)
    env.reset()
    for _ in range(25):  # settle on the feet first
        env.step(_zeros(env))
    side = _body_axis_in_world(env.qpos[:, 3:7], axis=1)
    env.qvel[:, 0:3] = 3.0 * side  # a 3 m/s shove along the trunk's left axis
    fell = np.zeros(env.num_envs, dtype=bool)
    for _ in range(25):
        obs, reward, terminated, truncated, info = env.step(_zeros(env))
        newly = terminated & ~fell
        # A fallen env is reset at once: the final observation is tilted, the next is upright.
        if newly.any():
            final_gravity = info["final_obs"][POLICY][newly][:, GRAVITY]
            fresh_gravity = obs[POLICY][newly][:, GRAVITY]
            assert np.all(final_gravity[:, 2] > -0.5)
            np.testing.assert_allclose(fresh_gravity, [[0, 0, -1]] * int(newly.sum()), atol=1e-6)
        fell |= terminated
    assert fell.all()


def test_last_action_is_the_clipped_action_when_actions_exceed_bounds():
    env = make_env("QuadrupedJoystick", num_envs=2, seed=0)
    env.reset()
    actions = np.full((2, 12), 0.5, dtype=np.float32)
    actions[0, :6] = 3.0
    obs, *_ = env.step(actions)
    expected = np.clip(actions, -1.0, 1.0)
    np.testing.assert_array_equal(obs[POLICY][:, LAST_ACTION], expected)
    np.testing.assert_array_equal(obs[CRITIC][:, :45], obs[POLICY])


def test_commands_change_only_every_resample_interval_when_episodes_run_on():
    env = QuadrupedJoystick(num_envs=4, seed=5, command_resample_steps=5, max_episode_steps=100_000)
    obs = env.reset()
    commands = [obs[POLICY][:, COMMAND]]
    for _ in range(12):
        obs, _, _, _, info = env.step(_zeros(env))
        assert not info["done"].any()
        commands.append(obs[POLICY][:, COMMAND])
    changed = [not np.array_equal(a, b) for a, b in zip(commands, commands[1:], strict=False)]
    # Steps 5 and 10 draw a new command for every env; no other step changes it.
    assert changed == [i in (4, 9) for i in range(12)]
    stacked = np.stack(commands)
    assert np.all(np.abs(stacked[..., 0]) <= 1.0) and np.all(np.abs(stacked[..., 1]) <= 0.5)
    assert np.all(np.abs(stacked[..., 2]) <= 1.0)


def test_episode_return_equals_sum_of_reward_terms_when_episodes_time_out():
    env = QuadrupedJoystick(num_envs=4, seed=2, max_episode_steps=6)
    env.reset()
    rng = np.random.default_rng(0)
    finished = 0
    for _ in range(12):
        actions = rng.uniform(-1, 1, (4, 12)).astype(np.float32)
        *_, info = env.step(actions)
        episode = info["episode"]
        terms = sum(episode[f"reward/{term}"] for term in env.spec.reward_terms)
        np.testing.assert_allclose(episode["return"], terms, rtol=1e-5, atol=1e-6)
        finished += episode["return"].size
    assert finished >= 4


def test_standing_still_earns_more_when_commanded_to_stand_than_to_walk():
    def mean_reward(vx: float) -> np.ndarray:
        env = QuadrupedJoystick(
            num_envs=4,
            seed=0,
            lin_vel_x_range=(vx, vx),
            lin_vel_y_range=(0.0, 0.0),
            yaw_rate_range=(0.0, 0.0),
            max_episode_steps=500,
        )
        env.reset()
        rewards = [env.step(_zeros(env))[1] for _ in range(50)]
        return np.mean(rewards[25:], axis=0)  # after settling on the feet

    full_rate = (
        DEFAULT_REWARD_WEIGHTS["tracking_lin_vel"] + DEFAULT_REWARD_WEIGHTS["tracking_ang_vel"]
    ) * 0.02
    standing, walking = mean_reward(0.0), mean_reward(1.0)
    assert np.all(standing > 0.9 * full_rate)
    # exp(-1 / 0.25) of the linear tracking term is left when 1 m/s is asked and 0 is done.
    assert np.all(walking < standing - 0.9 * DEFAULT_REWARD_WEIGHTS["tracking_lin_vel"] * 0.02)


def test_same_seed_and_actions_give_identical_trajectories():
    rng = np.random.default_rng(7)
    actions = rng.uniform(-1, 1, (30, 3, 12)).astype(np.float32)

    def rollout() -> list[np.ndarray]:
        env = QuadrupedJoystick(num_envs=3, seed=11, max_episode_steps=10)
        out = [env.reset()[CRITIC]]
        for a in actions:
            obs, reward, terminated, truncated, _ = env.step(a)
            out += [obs[CRITIC], reward, terminated, truncated]
        return out

    for first, second in zip(rollout(), rollout(), strict=True):
        np.testing.assert_array_equal(first, second)


def test_rotate_to_body_undoes_a_yaw_of_ninety_degrees():
    half = np.sqrt(0.5)
    quat = np.array([[half, 0.0, 0.0, half], [1.0, 0.0, 0.0, 0.0]])
    world = np.array([[1.0, 0.0, 0.0], [0.0, 2.0, 3.0]])
    body = rotate_to_body(quat, world)
    # Facing +y, a world +x velocity is a velocity to the body's right (-y).
    np.testing.assert_allclose(body, [[0.0, -1.0, 0.0], [0.0, 2.0, 3.0]], atol=1e-12)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"reward_weights": {"speed": 1.0}}, "valid terms"),
        ({"action_scale": 0.0}, "action_scale"),
        ({"lin_vel_x_range": (1.0, -1.0)}, "lin_vel_x_range"),
        ({"max_tilt_deg": 0.0}, "max_tilt_deg"),
    ],
)
def test_rejects_out_of_range_arguments_with_a_message_naming_them(kwargs, match):
    with pytest.raises(ValueError, match=match):
        QuadrupedJoystick(num_envs=1, **kwargs)


def test_tracking_errors_are_episode_means_of_command_minus_velocity_from_observations():
    # Recomputed from what the policy and critic observe: the command shown before a step is the
    # one that step is judged against; the velocities are those of the step's final observation.
    env = QuadrupedJoystick(num_envs=4, seed=4, max_episode_steps=25, command_resample_steps=10)
    obs = env.reset()
    rng = np.random.default_rng(1)
    lin_sum, yaw_sum, steps = np.zeros(4), np.zeros(4), np.zeros(4)
    checked = 0
    for _ in range(60):
        command = obs[POLICY][:, COMMAND].astype(np.float64)
        actions = rng.uniform(-0.5, 0.5, (4, 12)).astype(np.float32)
        obs, _, _, _, info = env.step(actions)
        final = info["final_obs"]
        lin_vel = final[CRITIC][:, 45:47].astype(np.float64)
        yaw_rate = final[POLICY][:, ANG_VEL][:, 2].astype(np.float64)
        lin_sum += np.linalg.norm(command[:, :2] - lin_vel, axis=1)
        yaw_sum += np.abs(command[:, 2] - yaw_rate)
        steps += 1
        episode = info["episode"]
        ids = episode["env_ids"]
        np.testing.assert_allclose(
            episode["metric/tracking_error_lin_vel"], lin_sum[ids] / steps[ids], rtol=1e-5
        )
        np.testing.assert_allclose(
            episode["metric/tracking_error_ang_vel"], yaw_sum[ids] / steps[ids], rtol=1e-5
        )
        np.testing.assert_array_equal(episode["length"], steps[ids])
        lin_sum[ids], yaw_sum[ids], steps[ids] = 0.0, 0.0, 0.0
        checked += ids.size
    assert env.spec.episode_metrics == ("tracking_error_lin_vel", "tracking_error_ang_vel")
    assert checked >= 8, "too few episodes ended to check the means"


def test_commands_do_not_depend_on_the_actions_while_no_env_falls():
    # What makes an evaluation's tracking error a paired comparison with the standing-still one.
    def commands(scale: float) -> np.ndarray:
        env = QuadrupedJoystick(num_envs=3, seed=9, max_episode_steps=10, command_resample_steps=4)
        obs = env.reset(stagger=False)
        rng = np.random.default_rng(0)
        seen = [obs[POLICY][:, COMMAND]]
        for _ in range(30):
            actions = scale * rng.uniform(-1, 1, (3, 12)).astype(np.float32)
            obs, _, terminated, _, _ = env.step(actions)
            assert not terminated.any()
            seen.append(obs[POLICY][:, COMMAND])
        return np.stack(seen)

    np.testing.assert_array_equal(commands(0.0), commands(0.3))
