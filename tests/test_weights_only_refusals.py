"""play and export refuse a checkpoint that does not load weights-only in one line naming the object."""

from __future__ import annotations

import argparse
import os

import pytest
import torch

from unilab_lit.app import export, play


class _RunsACommand:
    """What a malicious checkpoint holds: unpickling it would call ``os.system``."""

    def __reduce__(self):
        return (os.system, ("exit 0",))


@pytest.mark.parametrize(
    ("payload", "name"),
    [(argparse.Namespace(lr=0.1), "argparse.Namespace"), (_RunsACommand(), "os.system")],
    ids=["class", "blocked-function"],
)
@pytest.mark.parametrize("main", [play.main, export.main], ids=["play", "export"])
def test_checkpoint_that_does_not_load_weights_only_is_refused_naming_the_object(
    main, payload, name, tmp_path, capsys
):
    foreign = tmp_path / "foreign.ckpt"
    torch.save({"state_dict": {}, "args": payload}, foreign)
    args = [f"--ckpt_path={foreign}"]
    if main is export.main:
        args.append(f"--output={tmp_path / 'policy.onnx'}")
    assert main(args) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (
        f"error: checkpoint {foreign} does not load weights-only (it holds {name}), "
        "so it was not written by this trainer"
    )
