"""Actor and critic networks shared by the learner and the collector, and the spec that rebuilds them.

Plain ``torch.nn`` with rsl-rl-lib's layout (``model.mlp`` as its ``MLP``, the std parameter in
``model.distribution`` as its ``GaussianDistribution``) and activation names: the collector
imports this module, and any rsl-rl-lib import pulls in tensordict and torch._dynamo, seconds of
start-up the collector does not need.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import nn
from torch.distributions import Normal

from unilab_lit.validation import check_arg

Activation = Literal[
    "elu", "selu", "relu", "crelu", "lrelu", "tanh", "sigmoid", "softplus", "gelu", "swish", "mish"
]
"""Activation names of rsl-rl-lib's ``resolve_nn_activation`` (identity excluded)."""


def _elu_by_exp(x: torch.Tensor) -> torch.Tensor:
    """ELU (α = 1) as ``max(x, exp(min(x, 0)) - 1)``: since ``exp(x) >= 1 + x``, the maximum is
    ``x`` for ``x > 0`` and ``exp(x) - 1`` otherwise.

    On the CPU, ATen's ELU evaluates ``expm1``, which costs as much as the layer's matmul at the
    learner's sizes (1536 x 128 on one core: 1.06 ms, ``exp`` 0.33 ms); this form takes 0.49 ms
    and gives the same values to within 6e-8 (``exp(x) - 1`` against ``expm1(x)`` near 0).
    """
    y = torch.clamp(x, max=0.0).exp_().sub_(1.0)
    return torch.maximum(x, y, out=y)


class _CpuELUFunction(torch.autograd.Function):
    """:func:`_elu_by_exp` with the gradient ``min(y + 1, 1)`` of its saved output ``y``."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        y = _elu_by_exp(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (y,) = ctx.saved_tensors
        return grad * (y + 1.0).clamp_(max=1.0)


_ELU_BY_EXP_MIN_NUMEL = 8192
"""Below this many elements ATen's ELU is the faster (its one call against four)."""


class ELU(nn.ELU):
    """``nn.ELU()`` that takes :func:`_elu_by_exp` on CPU tensors of at least
    :data:`_ELU_BY_EXP_MIN_NUMEL` elements: the Go1's APPO learner iteration in 0.55-0.57 s
    instead of 0.59-0.62 (docs/algorithms.md). ATen's own ELU on other devices, on small tensors
    and while ``torch.export``, ``torch.compile`` or the ONNX exporter trace it, so exported
    graphs hold the standard ``Elu`` op.
    """

    def __init__(self) -> None:
        # No alpha or inplace: the exp form is ELU for alpha = 1 only, and returns a new tensor.
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Tracing first: under torch.export the size test would guard the dynamic batch dimension.
        if (
            torch.compiler.is_compiling()
            or torch.jit.is_tracing()
            or x.device.type != "cpu"
            or x.numel() < _ELU_BY_EXP_MIN_NUMEL
        ):
            return super().forward(x)
        if torch.is_grad_enabled() and x.requires_grad:
            return _CpuELUFunction.apply(x)
        return _elu_by_exp(x)


# The modules rsl-rl-lib's resolve_nn_activation maps each name to (ELU: the same function, see
# ELU above).
_ACTIVATION_MODULES: dict[str, type[nn.Module]] = {
    "elu": ELU,
    "selu": nn.SELU,
    "relu": nn.ReLU,
    "crelu": nn.CELU,
    "lrelu": nn.LeakyReLU,
    "tanh": nn.Tanh,
    "sigmoid": nn.Sigmoid,
    "softplus": nn.Softplus,
    "gelu": nn.GELU,
    "swish": nn.SiLU,
    "mish": nn.Mish,
}
_ACTIVATIONS: tuple[str, ...] = Activation.__args__
_STD_TYPES = ("scalar", "log")
# rsl-rl-lib GaussianDistribution's default std clamp range, in std and in log-std space.
_STD_RANGE = (1e-6, 1e6)
_LOG_STD_RANGE = (math.log(_STD_RANGE[0]), math.log(_STD_RANGE[1]))
# log(sqrt(2π)), spelled as torch.distributions.Normal.log_prob spells it (bit-identical results).
_LOG_SQRT_2PI = math.log(math.sqrt(2 * math.pi))


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
    check_arg(obs_size >= 1, "obs_size", obs_size, ">= 1")
    check_arg(
        len(hidden_dims) > 0 and all(h >= 1 for h in hidden_dims),
        "hidden_dims",
        list(hidden_dims),
        "a non-empty list of positive widths",
    )
    check_arg(activation in _ACTIVATIONS, "activation", activation, f"one of {list(_ACTIVATIONS)}")


