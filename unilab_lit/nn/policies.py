"""Actor and critic networks shared by the learner and the collector, and the spec that rebuilds them."""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from rsl_rl.models import MLPModel
from tensordict import TensorDict
from torch import nn
from torch.distributions import Normal

from unilab_lit.envs.spec import CRITIC, POLICY

Activation = Literal[
    "elu", "selu", "relu", "crelu", "lrelu", "tanh", "sigmoid", "softplus", "gelu", "swish", "mish"
]
"""Activation names rsl-rl-lib's ``resolve_nn_activation`` understands (identity excluded)."""

_ACTIVATIONS: tuple[str, ...] = Activation.__args__
_STD_TYPES = ("scalar", "log")


@dataclass(frozen=True)
class PolicySpec:
    """How to rebuild a policy module in another process.

    Args:
        target: Import path of the module class (or factory), ``"package.module:Name"``.
        kwargs: Keyword arguments for ``target``; plain Python values only, so the spec pickles
            across a ``spawn`` boundary without importing the learner.
    """

    target: str
    kwargs: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, factory: Callable[..., nn.Module], kwargs: Mapping[str, Any]) -> PolicySpec:
        """The spec that rebuilds ``factory(**kwargs)``; ``factory`` is a module-level class."""
        return cls(f"{factory.__module__}:{factory.__qualname__}", dict(kwargs))

    def build(self) -> nn.Module:
        """Import ``target`` and call it with ``kwargs``.

        Raises:
            ValueError: If ``target`` is not of the form ``"package.module:Name"``.
        """
        module_name, sep, attr = self.target.partition(":")
        if not sep or not module_name or not attr:
            raise ValueError(
                f"PolicySpec.target must look like 'package.module:Name', got {self.target!r}"
            )
        factory = getattr(importlib.import_module(module_name), attr)
        return factory(**self.kwargs)


def check_mlp_args(
    obs_size: int, hidden_dims: tuple[int, ...] | list[int], activation: str
) -> None:
    """Validate an MLP's input width, hidden widths and activation name.

    Raises:
        ValueError: naming the bad argument and its valid range or choices.
    """
    if obs_size < 1:
        raise ValueError(f"obs_size must be >= 1, got {obs_size}")
    if len(hidden_dims) == 0 or any(h < 1 for h in hidden_dims):
        raise ValueError(
            f"hidden_dims must be a non-empty list of positive widths, got {list(hidden_dims)}"
        )
    if activation not in _ACTIVATIONS:
        raise ValueError(f"activation must be one of {list(_ACTIVATIONS)}, got {activation!r}")


def _example_obs(group: str, obs_size: int) -> TensorDict:
    # MLPModel only reads the group widths from its example observation.
    return TensorDict({group: torch.zeros(1, obs_size)}, batch_size=[1])


