"""``--seed_everything N`` reaches the collector's seed unless ``collector.seed`` is set."""

from __future__ import annotations

import numpy as np

from unilab_lit.app.unilab_cli import UnilabCLI
from unilab_lit.distributed import rank_seed
from unilab_lit.envs.spec import POLICY


def _collector_options(*args: str):
    cli = UnilabCLI(
        args=["--config", "configs/appo.yaml", "--trainer.logger=false", *args], run=False
    )
    return cli.datamodule.collector


def _first_obs(options) -> np.ndarray:
    """The first observation the collector's env returns (its reset with the collector's seed)."""
    env = options.task.build(options.num_envs, seed=options.base_seed)
    try:
        return env.reset(seed=rank_seed(options.base_seed, 0))[POLICY]
    finally:
        env.close()


def test_seed_everything_reseeds_the_collector_when_collector_seed_unset():
    one, two = _collector_options("--seed_everything=1"), _collector_options("--seed_everything=2")
    assert (one.seed, two.seed) == (1, 2)
    assert not np.array_equal(_first_obs(one), _first_obs(two))


def test_explicit_collector_seed_wins_over_seed_everything():
    one = _collector_options("--seed_everything=1", "--data.init_args.collector.seed=5")
    two = _collector_options("--seed_everything=2", "--data.init_args.collector.seed=5")
    assert (one.seed, two.seed) == (5, 5)
    np.testing.assert_array_equal(_first_obs(one), _first_obs(two))


def test_collector_seed_is_zero_without_seed_everything():
    assert _collector_options("--seed_everything=false").base_seed == 0
