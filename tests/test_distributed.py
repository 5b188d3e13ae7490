"""The collectives of ``unilab_lit.distributed`` on a real 2-process gloo group, and their
single-process identities."""

from __future__ import annotations

import socket
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp

from tests.distributed import gloo_workers
from unilab_lit import distributed
from unilab_lit.callbacks.episode_stats import job_values
from unilab_lit.telemetry import metrics

CASES = ["appo", "fast_td3", "fast_sac", "fast_td3+nan"]


def _free_ports() -> tuple[int, int]:
    with socket.socket() as first, socket.socket() as second:
        first.bind(("127.0.0.1", 0))
        second.bind(("127.0.0.1", 0))
        return first.getsockname()[1], second.getsockname()[1]


@pytest.fixture(scope="module")
def gloo_group(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Records of one 2-process gloo group: every collective, then each case's DDP iteration."""
    out = tmp_path_factory.mktemp("gloo")
    args = (2, _free_ports(), str(out), CASES)
    mp.spawn(gloo_workers.collectives_then_updates, args=args, nprocs=2, join=True)
    return out


@pytest.fixture(scope="module")
def ranks(gloo_group: Path) -> list[dict]:
    return [torch.load(gloo_group / f"rank{r}.pt", weights_only=False) for r in (0, 1)]


def test_normalizer_holds_the_exact_statistics_of_every_ranks_batches(ranks):
    union = torch.cat([ranks[1]["x"], ranks[0]["x"], ranks[1]["x"]])
    var, mean = torch.var_mean(union, dim=0, correction=0)
    for record in ranks:
        state = record["normalizer"]
        assert float(state["count"]) == union.shape[0]
        torch.testing.assert_close(state["mean"], mean.float())
        torch.testing.assert_close(state["var"], var.float())
    assert all(
        torch.equal(ranks[0]["normalizer"][k], ranks[1]["normalizer"][k])
        for k in ranks[0]["normalizer"]
    )


def test_mean_std_over_ranks_equals_statistics_of_the_concatenation(ranks):
    union = torch.cat([r["x"].flatten() for r in ranks])
    for record in ranks:
        mean, std = record["mean_std"]
        torch.testing.assert_close(mean, union.mean())
        torch.testing.assert_close(std, union.std())


def test_average_gradients_gives_every_rank_the_mean_gradient_and_extra(ranks):
    for record in ranks:
        assert torch.equal(record["grad"], torch.full((4,), 1.5))
        assert torch.equal(record["extra"], torch.tensor([0.5]))


def test_decisions_are_global(ranks):
    for record in ranks:
        assert record["all"] == (False, True)
        assert record["any"] == (True, False)
        assert float(record["max"]) == 1.0
    assert ranks[0]["gathered"] == [{"rank": 0}, {"rank": 1}]
    assert ranks[1]["gathered"] is None
    for record in ranks:
        assert record["every"] == [{"rank": 0}, {"rank": 1}]
        assert record["broadcast"] == "from 0"
        assert torch.equal(record["stack"], torch.tensor([[0.0, 1.0], [1.0, 1.0]]))


def test_ranks_leave_a_wait_together_ready_or_on_one_ranks_stop_request(ranks):
    for record in ranks:
        assert record["wait_ready"] is True
        assert record["wait_stop"] is False


def test_job_values_are_the_same_on_every_rank_also_one_without_episodes(ranks):
    expected = {
        metrics.ENV_STEPS: 30.0,
        metrics.COLLECTION_FPS: 5.0,
        metrics.MEAN_REWARD: 2.0,
    }
    assert ranks[0]["job"] == ranks[1]["job"] == expected


@pytest.fixture(scope="module")
def updates(gloo_group: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[int, list[dict]]:
    """Each case's model state after one iteration: 2-rank DDP on A and B, one process on A∪B
    (this one, with the workers' zero Gaussian draws and one thread)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(torch, "randn_like", gloo_workers.zero_noise)
            single = gloo_workers.updates(1, 0, str(tmp_path_factory.mktemp("single")), CASES)
    finally:
        torch.set_num_threads(threads)
    ddp = [torch.load(gloo_group / f"update2_{r}.pt") for r in (0, 1)]
    return {2: ddp, 1: [single]}


@pytest.mark.parametrize("algo", ["appo", "fast_td3", "fast_sac"])
def test_two_rank_update_on_a_and_b_equals_one_process_update_on_their_union(updates, algo):
    (single,) = updates[1]
    for rank in updates[2]:
        assert rank[algo].keys() == single[algo].keys()
        for key, value in single[algo].items():
            torch.testing.assert_close(rank[algo][key], value, atol=1e-6, rtol=1e-5, msg=key)


@pytest.mark.parametrize("algo", ["appo", "fast_td3", "fast_sac"])
def test_two_ranks_log_the_same_learner_terms_as_one_process_on_their_union(updates, algo):
    (single,) = (rank[f"{algo}:logged"] for rank in updates[1])
    rank0, rank1 = (rank[f"{algo}:logged"] for rank in updates[2])
    assert rank1 == rank0  # a checkpoint monitoring any of them decides the same on both
    assert rank0.keys() == single.keys()
    assert {key.split("/")[0] for key in single} == {"Loss", "Policy"}
    for key, value in single.items():
        assert rank0[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key


def test_non_finite_batch_on_rank_one_only_skips_the_update_on_both_identically(updates):
    rank0, rank1 = (rank["fast_td3+nan"] for rank in updates[2])
    assert all(torch.equal(rank0[key], rank1[key]) for key in rank0)
    assert int(rank0["nonfinite_skips"]) == 1
    initial, _ = gloo_workers.build_case("fast_td3")
    for key, value in initial.state_dict().items():
        if key != "nonfinite_skips":
            assert torch.equal(rank0[key], value), key


def test_helpers_are_identities_outside_a_process_group():
    x = torch.randn(10)
    assert distributed.world_size() == 1 and distributed.global_rank() == 0
    assert distributed.mean_std_over_ranks(x) == (x.mean(), x.std())
    extra = torch.tensor(3.0)
    assert distributed.average_gradients([], extra) is extra
    assert distributed.all_ranks(False) is False and distributed.any_rank(True) is True
    assert distributed.gather_to_rank_zero(5) == [5]
    assert torch.equal(distributed.stack_over_ranks(x), x[None])
    assert distributed.wait_on_every_rank(lambda s: False, lambda: True) is False
    assert distributed.wait_on_every_rank(lambda s: True, lambda: True) is True


def test_rank_seed_keeps_rank_zero_and_separates_the_others():
    assert distributed.rank_seed(7, 0) == 7
    seeds = {distributed.rank_seed(0, r) for r in range(1, 64)} | {distributed.rank_seed(1, 1)}
    assert len(seeds) == 64 and 0 not in seeds and 1 not in seeds
    with pytest.raises(ValueError, match="rank must be >= 0"):
        distributed.rank_seed(0, -1)


def test_job_values_outside_ddp_are_the_ranks_own():
    values = job_values({metrics.ENV_STEPS: 10.0}, {metrics.MEAN_REWARD: [1.0, 2.0], "x": []})
    assert values == {metrics.ENV_STEPS: 10.0, metrics.MEAN_REWARD: float(np.mean([1.0, 2.0]))}
