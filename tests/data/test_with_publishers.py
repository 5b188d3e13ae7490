"""The collector data module's trainer wiring: the two sync callbacks a trainer lacks are added."""

from __future__ import annotations

from lightning.pytorch.callbacks import ModelCheckpoint

from unilab_lit.callbacks import ObsNormSync, WeightSync
from unilab_lit.data.base import with_publishers


def test_with_publishers_adds_both_syncs_before_the_checkpoint_callbacks():
    checkpoint = ModelCheckpoint()
    wired = with_publishers([checkpoint])
    assert [type(c) for c in wired] == [WeightSync, ObsNormSync, ModelCheckpoint]
    assert wired[-1] is checkpoint


def test_with_publishers_keeps_the_users_own_sync_and_adds_only_the_missing_one():
    class SlowWeightSync(WeightSync):
        pass

    for mine in (WeightSync(every_n_steps=7), SlowWeightSync(every_n_steps=7)):
        wired = with_publishers([mine])
        assert wired[0] is mine and mine.every_n_steps == 7
        assert [type(c) for c in wired[1:]] == [ObsNormSync]
    both = [WeightSync(), ObsNormSync()]
    assert with_publishers(both) == both
