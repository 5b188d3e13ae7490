"""CollectorOptions: validated once, and loadable from checkpoints that name its old module."""

from __future__ import annotations

import io
import sys
import types

import pytest
import torch

from unilab_lit.collector.options import CollectorOptions


def test_options_reject_an_out_of_range_value_naming_it():
    with pytest.raises(ValueError, match="stall_timeout_s must be a finite number > 0, got inf"):
        CollectorOptions("CartpoleSwingup", 2, stall_timeout_s=float("inf"))


def test_checkpoint_naming_the_options_old_module_loads_weights_only(monkeypatch):
    options = CollectorOptions("CartpoleSwingup", 3, seed=5)
    # A checkpoint written before the options moved from unilab_lit/data/options.py.
    old = types.ModuleType("unilab_lit.data.options")
    old.CollectorOptions = CollectorOptions
    monkeypatch.setitem(sys.modules, old.__name__, old)
    monkeypatch.setattr(CollectorOptions, "__module__", old.__name__)
    buffer = io.BytesIO()
    torch.save({"hyper_parameters": {"collector": options}}, buffer)
    monkeypatch.undo()
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True)["hyper_parameters"]["collector"]
    assert loaded == options and type(loaded) is CollectorOptions