class GaussianActor(nn.Module):
    """Diagonal-Gaussian policy with a state-independent std: rsl-rl-lib ``MLPModel`` + ``GaussianDistribution``.

    The input is the *normalised* policy observation; normalisation lives outside the actor (in
    the learner's ``obs_normalizer``) so the collector can apply the learner's published statistics.

    The rsl-rl distribution module caches the last ``Normal`` it built. This class never uses that
    cache: every call builds its own ``Normal`` from the MLP mean and the std parameter, so two
    copies (learner, target, collector) never share or depend on hidden per-call state, and a
    copy can be deep-copied at any time.

    Args:
        obs_size: Width of the policy observation.
        action_size: Width of the action vector.
        hidden_dims: Widths of the hidden layers.
        activation: Hidden-layer activation name.
        init_std: Initial standard deviation of every action dimension (> 0).
        std_type: Parameterisation of the learned std: ``"scalar"`` (std itself) or ``"log"``.

    Raises:
        ValueError: If a size is not positive, ``activation``/``std_type`` is unknown or
            ``init_std`` is not positive.
    """

    def __init__(
        self,
        obs_size: int,
        action_size: int,
        hidden_dims: tuple[int, ...] | list[int] = (512, 256, 128),
        activation: Activation = "elu",
        init_std: float = 1.0,
        std_type: Literal["scalar", "log"] = "scalar",
    ) -> None:
        super().__init__()
        check_mlp_args(obs_size, hidden_dims, activation)
        if action_size < 1:
            raise ValueError(f"action_size must be >= 1, got {action_size}")
        if not (init_std > 0.0 and math.isfinite(init_std)):
            raise ValueError(f"init_std must be a finite value > 0, got {init_std}")
        if std_type not in _STD_TYPES:
            raise ValueError(f"std_type must be one of {list(_STD_TYPES)}, got {std_type!r}")
        self.obs_size = obs_size
        self.action_size = action_size
        self.model = MLPModel(
            _example_obs(POLICY, obs_size),
            {"actor": [POLICY]},
            "actor",
            action_size,
            hidden_dims=list(hidden_dims),
            activation=activation,
            obs_normalization=False,
            distribution_cfg={
                "class_name": "GaussianDistribution",
                "init_std": init_std,
                "std_type": std_type,
            },
        )

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Deterministic action (the mean), ``[..., obs_size] -> [..., action_size]``."""
        # No normaliser in the model and the Gaussian's deterministic output is the MLP output,
        # so the MLP alone is the whole forward pass; calling it keeps plain-tensor I/O.
        return self.model.mlp(obs)

    def std(self) -> torch.Tensor:
        """Current std vector ``[action_size]``, clamped to the distribution's range as rsl-rl does."""
        dist = self.model.distribution
        if dist.std_type == "scalar":
            return dist.std_param.clamp(dist.std_range[0], dist.std_range[1])
        return dist.log_std_param.clamp(dist.log_std_range[0], dist.log_std_range[1]).exp()

    def distribution(self, obs: torch.Tensor) -> Normal:
        """A fresh per-dimension ``Normal`` for ``obs`` (sum log-probs/entropies over the last dim)."""
        mean = self.forward(obs)
        return Normal(mean, self.std().expand_as(mean))

    def act(self, obs: torch.Tensor) -> dict[str, torch.Tensor]:
        """Sample an action for each row of ``obs``.

        Args:
            obs: Normalised policy observations ``[N, obs_size]``.

        Returns:
            ``{"actions": [N, action_size], "log_prob": [N]}``; ``log_prob`` is the log-density of
            exactly the returned (unclipped) action.
        """
        dist = self.distribution(obs)
        actions = dist.sample()
        return {"actions": actions, "log_prob": dist.log_prob(actions).sum(-1)}


class MLPCritic(nn.Module):
    """State-value network: rsl-rl-lib ``MLPModel`` with one output on the critic observation.

    Args:
        obs_size: Width of the (normalised) critic observation.
        hidden_dims: Widths of the hidden layers.
        activation: Hidden-layer activation name.

    Raises:
        ValueError: If a size is not positive or ``activation`` is unknown.
    """

    def __init__(
        self,
        obs_size: int,
        hidden_dims: tuple[int, ...] | list[int] = (512, 256, 128),
        activation: Activation = "elu",
    ) -> None:
        super().__init__()
        check_mlp_args(obs_size, hidden_dims, activation)
        self.obs_size = obs_size
        self.model = MLPModel(
            _example_obs(CRITIC, obs_size),
            {"critic": [CRITIC]},
            "critic",
            1,
            hidden_dims=list(hidden_dims),
            activation=activation,
            obs_normalization=False,
        )

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Values ``[...]`` of critic observations ``[..., obs_size]``."""
        # Without a normaliser or distribution MLPModel.forward is exactly its MLP.
        return self.model.mlp(obs).squeeze(-1)


class NormalizedPolicy(nn.Module):
    """Raw policy observation → deterministic action: the observation normaliser, then the actor.

    Both modules are the learner's own (not copies), so the policy always acts with the current
    weights and statistics. The forward pass has no data-dependent Python control flow, so
    ``torch.jit.trace`` and ``torch.onnx.export`` capture it whole.

    Args:
        normalizer: Maps raw observations ``[..., obs_size]`` to normalised ones.
        actor: Maps normalised observations to the deterministic action ``[..., action_size]``
            in its ``forward``.
    """

    def __init__(self, normalizer: nn.Module, actor: nn.Module) -> None:
        super().__init__()
        self.normalizer = normalizer
        self.actor = actor

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Deterministic action for raw observations ``[..., obs_size]``."""
        return self.actor(self.normalizer(obs))
