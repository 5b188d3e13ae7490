"""jsonargparse's multi-line reports become one line naming the key, with a suggestion."""

from __future__ import annotations

import sys

import pytest
import yaml

from tests.conftest import REPO
from unilab_lit.app.unilab_cli import UnilabCLI
from unilab_lit.class_paths import class_path_suggestion, closest, moved_class_path
from unilab_lit.config_errors import (
    PREFIX,
    check_yaml_files,
    config_files,
    moved,
    summarize,
)

_UNION = """Parser key "{group}":
  Does not validate against any of the Union subtypes
  Subtypes: [<class 'lightning.pytorch.core.module.LightningModule'>, <class 'NoneType'>]
  Errors:
    - Problem with given class_path '{cls}':
        {inner}
    - Expected a <class 'NoneType'>
  Given value type: <class 'jsonargparse._util.NestedArg'>
  Given value: NestedArg(key='x', val='y')"""


def test_misspelled_class_argument_names_the_key_and_the_closest_one():
    message = _UNION.format(
        group="model", cls="unilab_lit.algos.appo.APPO", inner="Option 'gama' is not accepted"
    )
    assert summarize(message, []) == (
        "model.init_args.gama: APPO has no argument 'gama'; did you mean gamma?"
    )


def test_mistyped_class_argument_names_key_expected_type_and_value():
    message = _UNION.format(
        group="data",
        cls="unilab_lit.data.rollout.RolloutDataModule",
        inner="Parser key \"num_envs\":\n          Expected a <class 'int'>. Got value: abc",
    )
    assert summarize(message, []) == "data.init_args.num_envs: expected int, got 'abc'"


@pytest.mark.parametrize(
    "message",
    [
        "Subcommand 'fit' does not accept option 'trainer.max_stpes'",
        "unrecognized arguments: --trainer.max_stpes=3",
    ],
)
def test_unknown_top_level_option_suggests_the_closest_key(message):
    assert summarize(message, ["trainer.max_steps", "trainer.min_steps", "seed_everything"]) == (
        "unknown option 'trainer.max_stpes'; did you mean trainer.max_steps?"
    )


