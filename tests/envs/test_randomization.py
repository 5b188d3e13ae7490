"""Domain randomisation per env on QuadrupedJoystick: each option changes what it claims, per env."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
from mujoco import batch as mj_batch

from unilab_lit.envs.quadruped import QuadrupedJoystick
from unilab_lit.envs.randomization import DomainRandomization
from unilab_lit.envs.spec import CRITIC, POLICY
from unilab_lit.envs.task_spec import TaskSpec

N = 4
ALL = DomainRandomization(
    friction_range=(0.4, 1.2),
    base_mass_offset_range=(-1.0, 2.0),
    base_com_x_offset_range=(-0.05, 0.05),
    motor_strength_range=(0.8, 1.2),
    push_interval_s=0.1,
    push_velocity=0.5,
    obs_noise={"ang_vel": 0.2, "joint_vel": 1.5},
    action_delay_probability=0.5,
)


def _env(randomization: DomainRandomization | None, seed: int = 0, **kwargs) -> QuadrupedJoystick:
    return QuadrupedJoystick(N, seed=seed, randomization=randomization, **kwargs)


def _actions(seed: int, steps: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, (N, 12)).astype(np.float32) for _ in range(steps)]


def _rollout(env: QuadrupedJoystick, actions: list[np.ndarray]) -> list[tuple]:
    env.reset()
    return [env.step(a)[:4] for a in actions]


def _same(a: list[tuple], b: list[tuple]) -> bool:
    """Whether two runs of ``(obs, reward, terminated, truncated)`` are equal bit for bit."""
    for (obs_a, *rest_a), (obs_b, *rest_b) in zip(a, b, strict=True):
        if obs_a.keys() != obs_b.keys() or not all(
            np.array_equal(obs_a[g], obs_b[g]) for g in obs_a
        ):
            return False
        if not all(np.array_equal(x, y) for x, y in zip(rest_a, rest_b, strict=True)):
            return False
    return True


def _expanded(env: QuadrupedJoystick) -> set[str]:
    return {name for name in mj_batch.MODEL_FIELDS if env.batch.expanded(name) is not None}


def _set_const_fields(model: mujoco.MjModel, body: int) -> set[str]:
    """The fields that mj_setConst derives from ``body``'s mass, by a change in one simulation."""
    batch = mj_batch.Batch(model, nsim=2, nthread=1)
    batch.expand("body_mass")[1, body] += 1.0
    batch.set_const()
    return {name for name in mj_batch.MODEL_FIELDS if batch.expanded(name) is not None}


def test_all_options_off_is_the_unrandomised_env_bit_for_bit():
    actions = _actions(0, 60)
    plain, off = _env(None, max_episode_steps=25), _env(DomainRandomization(), max_episode_steps=25)
    assert _same(_rollout(plain, actions), _rollout(off, actions))
    assert _expanded(off) == set() and off.randomization_values == {}
    assert "randomization" not in off.state_dict()


def test_friction_sets_every_collision_geom_to_one_value_per_env_and_nothing_else():
    env = _env(DomainRandomization(friction_range=(0.4, 1.2)))
    env.reset()
    assert _expanded(env) == {"geom_friction"}
    friction = env.batch.expanded("geom_friction")
    nominal = env.model.geom_friction
    collides = (env.model.geom_contype != 0) | (env.model.geom_conaffinity != 0)
    drawn = env.randomization_values["friction"]
    assert len(set(drawn.tolist())) == N and np.all((drawn >= 0.4) & (drawn <= 1.2))
    np.testing.assert_array_equal(friction[:, collides, 0], np.repeat(drawn[:, None], 6, 1))
    np.testing.assert_array_equal(
        friction[:, ~collides], np.broadcast_to(nominal[~collides], (N, 12, 3))
    )
    np.testing.assert_array_equal(friction[:, :, 1:], np.broadcast_to(nominal[:, 1:], (N, 18, 2)))


def test_base_mass_offset_changes_the_trunk_mass_per_env_and_its_derived_constants_only():
    env = _env(DomainRandomization(base_mass_offset_range=(-1.0, 2.0)))
    env.reset()
    trunk = env.model.body("trunk").id
    mass = env.batch.expanded("body_mass")
    offset = env.randomization_values["mass_offset"]
    assert len(set(offset.tolist())) == N and np.all((offset >= -1.0) & (offset <= 2.0))
    np.testing.assert_allclose(mass[:, trunk], env.model.body_mass[trunk] + offset)
    others = np.delete(mass, trunk, axis=1)
    np.testing.assert_array_equal(
        others, np.broadcast_to(np.delete(env.model.body_mass, trunk), others.shape)
    )
    # Besides body_mass, only what mj_setConst derives from it became per env.
    assert _expanded(env) - {"body_mass"} <= _set_const_fields(env.model, trunk)
    np.testing.assert_allclose(
        env.batch.expanded("body_subtreemass")[:, 0], env.model.body_subtreemass[0] + offset
    )


