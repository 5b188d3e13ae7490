"""APPO items in the rollout batch contract and a small APPO, for the APPO tests."""

from __future__ import annotations

import torch
from tensordict import TensorDict
from torch.utils.data import IterableDataset

from unilab_lit.algos.appo import APPO
from unilab_lit.data.staging import rollout_batch

T, N_ENVS, ROLLOUTS = 4, 6, 2
M = N_ENVS * ROLLOUTS
DP, DC, A = 3, 5, 2
LAG = 2


def small_appo(**kwargs) -> APPO:
    args = {
        "policy_obs_size": DP,
        "critic_obs_size": DC,
        "action_size": A,
        "actor_hidden_dims": [16],
        "critic_hidden_dims": [16],
        "num_learning_epochs": 2,
        "num_mini_batches": 2,
    }
    args.update(kwargs)
    return APPO(**args)


def random_batch(g: torch.Generator, iteration: int) -> TensorDict:
    done = torch.rand(T, M, generator=g) < 0.15
    truncated = done & (torch.rand(T, M, generator=g) < 0.5)
    fresh = torch.zeros(M, dtype=torch.bool)
    fresh[:N_ENVS] = True  # the newest rollout; the older one was seen last iteration
    return rollout_batch(
        {
            "obs": torch.randn(T, M, DP, generator=g) * 3.0 + 5.0,
            "critic_obs": torch.randn(T, M, DC, generator=g) * 2.0 - 1.0,
            "actions": torch.randn(T, M, A, generator=g),
            "log_prob": -torch.rand(T, M, generator=g) * 3.0,
            "reward": torch.randn(T, M, generator=g),
            "done": done,
            "truncated": truncated,
            "final_critic_obs": torch.randn(T, M, DC, generator=g),
        },
        {
            "last_critic_obs": torch.randn(M, DC, generator=g),
            "fresh": fresh,
            "policy_version": torch.full((M,), iteration - LAG, dtype=torch.int64),
        },
    )


class RandomBatches(IterableDataset):
    """Contract-format items; ``poison(i, batch)`` may corrupt item ``i``."""

    def __init__(self, poison=None) -> None:
        self.poison = poison
        self.served = 0

    def __iter__(self):
        g = torch.Generator().manual_seed(0)
        while True:
            batch = random_batch(g, self.served)
            if self.poison is not None:
                self.poison(self.served, batch)
            self.served += 1
            yield batch