def test_yaml_syntax_error_names_file_line_and_column(tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("model:\n  init_args: [1, 2\n")
    with pytest.raises(SystemExit, match=rf"^error: invalid config: {broken}, line 3, column 1: "):
        check_yaml_files(config_files(["fit", "--config", str(broken)]))


@pytest.mark.parametrize(
    ("config", "old", "new"),
    [
        ("appo.yaml", "model.init_args.learning_rate", "model.init_args.optimizer.init_args.lr"),
        ("appo.yaml", "data.init_args.task", "data.init_args.collector.task"),
        ("appo.yaml", "data.init_args.num_envs", "data.init_args.collector.num_envs"),
        ("appo.yaml", "data.init_args.physics_threads", "data.init_args.collector.physics_threads"),
        ("appo.yaml", "data.init_args.task_kwargs", "data.init_args.collector.task: {class_path"),
        ("appo.yaml", "data.init_args.collector.task_kwargs", "data.init_args.collector.task: {"),
        ("fast_td3.yaml", "model.init_args.gamma", "model.init_args.offpolicy.gamma"),
        ("fast_td3.yaml", "model.init_args.tau", "model.init_args.offpolicy.tau"),
        (
            "fast_td3.yaml",
            "model.init_args.critic_learning_rate",
            "model.init_args.critic_optimizer.init_args.lr",
        ),
        (
            "fast_sac.yaml",
            "model.init_args.temperature_learning_rate",
            "model.init_args.temperature_optimizer.init_args.lr",
        ),
    ],
)
def test_previous_release_key_is_refused_in_one_line_naming_the_new_key(
    config, old, new, tmp_path, capsys
):
    shipped = yaml.safe_load((REPO / "configs" / config).read_text())
    section = shipped
    *parents, leaf = old.split(".")
    for name in parents:
        section = section[name]
    section[leaf] = {"scale": 1.0} if leaf == "task_kwargs" else 1
    path = tmp_path / config
    path.write_text(yaml.safe_dump(shipped))
    with pytest.raises(SystemExit) as stop:
        UnilabCLI(args=["--config", str(path)], run=False)
    line = str(stop.value)
    assert line.startswith(f"{PREFIX}{old}: moved to {new}")
    assert line.endswith(" in this release")
    assert "\n" not in line
    assert capsys.readouterr().err == ""


def test_did_you_mean_is_a_typo_away_never_another_option():
    assert closest("gama", ["gamma", "lam"]) == "; did you mean gamma?"
    assert closest("trainer.max_stpes", ["trainer.max_steps"]) == (
        "; did you mean trainer.max_steps?"
    )
    assert closest("learning_rate", ["min_learning_rate", "max_learning_rate"]) == ""


@pytest.mark.parametrize(
    ("option", "class_path", "name"),
    [
        ("--model.class_path=", "unilab_lit.algos.appo.APOO", "APPO"),
        ("--model.class_path=", "unilab_lit.algos.apo.APPO", "appo"),
        (
            "--trainer.callbacks+=",
            "lightning.pytorch.callbacks.LearningRateMonitr",
            "LearningRateMonitor",
        ),
    ],
    ids=["model", "model-module", "callback"],
)
def test_misspelled_class_path_names_the_key_and_the_closest_name_in_its_module(
    option, class_path, name
):
    with pytest.raises(SystemExit) as refused:
        UnilabCLI(
            args=["fit", "--config", str(REPO / "configs" / "appo.yaml"), option + class_path]
        )
    key = option.strip("-+=").removesuffix(".class_path")
    assert str(refused.value) == (
        f"{PREFIX}{key}: class_path {class_path!r} does not import; did you mean {name}?"
    )


def test_class_path_suggestion_is_empty_where_the_path_imports_or_no_name_is_close():
    assert class_path_suggestion("unilab_lit.algos.appo.APPO") == ""
    assert class_path_suggestion("unilab_lit.algos.appo.Unrelated") == ""
    assert class_path_suggestion("no_such_package.Task") == ""


def test_appo_gamma_is_not_a_moved_key():
    # APPO keeps gamma: only a class whose arguments hold the new key's home is pointed there.
    assert moved("model.init_args.gamma", "unilab_lit.algos.appo.APPO") is None
    assert moved("model.init_args.gamma", "unilab_lit.algos.fast_td3.FastTD3") is not None


@pytest.mark.parametrize(
    ("args", "where", "old"),
    [
        ([], "trainer.callbacks[0].class_path", "callbacks.EnvStepBudget"),
        ([], "trainer.callbacks[0].class_path", "callbacks.env_step_budget.EnvStepBudget"),
        (["--trainer.callbacks+=callbacks.Tracing"], "--trainer.callbacks", "callbacks.Tracing"),
    ],
)
def test_previous_release_callback_class_path_is_refused_in_one_line_naming_the_new_one(
    args, where, old, tmp_path, capsys
):
    shipped = yaml.safe_load((REPO / "configs" / "appo.yaml").read_text())
    if not args:
        shipped["trainer"]["callbacks"][0]["class_path"] = old
    path = tmp_path / "appo.yaml"
    path.write_text(yaml.safe_dump(shipped))
    with pytest.raises(SystemExit) as stop:
        UnilabCLI(args=["fit", "--config", str(path), *args], run=False)
    assert str(stop.value) == (f"{PREFIX}{where}: {old} moved to unilab_lit.{old} in this release")
    assert capsys.readouterr().err == ""


def test_users_own_callbacks_module_keeps_its_class_paths(tmp_path, monkeypatch):
    # A library callback's old path is pointed at the new one only where no other top-level
    # ``callbacks`` could hold it: a user's own module (first on sys.path) keeps every name.
    assert moved_class_path("callbacks.StopCheckpoint") is not None
    (tmp_path / "callbacks.py").write_text("class StopCheckpoint:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "callbacks", raising=False)
    assert moved_class_path("callbacks.StopCheckpoint") is None
    assert moved_class_path("callbacks.Mine") is None
    assert moved_class_path("unilab_lit.callbacks.StopCheckpoint") is None