def mlp(
    input_size: int,
    output_size: int,
    hidden_dims: Sequence[int],
    activation: Activation,
    layer_norm: bool = False,
) -> nn.Sequential:
    """``Linear → [LayerNorm] → activation`` per hidden width, then a linear output layer.

    Without ``layer_norm`` the layers and their ``state_dict`` keys are those of rsl-rl-lib's ``MLP``.
    """
    layers: list[nn.Module] = []
    width = input_size
    for hidden in hidden_dims:
        layers.append(nn.Linear(width, hidden))
        if layer_norm:
            layers.append(nn.LayerNorm(hidden))
        layers.append(_ACTIVATION_MODULES[activation]())
        width = hidden
    layers.append(nn.Linear(width, output_size))
    return nn.Sequential(*layers)


def gaussian_log_prob(actions: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """Log-density of a diagonal Gaussian, summed over the last dimension.

    The terms are ``torch.distributions.Normal.log_prob``'s, in its order, without building a
    distribution object (which costs more than the arithmetic at collector batch sizes).
    """
    var = std**2
    return (-((actions - mean) ** 2) / (2 * var) - std.log() - _LOG_SQRT_2PI).sum(-1)


class _StdParameter(nn.Module):
    """The learned std in rsl-rl-lib ``GaussianDistribution``'s parameter names and clamp ranges."""

    def __init__(self, action_size: int, init_std: float, std_type: str) -> None:
        super().__init__()
        self.std_type = std_type
        if std_type == "scalar":
            self.std_param = nn.Parameter(init_std * torch.ones(action_size))
        else:
            self.log_std_param = nn.Parameter(torch.log(init_std * torch.ones(action_size)))

    def forward(self) -> torch.Tensor:
        if self.std_type == "scalar":
            return self.std_param.clamp(*_STD_RANGE)
        return self.log_std_param.clamp(*_LOG_STD_RANGE).exp()


class GaussianActor(nn.Module):
    """Diagonal-Gaussian policy with a state-independent std (rsl-rl-lib ``MLPModel`` + ``GaussianDistribution`` layout).

    The input is the *normalised* policy observation; normalisation lives outside the actor (in
    the learner's ``obs_normalizer``) so the collector can apply the learner's published statistics.

    Every call builds its own distribution from the MLP mean and the std parameter; the actor
    caches nothing per call, so copies (learner, target, collector) never share hidden state and
    a copy can be deep-copied at any time.

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
        check_arg(action_size >= 1, "action_size", action_size, ">= 1")
        check_arg(
            init_std > 0.0 and math.isfinite(init_std), "init_std", init_std, "a finite value > 0"
        )
        check_arg(std_type in _STD_TYPES, "std_type", std_type, f"one of {list(_STD_TYPES)}")
        self.obs_size = obs_size
        self.action_size = action_size
        # MLPModel's attribute paths and registration order, so state-dict keys (and checkpoints)
        # read as rsl-rl-lib's.
        self.model = nn.Module()
        self.model.distribution = _StdParameter(action_size, init_std, std_type)
        self.model.mlp = mlp(obs_size, action_size, hidden_dims, activation)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Deterministic action (the mean), ``[..., obs_size] -> [..., action_size]``."""
        return self.model.mlp(obs)

    def std(self) -> torch.Tensor:
        """Current std vector ``[action_size]``, clamped to the range rsl-rl-lib uses."""
        return self.model.distribution()

    def distribution(self, obs: torch.Tensor) -> Normal:
        """A fresh per-dimension ``Normal`` for ``obs`` (sum log-probs/entropies over the last dim)."""
        mean = self.forward(obs)
        # Argument validation re-checks the std every call; the std is clamped positive already.
        return Normal(mean, self.std().expand_as(mean), validate_args=False)

    def act(self, obs: torch.Tensor) -> dict[str, torch.Tensor]:
        """Sample an action for each row of ``obs``.

        Args:
            obs: Normalised policy observations ``[N, obs_size]``.

        Returns:
            ``{"actions": [N, action_size], "log_prob": [N]}``; ``log_prob`` is the log-density of
            exactly the returned (unclipped) action.
        """
        mean = self.forward(obs)
        std = self.std().expand_as(mean)
        with torch.no_grad():
            # The draw Normal.sample makes, so a seed gives the same actions as before.
            actions = torch.normal(mean, std)
        return {"actions": actions, "log_prob": gaussian_log_prob(actions, mean, std)}


class MLPCritic(nn.Module):
    """State-value network on the critic observation (rsl-rl-lib ``MLPModel`` layout, one output).

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
        self.model = nn.Module()
        self.model.mlp = mlp(obs_size, 1, hidden_dims, activation)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Values ``[...]`` of critic observations ``[..., obs_size]``."""
        return self.model.mlp(obs).squeeze(-1)


class NormalizedPolicy(nn.Module):
    """Raw policy observation → deterministic action: the observation normaliser, then the actor.

    Both modules are the learner's own (not copies), so the policy always acts with the current
    weights and statistics. The forward pass has no data-dependent Python control flow, so
    ``torch.export.export`` and ``torch.onnx.export`` capture it whole.

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
