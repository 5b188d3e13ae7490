"""A range error names the argument's full key; an old key is refused even with an empty value."""

from __future__ import annotations

import pytest
import yaml

from tests.conftest import REPO
from unilab_lit.app.unilab_cli import UnilabCLI
from unilab_lit.config_errors import PREFIX, with_key_path


def _refusal(args: list[str]) -> str:
    with pytest.raises(SystemExit) as refused:
        UnilabCLI(args=args, run=False)
    line = refused.value.code
    assert isinstance(line, str) and "\n" not in line, line
    return line


@pytest.mark.parametrize(
    ("config", "override", "expected"),
    [
        (
            "appo.yaml",
            "--data.init_args.collector.num_envs=0",
            "data.init_args.collector.num_envs must be >= 1, got 0",
        ),
        # fast_sac.yaml has a second num_envs (PolicyEvaluator's): the value tells them apart.
        (
            "fast_sac.yaml",
            "--data.init_args.collector.num_envs=0",
            "data.init_args.collector.num_envs must be >= 1, got 0",
        ),
        (
            "fast_sac.yaml",
            "--model.init_args.offpolicy.num_atoms=1",
            "model.init_args.offpolicy.num_atoms must be >= 2, got 1",
        ),
    ],
)
def test_range_error_names_the_full_key(config, override, expected):
    line = _refusal(["--config", str(REPO / "configs" / config), override])
    assert line == PREFIX + expected


def test_key_path_is_left_out_when_the_argument_is_ambiguous():
    config = {"a": {"num_envs": 0}, "b": {"num_envs": 0}}
    assert with_key_path("num_envs must be >= 1, got 0", config) == "num_envs must be >= 1, got 0"
    owned = {
        "trainer": {
            "callbacks": [
                {
                    "class_path": "unilab_lit.callbacks.RLCheckpoint",
                    "init_args": {"keep_replays": 0},
                }
            ]
        }
    }
    assert with_key_path("RLCheckpoint.keep_replays must be >= 1, got 0", owned) == (
        "trainer.callbacks[0].init_args.keep_replays must be >= 1, got 0"
    )


@pytest.mark.parametrize("value", [{}, {"scale": 1.0}], ids=["empty", "not_empty"])
@pytest.mark.parametrize("parent", ["data.init_args", "data.init_args.collector"])
def test_old_task_kwargs_is_refused_saying_what_replaced_it(value, parent, tmp_path):
    shipped = yaml.safe_load((REPO / "configs" / "appo.yaml").read_text())
    section = shipped
    for name in parent.split("."):
        section = section[name]
    section["task_kwargs"] = value
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump(shipped))
    assert _refusal(["--config", str(path)]) == (
        f"{PREFIX}{parent}.task_kwargs: moved to data.init_args.collector.task: "
        "{class_path, init_args} in this release"
    )