def test_base_com_x_offset_moves_the_trunk_centre_of_mass_forward_per_env_only():
    env = _env(DomainRandomization(base_com_x_offset_range=(-0.05, 0.05)))
    env.reset()
    trunk = env.model.body("trunk").id
    ipos = env.batch.expanded("body_ipos")
    offset = env.randomization_values["com_x_offset"]
    assert len(set(offset.tolist())) == N and np.all(np.abs(offset) <= 0.05)
    np.testing.assert_allclose(ipos[:, trunk, 0], env.model.body_ipos[trunk, 0] + offset)
    np.testing.assert_array_equal(
        ipos[:, trunk, 1:], np.broadcast_to(env.model.body_ipos[trunk, 1:], (N, 2))
    )
    others = np.delete(ipos, trunk, axis=1)
    np.testing.assert_array_equal(
        others, np.broadcast_to(np.delete(env.model.body_ipos, trunk, axis=0), others.shape)
    )


def test_motor_strength_scales_each_pd_gain_pair_per_env_and_actuator():
    env = _env(DomainRandomization(motor_strength_range=(0.8, 1.2)))
    env.reset()
    assert _expanded(env) == {"actuator_gainprm", "actuator_biasprm"}
    scale = env.randomization_values["motor_strength"]
    assert scale.shape == (N, 12) and np.all((scale >= 0.8) & (scale <= 1.2))
    gain, bias = env.batch.expanded("actuator_gainprm"), env.batch.expanded("actuator_biasprm")
    model = env.model
    np.testing.assert_allclose(gain[..., 0], model.actuator_gainprm[:, 0] * scale)
    # kp in the gain and -kp, -kv in the bias scale together: the same PD, stronger or weaker.
    np.testing.assert_allclose(bias[..., :3], model.actuator_biasprm[:, :3] * scale[..., None])
    np.testing.assert_allclose(-bias[..., 1], gain[..., 0])
    np.testing.assert_array_equal(
        gain[..., 1:], np.broadcast_to(model.actuator_gainprm[:, 1:], (N, 12, 9))
    )
    np.testing.assert_array_equal(
        bias[..., 3:], np.broadcast_to(model.actuator_biasprm[:, 3:], (N, 12, 7))
    )


def test_pushes_kick_each_env_base_velocity_at_the_interval_and_not_before():
    interval = 5  # steps of 0.02 s
    pushed = _env(DomainRandomization(push_interval_s=0.1, push_velocity=0.5))
    plain = _env(None)
    zeros = np.zeros((N, 12), np.float32)
    pushed.reset(stagger=False), plain.reset(stagger=False)
    for step in range(interval + 1):
        a, b = pushed.step(zeros)[0][CRITIC], plain.step(zeros)[0][CRITIC]
        if step < interval:
            assert np.array_equal(a, b), f"differs before the first push, at step {step}"
    # The body-frame linear velocity (the critic's last 3 channels) jumped by a different kick
    # in each env, within the largest push.
    kick = a[:, -3:-1] - b[:, -3:-1]
    assert np.all(np.abs(kick).max(axis=1) > 0.01)
    assert len({tuple(row) for row in np.round(kick, 6)}) == N
    assert np.all(np.linalg.norm(kick, axis=1) < 0.5 * np.sqrt(2) + 0.05)


def test_obs_noise_perturbs_only_the_named_policy_terms_within_their_scale():
    noisy = _env(DomainRandomization(obs_noise={"ang_vel": 0.2, "joint_vel": 1.5}))
    plain = _env(None)
    slices = noisy.spec.policy_obs_slices()
    zeros = np.zeros((N, 12), np.float32)
    noisy.reset(stagger=False), plain.reset(stagger=False)
    for _ in range(3):
        a, b = noisy.step(zeros)[0], plain.step(zeros)[0]
        assert np.array_equal(a[CRITIC], b[CRITIC])  # privileged: clean
        delta = a[POLICY] - b[POLICY]
        for term, (start, stop) in slices.items():
            scale = {"ang_vel": 0.2, "joint_vel": 1.5}.get(term, 0.0)
            part = np.abs(delta[:, start:stop])
            assert np.all(part <= scale + 1e-5), term
            assert (part.max() > 0) == (scale > 0), term


