"""use_symmetry: the off-policy learners add each sampled transition's left-right mirror."""

from __future__ import annotations

import pytest
import torch

from tests.algos.offpolicy_batches import DC, DP, A, RandomBatches, build, loader, make_trainer
from tests.collector_fits import collector_trainer
from tests.envs.test_randomization import ALL
from unilab_lit.algos.fast_sac import FastSAC
from unilab_lit.algos.fast_td3 import FastTD3
from unilab_lit.algos.offpolicy_options import OffPolicyOptions
from unilab_lit.collector.options import CollectorOptions
from unilab_lit.data.replay import ReplayDataModule
from unilab_lit.envs.spec import CRITIC, POLICY
from unilab_lit.envs.symmetry import Mirror, MirrorSpec
from unilab_lit.envs.task_spec import TaskSpec

# Policy obs (a vector: y flips), critic obs (an axial vector and a plain channel), actions
# (a left/right pair).
SPEC = MirrorSpec(
    policy_obs=Mirror.vector(),
    critic_obs=Mirror.concat([Mirror.axial(), Mirror.signs(1)]),
    actions=Mirror((1, 0), (1.0, 1.0)),
)
ROWS, UPDATES = 16, 2


def _recording(cls: type) -> type:
    class Recording(cls):
        """Records every minibatch the critic loss receives."""

        def _critic_loss(self, mb):
            self.minibatches.append(mb.clone())
            return super()._critic_loss(mb)

    return Recording


@pytest.mark.parametrize("cls", [FastTD3, FastSAC])
def test_each_minibatch_holds_its_rows_followed_by_their_mirrors(tmp_path, one_torch_thread, cls):
    model = build(_recording(cls), use_symmetry=True, updates_per_step=UPDATES)
    model.minibatches = []
    model.mirror = SPEC
    make_trainer(tmp_path, max_steps=2).fit(model, loader(RandomBatches(ROWS)))
    assert len(model.minibatches) == 2 * UPDATES
    for mb in model.minibatches:
        assert mb.shape[0] == 2 * ROWS // UPDATES  # sampled rows and as many mirrors
        rows, mirrors = mb[0::2], mb[1::2]
        # Normalised with symmetric statistics, so mirroring commutes with normalising.
        for key, mirror in (
            ("obs", SPEC.policy_obs),
            ("next_obs", SPEC.policy_obs),
            ("critic_obs", SPEC.critic_obs),
            ("next_critic_obs", SPEC.critic_obs),
            ("actions", SPEC.actions),
        ):
            expected = torch.from_numpy(mirror(rows[key].numpy()))
            torch.testing.assert_close(mirrors[key], expected, atol=1e-5, rtol=1e-5)
        assert torch.equal(mirrors["reward"], rows["reward"])
        assert torch.equal(mirrors["discount"], rows["discount"])
    # Each sampled row and its mirror count once in the statistics, which are symmetric.
    assert model.obs_normalizer.count.item() == pytest.approx(2 * 2 * ROWS, abs=1)
    mean = model.obs_normalizer.mean.numpy()
    assert abs(mean[1]) < 1e-5 and mean[0] == pytest.approx(SPEC.policy_obs(mean)[0])


def test_without_use_symmetry_no_mirror_is_needed_or_added(tmp_path, one_torch_thread):
    model = build(_recording(FastTD3), updates_per_step=UPDATES)
    model.minibatches = []
    make_trainer(tmp_path, max_steps=1).fit(model, loader(RandomBatches(ROWS)))
    assert [mb.shape[0] for mb in model.minibatches] == [ROWS // UPDATES] * UPDATES


def test_use_symmetry_for_a_task_without_a_mirror_is_refused_in_one_line(tmp_path):
    model = build(FastTD3, use_symmetry=True)
    with pytest.raises(ValueError, match="use_symmetry=True needs a task with a left-right mirror"):
        make_trainer(tmp_path, max_steps=1).fit(model, loader(RandomBatches(ROWS)))


def test_a_mirror_of_other_sizes_is_refused():
    wrong = MirrorSpec(Mirror.vector(), Mirror.vector(), Mirror.signs(1, -1))
    with pytest.raises(ValueError, match=r"\(3, 3, 2\) do not fit the task's \(3, 4, 2\)"):
        wrong.check_sizes(DP, DC, A)


def test_fast_sac_fits_the_randomised_quadruped_with_symmetry_from_its_env_spec(one_torch_thread):
    # Every randomisation option on.
    task = TaskSpec("QuadrupedJoystick", {"max_episode_steps": 20, "randomization": ALL})
    data = ReplayDataModule(
        CollectorOptions(task, 2, learner_torch_threads=1),
        batch_size=8,
        buffer_size=64,
        learning_starts=8,
    )
    spec = data.env_spec
    assert spec.mirror is not None
    model = _recording(FastSAC)(
        spec.obs_sizes[POLICY],
        spec.obs_sizes[CRITIC],
        spec.action_size,
        actor_hidden_dims=(16,),
        critic_hidden_dims=(16,),
        offpolicy=OffPolicyOptions(
            num_atoms=11, v_min=-5.0, v_max=5.0, updates_per_step=2, use_symmetry=True
        ),
    )
    model.minibatches = []
    collector_trainer(4).fit(model, datamodule=data)
    assert model.mirror == spec.mirror
    assert [mb.shape[0] for mb in model.minibatches] == [2 * 8] * 8
    assert torch.isfinite(model.minibatches[-1]["obs"]).all()
