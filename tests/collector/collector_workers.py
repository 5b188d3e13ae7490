"""Stand-in policies for the collector tests, importable by the spawn child (``PolicySpec.target``).

Each is a tiny module with the collector's ``act`` contract; the faulty ones fail in the ways the
learner must notice: raising, hanging, killing their own process.
"""

from __future__ import annotations

import math
import os
import signal
import time
from dataclasses import dataclass, field

import torch
from torch import nn


@dataclass(frozen=True)
class StandInSpec:
    """Builds a class of this module; keeps the child from importing the real policy stack."""

    name: str
    kwargs: dict = field(default_factory=dict)

    def build(self) -> nn.Module:
        return globals()[self.name](**self.kwargs)


class ConstantGaussian(nn.Module):
    """Gaussian around a learnable constant mean; its single parameter makes publishes visible.

    ``log_prob`` is the exact log-density of the sampled action, so tests can recompute it.
    """

    def __init__(
        self, obs_size: int, action_size: int, std: float = 0.5, delay_s: float = 0.0
    ) -> None:
        super().__init__()
        self.obs_size = obs_size
        self.mean = nn.Parameter(torch.zeros(action_size))
        self.std = std
        self.delay_s = delay_s

    def act(self, obs: torch.Tensor) -> dict[str, torch.Tensor]:
        assert obs.shape[-1] == self.obs_size
        # Slows the collector down so a test reader keeps up with a small ring.
        time.sleep(self.delay_s)
        mean = self.mean.expand(obs.shape[0], -1)
        actions = mean + self.std * torch.randn_like(mean)
        z = (actions - mean) / self.std
        log_prob = (-0.5 * z * z - math.log(self.std) - 0.5 * math.log(2 * math.pi)).sum(-1)
        return {"actions": actions, "log_prob": log_prob}


class RaisingPolicy(ConstantGaussian):
    """Raises a recognisable error on call number ``fail_at`` of ``act``."""

    def __init__(self, obs_size: int, action_size: int, fail_at: int = 3) -> None:
        super().__init__(obs_size, action_size)
        self.fail_at = fail_at
        self.calls = 0

    def act(self, obs: torch.Tensor) -> dict[str, torch.Tensor]:
        self.calls += 1
        if self.calls == self.fail_at:
            raise ValueError(f"deliberate failure in act call {self.calls}")
        return super().act(obs)


class HangingPolicy(ConstantGaussian):
    """Stops making progress (sleeps forever, like a deadlock) on call ``hang_at`` of ``act``."""

    def __init__(self, obs_size: int, action_size: int, hang_at: int = 3) -> None:
        super().__init__(obs_size, action_size)
        self.hang_at = hang_at
        self.calls = 0

    def act(self, obs: torch.Tensor) -> dict[str, torch.Tensor]:
        self.calls += 1
        while self.calls >= self.hang_at:
            time.sleep(3600)
        return super().act(obs)


class SelfKillingPolicy(ConstantGaussian):
    """SIGKILLs its own process on call ``kill_at`` of ``act`` (a crash no Python code sees)."""

    def __init__(self, obs_size: int, action_size: int, kill_at: int = 3) -> None:
        super().__init__(obs_size, action_size)
        self.kill_at = kill_at
        self.calls = 0

    def act(self, obs: torch.Tensor) -> dict[str, torch.Tensor]:
        self.calls += 1
        if self.calls == self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return super().act(obs)


class EchoPolicy(nn.Module):
    """Acts with ``gain * obs[:, :action_size]``: the actions show exactly what the policy saw."""

    def __init__(self, obs_size: int, action_size: int) -> None:
        super().__init__()
        self.action_size = action_size
        self.gain = nn.Parameter(torch.ones(()))

    def act(self, obs: torch.Tensor) -> dict[str, torch.Tensor]:
        actions = self.gain * obs[:, : self.action_size]
        return {"actions": actions, "log_prob": torch.zeros(obs.shape[0])}


def spec(name: str, obs_size: int, action_size: int, **kwargs) -> StandInSpec:
    """A picklable recipe for one of the classes above."""
    return StandInSpec(name, {"obs_size": obs_size, "action_size": action_size, **kwargs})


class EpisodeCountingPolicy(ConstantGaussian):
    """Acts with the number of finished episodes it was told about (``reset_episodes``) per env.

    Stands in for a policy with collector-side per-episode state (FastTD3's exploration scales):
    its actions make the loop's calls visible in the rollouts.
    """

    def __init__(self, obs_size: int, action_size: int) -> None:
        super().__init__(obs_size, action_size)
        self.finished: torch.Tensor | None = None

    def reset_episodes(self, done: torch.Tensor) -> None:
        base = torch.zeros(done.shape[0]) if self.finished is None else self.finished
        self.finished = base + done.float()

    def act(self, obs: torch.Tensor) -> dict[str, torch.Tensor]:
        out = super().act(obs)
        finished = torch.zeros(obs.shape[0]) if self.finished is None else self.finished
        return {
            "actions": finished[:, None].expand_as(out["actions"]).clone(),
            "log_prob": out["log_prob"],
        }
