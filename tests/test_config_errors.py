"""jsonargparse's multi-line reports become one line naming the key, with a suggestion."""

from __future__ import annotations

import pytest

from unilab_lit.app.config_errors import check_yaml_files, config_files, summarize

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
