"""OffPolicyOptions in checkpoints: one written while the class lived in algos/offpolicy.py loads."""

from __future__ import annotations

import pytest
import torch

import unilab_lit.algos.offpolicy  # noqa: F401  (the old home, which still names the class)
from unilab_lit.algos.offpolicy_options import OffPolicyOptions


def test_options_saved_under_their_old_module_load_weights_only(tmp_path):
    path = tmp_path / "old.pt"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(OffPolicyOptions, "__module__", "unilab_lit.algos.offpolicy")
        torch.save({"offpolicy": OffPolicyOptions(num_atoms=11)}, path)
    assert b"unilab_lit.algos.offpolicy\nOffPolicyOptions" in path.read_bytes()

    loaded = torch.load(path, weights_only=True)  # as Lightning loads a checkpoint

    assert loaded["offpolicy"] == OffPolicyOptions(num_atoms=11)
