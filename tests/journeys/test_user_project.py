"""A user's project with its own ``callbacks`` module, first on ``sys.path``, trains: the
library's callbacks import as ``unilab_lit.callbacks``, and no top-level ``callbacks`` of the
library shadows the user's or is shadowed by it."""

from __future__ import annotations

import uuid

from tests.journeys.cli_runs import assert_no_leftovers, report, run, succeeded
from tests.journeys.test_configs import APPO_SIZES

# A user's callbacks.py, the name many projects give theirs; its callback marks the fit's end.
USERS_CALLBACKS = '''"""The user's own callbacks."""

from pathlib import Path

from lightning.pytorch import Callback


class FitEndMarker(Callback):
    def on_fit_end(self, trainer, pl_module):
        Path("fit_ended").write_text(str(trainer.global_step))
'''


def test_fit_runs_from_a_project_with_its_own_callbacks_module(tmp_path):
    (tmp_path / "callbacks.py").write_text(USERS_CALLBACKS)
    mark = uuid.uuid4().hex
    # ``python -m`` puts the project folder first on sys.path, as a user's shell does.
    done = run(["-m", "unilab_lit", "fit", "--config", "appo.yaml", *APPO_SIZES,
                "--trainer.max_steps=2", "--trainer.enable_progress_bar=false",
                "--trainer.callbacks+=callbacks.FitEndMarker"], tmp_path, mark=mark)  # fmt: skip
    assert succeeded(done), report(done)
    assert "run summary" in done.stderr, report(done)
    assert (tmp_path / "fit_ended").read_text() == "2"
    assert_no_leftovers(done, mark)