def test_action_delay_applies_the_previous_controls_in_delayed_envs_after_their_first_step():
    env = _env(DomainRandomization(action_delay_probability=0.5), seed=1)
    env.reset(stagger=False)
    delayed = env.randomization_values["delayed"]
    assert delayed.any() and not delayed.all()
    first, second = _actions(1, 2)
    home = env.model.key("home").qpos[7:]
    env.step(first)
    np.testing.assert_allclose(env.ctrl, home + 0.25 * first)  # every env applies its own first
    env.step(second)
    expected = np.where(delayed[:, None], home + 0.25 * first, home + 0.25 * second)
    np.testing.assert_allclose(env.ctrl, expected)
    # The observation's last action is what the policy sent, delayed or not.
    np.testing.assert_allclose(env.step(second)[0][POLICY][:, 33:45], second)


def test_same_seed_gives_identical_randomised_runs_and_another_seed_another():
    actions = _actions(2, 80)  # crosses resets: values are redrawn per env
    runs = [_env(ALL, seed=s, max_episode_steps=30) for s in (5, 5, 6)]
    rollouts = [_rollout(env, actions) for env in runs]
    assert _same(rollouts[0], rollouts[1])
    values = [env.randomization_values for env in runs]
    assert all(np.array_equal(values[0][k], values[1][k]) for k in values[0])
    assert not np.array_equal(values[0]["friction"], values[2]["friction"])


def test_values_are_redrawn_only_for_the_envs_that_reset():
    env = _env(DomainRandomization(friction_range=(0.4, 1.2)), max_episode_steps=10)
    env.reset()  # staggered timeouts: the envs reset on different steps
    partial = 0
    for _ in range(10):
        before = env.randomization_values["friction"]
        done = env.step(np.zeros((N, 12), np.float32))[4]["done"]
        after = env.randomization_values["friction"]
        assert np.all(after[done] != before[done]) and np.array_equal(after[~done], before[~done])
        partial += int(done.any() and not done.all())
        np.testing.assert_array_equal(env.batch.expanded("geom_friction")[:, 0, 0], after)
    assert partial, "no step reset some envs but not others"


def test_loaded_randomised_env_continues_bit_for_bit_with_its_values():
    actions = _actions(3, 50)
    env = _env(ALL, seed=1, max_episode_steps=20)
    env.reset()
    for a in actions[:13]:
        env.step(a)
    state = env.state_dict()
    expected = [env.step(a)[:4] for a in actions[13:]]
    other = _env(ALL, seed=99, max_episode_steps=20)
    other.load_state_dict(state)
    assert _same(expected, [other.step(a)[:4] for a in actions[13:]])
    for field in ("geom_friction", "body_mass", "actuator_gainprm", "actuator_biasprm"):
        np.testing.assert_array_equal(other.batch.expanded(field), env.batch.expanded(field))


def test_load_refuses_a_state_saved_with_other_randomisation():
    env = _env(ALL)
    env.reset()
    with pytest.raises(ValueError, match="saved with domain randomisation"):
        _env(None).load_state_dict(env.state_dict())


def test_task_spec_builds_randomisation_from_yaml_values_and_names_a_bad_option():
    config = {"friction_range": [0.5, 1.0], "obs_noise": {"joint_pos": 0.01}}
    spec = TaskSpec.from_config(
        {"class_path": "QuadrupedJoystick", "init_args": {"randomization": config}}
    )
    assert spec.init_args["randomization"]["friction_range"] == (0.5, 1.0)
    env = spec.build(2, seed=0)
    assert env.randomization_values["friction"].shape == (2,)
    with pytest.raises(ValueError, match="friction_rang"):
        TaskSpec.from_config(
            {
                "class_path": "QuadrupedJoystick",
                "init_args": {"randomization": {"friction_rang": [0.5, 1]}},
            }
        )


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"friction_range": (1.0, 0.5)}, "randomization.friction_range"),
        ({"motor_strength_range": (0.0, 1.0)}, "randomization.motor_strength_range"),
        ({"action_delay_probability": 1.5}, "randomization.action_delay_probability"),
        ({"obs_noise": {"joint_vel": -1.0}}, "randomization.obs_noise"),
    ],
)
def test_out_of_range_options_are_refused_naming_them(options, match):
    with pytest.raises(ValueError, match=match):
        DomainRandomization(**options)


def test_obs_noise_on_an_unknown_term_lists_the_task_terms():
    with pytest.raises(ValueError, match=r"\['gyro'\].*'ang_vel', 'projected_gravity'"):
        _env(DomainRandomization(obs_noise={"gyro": 0.1}))
