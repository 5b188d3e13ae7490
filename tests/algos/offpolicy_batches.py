"""Replay items in the off-policy batch contract, and a small Trainer, for the FastTD3/FastSAC tests."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import LightningModule, Trainer
from tensordict import TensorDict
from torch.utils.data import DataLoader, IterableDataset

from unilab_lit.algos.offpolicy import OffPolicyLearner
from unilab_lit.algos.offpolicy_options import OffPolicyOptions

DP, DC, A = 3, 4, 2
SMALL = {
    "actor_hidden_dims": (16, 16),
    "critic_hidden_dims": (16, 16),
    "num_atoms": 21,
    "v_min": -5.0,
    "v_max": 5.0,
}


_OPTION_FIELDS = {field.name for field in dataclasses.fields(OffPolicyOptions)}


def build(cls: type[OffPolicyLearner], **kwargs: Any) -> OffPolicyLearner:
    """``cls`` at the test sizes; option fields go into ``offpolicy`` over ``cls``'s defaults."""
    options = {k: kwargs.pop(k) for k in list(kwargs) if k in _OPTION_FIELDS}
    default = inspect.signature(cls).parameters["offpolicy"].default
    offpolicy = dataclasses.replace(default, **options)
    sizes = {"policy_obs_size": DP, "critic_obs_size": DC, "action_size": A}
    return cls(**{**sizes, **kwargs}, offpolicy=offpolicy)


def random_batch(g: torch.Generator, rows: int) -> TensorDict:
    """``rows`` random transitions: raw obs off-centre, ~10% terminated, ~5% truncated."""
    done = torch.rand(rows, generator=g) < 0.1
    truncated = ~done & (torch.rand(rows, generator=g) < 0.05)
    return TensorDict(
        {
            "obs": torch.randn(rows, DP, generator=g) * 3.0 + 5.0,
            "next_obs": torch.randn(rows, DP, generator=g) * 3.0 + 5.0,
            "actions": torch.rand(rows, A, generator=g) * 2.0 - 1.0,
            "reward": torch.randn(rows, generator=g),
            "done": done,
            "truncated": truncated,
            "critic_obs": torch.randn(rows, DC, generator=g) * 2.0 - 1.0,
            "next_critic_obs": torch.randn(rows, DC, generator=g) * 2.0 - 1.0,
        },
        batch_size=[rows],
    )


class RandomBatches(IterableDataset):
    """Endless random items of ``rows`` rows; ``poison(i, batch)`` may corrupt item ``i``."""

    def __init__(self, rows: int, poison: Callable[[int, TensorDict], None] | None = None) -> None:
        self.rows = rows
        self.poison = poison
        self.served = 0

    def __iter__(self):
        g = torch.Generator().manual_seed(0)
        while True:
            batch = random_batch(g, self.rows)
            if self.poison is not None:
                self.poison(self.served, batch)
            self.served += 1
            yield batch


class BanditBatches(IterableDataset):
    """One-step episodes acted by the model's collector policy; reward ``−Σ(a − 0.5)²``.

    Every row terminates, so the critic must learn ``Q(s, a) = r(a)`` and the actor must move
    its actions to 0.5. ``mean_rewards`` records the behaviour policy's reward per item.
    """

    def __init__(self, model: LightningModule, rows: int) -> None:
        self.model = model
        self.rows = rows
        self.mean_rewards: list[float] = []

    def __iter__(self):
        g = torch.Generator().manual_seed(0)
        while True:
            obs = torch.randn(self.rows, DP, generator=g)
            with torch.inference_mode():
                policy = self.model.collector_policy()
                actions = policy.act(self.model.obs_normalizer(obs))["actions"].clone()
            reward = -(actions - 0.5).pow(2).sum(-1)
            self.mean_rewards.append(reward.mean().item())
            yield TensorDict(
                {
                    "obs": obs,
                    "next_obs": torch.randn(self.rows, DP, generator=g),
                    "actions": actions,
                    "reward": reward,
                    "done": torch.ones(self.rows, dtype=torch.bool),
                    "truncated": torch.zeros(self.rows, dtype=torch.bool),
                    "critic_obs": torch.randn(self.rows, DC, generator=g),
                    "next_critic_obs": torch.randn(self.rows, DC, generator=g),
                },
                batch_size=[self.rows],
            )


def make_trainer(tmp_path: Path, max_steps: int, **kwargs) -> Trainer:
    return Trainer(
        max_steps=max_steps,
        accelerator=kwargs.pop("accelerator", "cpu"),
        logger=kwargs.pop("logger", False),
        enable_checkpointing=kwargs.pop("enable_checkpointing", False),
        enable_progress_bar=False,
        enable_model_summary=False,
        log_every_n_steps=1,
        default_root_dir=tmp_path,
        **kwargs,
    )


def _as_is(item: TensorDict) -> TensorDict:
    return item


def loader(dataset: IterableDataset) -> DataLoader:
    return DataLoader(dataset, batch_size=None, num_workers=0, collate_fn=_as_is)
