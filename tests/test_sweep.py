"""``python -m unilab_lit.app.sweep``: Optuna trials as real fits, pruned at epoch ends, resumable."""

from __future__ import annotations

import pytest
import yaml

from tests.conftest import REPO

optuna = pytest.importorskip("optuna", reason="sweeps need optuna (the sweep extra)")

from unilab_lit.app.sweep import main  # noqa: E402

_FIT = [
    "--",
    "--trainer.max_steps=6",
    "--trainer.log_every_n_steps=1",
    "--trainer.enable_progress_bar=false",
    "--data.init_args.collector.num_envs=32",  # some of the staggered episodes end in epoch 0
]


def _space(path, n_startup_trials):
    path.write_text(
        yaml.safe_dump(
            {
                "epoch": 3,
                "n_startup_trials": n_startup_trials,
                "n_warmup_epochs": 0,
                "parameters": {"model.init_args.gamma": {"choices": [0.95, 0.99]}},
            }
        )
    )
    return str(path)


def _sweep(tmp_path, space, trials):
    return main(
        [
            "--config",
            str(REPO / "configs" / "appo.yaml"),
            "--space",
            space,
            "--trials",
            str(trials),
            "--log_dir",
            str(tmp_path),
            "--study",
            "test",
            *_FIT,
        ]
    )


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep")
    storage = f"sqlite:///{root / 'sweep.db'}"
    # Three trials, none pruned (the pruner waits for 5 complete ones).
    first = _sweep(root, _space(root / "no_pruning.yaml", 5), 3)
    done = [
        (t.number, t.state) for t in optuna.load_study(study_name="test", storage=storage).trials
    ]
    # Four trials that beat any real fit at every epoch: the next trial is below their median.
    study = optuna.load_study(study_name="test", storage=storage)
    for _ in range(4):
        study.add_trial(
            optuna.trial.create_trial(
                value=1e9,
                intermediate_values={0: 1e9, 1: 1e9},
                params={"model.init_args.gamma": 0.99},
                distributions={
                    "model.init_args.gamma": optuna.distributions.CategoricalDistribution(
                        [0.95, 0.99]
                    )
                },
            )
        )
    resumed = _sweep(root, _space(root / "pruning.yaml", 1), 8)
    return {"root": root, "status": (first, resumed), "first": done, "storage": storage}


def test_a_three_trial_sweep_completes_each_trial_as_a_fit(sweep):
    assert sweep["status"] == (0, 0)
    complete = optuna.trial.TrialState.COMPLETE
    assert sweep["first"] == [(0, complete), (1, complete), (2, complete)]
    for number in range(3):
        (config,) = (sweep["root"] / f"trial_{number}").glob("version_*/config.yaml")
        assert yaml.safe_load(config.read_text())["trainer"]["limit_train_batches"] == 3


def test_the_study_resumes_from_its_storage_and_a_poor_trial_is_pruned(sweep, capsys):
    trials = optuna.load_study(study_name="test", storage=sweep["storage"]).trials
    # 3 from the first sweep, 4 added, 1 run by the resumed sweep (8 in all).
    assert len(trials) == 8
    assert trials[7].state == optuna.trial.TrialState.PRUNED
    assert list(trials[7].intermediate_values) == [0]


def test_the_sweep_ends_with_a_table_of_the_best_trials(sweep, capsys):
    from unilab_lit.app.sweep import best_trials_table

    table = best_trials_table(optuna.load_study(study_name="test", storage=sweep["storage"]))
    lines = table.splitlines()
    assert lines[0] == "study test: 7 complete, 1 pruned"
    assert lines[2].split()[1] == "1e+09"
    assert "model.init_args.gamma=" in lines[2]
