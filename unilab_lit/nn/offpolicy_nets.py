"""Actor and critic networks of the off-policy learners (FastTD3, FastSAC).

rsl-rl-lib's ``MLPModel`` fits a single observation group and has no LayerNorm, while these
critics read ``(observation, action)`` and FastSAC's networks normalise every hidden layer, so
the networks here are plain ``torch.nn`` stacks with rsl-rl-lib's activation names.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from unilab_lit.nn.policies import Activation, check_mlp_args, mlp
from unilab_lit.validation import check_arg

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def _check_action_size(action_size: int) -> None:
    check_arg(action_size >= 1, "action_size", action_size, ">= 1")


class DeterministicActor(nn.Module):
    """Deterministic tanh policy with per-env Gaussian exploration noise (FastTD3's actor).

    ``forward`` is the deterministic action in ``[-1, 1]``; ``act`` adds ``N(0, σ_i²)`` noise
    where each env ``i`` has its own scale ``σ_i ~ U[noise_std_min, noise_std_max]``, redrawn by
    :meth:`reset_episodes` when that env's episode ends (Seo et al. 2025, FastTD3).

    The scales are collector-side state: a plain attribute, not a parameter or buffer, so they
    are outside ``state_dict()`` and a weight sync (which copies the state dict) never overwrites
    them. They are drawn for ``N`` envs on the first ``act`` or ``reset_episodes`` call.

    Args:
        obs_size: Width of the (normalised) policy observation.
        action_size: Width of the action vector.
        hidden_dims: Widths of the hidden layers.
        activation: Hidden-layer activation name.
        layer_norm: Put a LayerNorm after every hidden linear layer.
        init_scale: Std of the normal init of the output layer's weights (bias 0), > 0; small
            values start the policy near the zero action.
        noise_std_min: Smallest per-env exploration std, >= 0.
        noise_std_max: Largest per-env exploration std, >= noise_std_min.

    Raises:
        ValueError: If a size is not positive, ``activation`` is unknown or a scale is out of range.
    """

    def __init__(
        self,
        obs_size: int,
        action_size: int,
        hidden_dims: Sequence[int] = (512, 256, 128),
        activation: Activation = "relu",
        layer_norm: bool = False,
        init_scale: float = 0.01,
        noise_std_min: float = 0.001,
        noise_std_max: float = 0.4,
    ) -> None:
        super().__init__()
        check_mlp_args(obs_size, hidden_dims, activation)
        _check_action_size(action_size)
        check_arg(init_scale > 0.0, "init_scale", init_scale, "> 0")
        if not 0.0 <= noise_std_min <= noise_std_max:
            raise ValueError(
                "noise_std_min and noise_std_max must satisfy 0 <= min <= max, got "
                f"noise_std_min={noise_std_min}, noise_std_max={noise_std_max}"
            )
        self.obs_size = obs_size
        self.action_size = action_size
        self.noise_std_min = noise_std_min
        self.noise_std_max = noise_std_max
        self.net = mlp(obs_size, action_size, hidden_dims, activation, layer_norm)
        nn.init.normal_(self.net[-1].weight, 0.0, init_scale)
        nn.init.zeros_(self.net[-1].bias)
        self.noise_scales: torch.Tensor | None = None

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Deterministic action ``[..., obs_size] -> [..., action_size]`` in ``[-1, 1]``."""
        return torch.tanh(self.net(obs))

    @torch.no_grad()
    def act(self, obs: torch.Tensor) -> dict[str, torch.Tensor]:
        """Exploration action for each env: ``clamp(forward(obs) + σ_i·ε, -1, 1)``, ``ε ~ N(0, I)``.

        Args:
            obs: Normalised policy observations ``[N, obs_size]``, one row per env.

        Returns:
            ``{"actions": [N, action_size]}``. Clamped to the tanh range so the replay holds the
            actions the critic is trained on, not values the env would clip.

        Raises:
            ValueError: If ``N`` differs from the number of envs the scales were drawn for.
        """
        mean = self(obs)
        scales = self._scales_for(obs.shape[0], obs.device)
        return {"actions": (mean + torch.randn_like(mean) * scales).clamp(-1.0, 1.0)}

    @torch.no_grad()
    def reset_episodes(self, done: torch.Tensor) -> None:
        """Redraw the exploration scale of every env whose episode just ended.

        Args:
            done: Boolean ``[N]``, true where the env's episode ended on the last step.

        Raises:
            ValueError: If ``N`` differs from the number of envs the scales were drawn for.
        """
        scales = self._scales_for(done.shape[0], done.device)
        # A new tensor rather than an in-place write: the collector creates the scales under
        # inference_mode, and inference tensors cannot be modified in place outside it.
        self.noise_scales = torch.where(
            done.reshape(-1, 1), self._draw_scales(done.shape[0], scales.device), scales
        )

    def _scales_for(self, num_envs: int, device: torch.device) -> torch.Tensor:
        if self.noise_scales is None:
            self.noise_scales = self._draw_scales(num_envs, device)
        if self.noise_scales.shape[0] != num_envs:
            raise ValueError(
                f"got {num_envs} envs, but the exploration scales were drawn for "
                f"{self.noise_scales.shape[0]}; one actor must always act for the same envs"
            )
        return self.noise_scales

    def _draw_scales(self, num_envs: int, device: torch.device) -> torch.Tensor:
        span = self.noise_std_max - self.noise_std_min
        return self.noise_std_min + span * torch.rand(num_envs, 1, device=device)


def squashed_gaussian_log_prob(
    pre_tanh: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor
) -> torch.Tensor:
    """Log-density of ``a = tanh(u)``, ``u ~ N(mean, exp(log_std)²)``, summed over the last dim.

    ``log π(a) = Σ [log N(u; μ, σ) − log(1 − tanh²(u))]`` (Haarnoja et al. 2018, SAC, App. C),
    with ``log(1 − tanh²(u)) = 2·(log 2 − u − softplus(−2u))``, which stays finite where
    ``tanh(u)`` rounds to ±1.
    """
    z = (pre_tanh - mean) * torch.exp(-log_std)
    normal = -0.5 * z.square() - log_std - _HALF_LOG_2PI
    log_det = 2.0 * (math.log(2.0) - pre_tanh - F.softplus(-2.0 * pre_tanh))
    return (normal - log_det).sum(-1)


class SquashedGaussianActor(nn.Module):
    """Tanh-squashed diagonal Gaussian policy with a state-dependent std (FastSAC's actor).

    One MLP outputs the mean and a raw log-std; the log-std is mapped smoothly into
    ``[log_std_min, log_std_max]``. The output layer starts at zero (mean 0, log-std at the
    middle of its range).

    Args:
        obs_size: Width of the (normalised) policy observation.
        action_size: Width of the action vector.
        hidden_dims: Widths of the hidden layers.
        activation: Hidden-layer activation name.
        layer_norm: Put a LayerNorm after every hidden linear layer.
        log_std_min: Lower bound of the pre-tanh log-std.
        log_std_max: Upper bound of the pre-tanh log-std, > log_std_min.

    Raises:
        ValueError: If a size is not positive, ``activation`` is unknown or the bounds are not
            increasing.
    """

    def __init__(
        self,
        obs_size: int,
        action_size: int,
        hidden_dims: Sequence[int] = (512, 256, 128),
        activation: Activation = "swish",
        layer_norm: bool = True,
        log_std_min: float = -5.0,
        log_std_max: float = 2.0,
    ) -> None:
        super().__init__()
        check_mlp_args(obs_size, hidden_dims, activation)
        _check_action_size(action_size)
        check_arg(
            log_std_min < log_std_max, "log_std_min", log_std_min, f"< log_std_max={log_std_max}"
        )
        self.obs_size = obs_size
        self.action_size = action_size
        self.log_std_min = log_std_min
        self.log_std_max = log_std_max
        self.net = mlp(obs_size, 2 * action_size, hidden_dims, activation, layer_norm)
        nn.init.zeros_(self.net[-1].weight)
        nn.init.zeros_(self.net[-1].bias)

    def distribution_params(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Pre-tanh ``(mean, log_std)``, each ``[..., action_size]``, in float32."""
        # float32 even under bf16 autocast: the log-density subtracts nearby large terms.
        mean, raw = self.net(obs).float().chunk(2, dim=-1)
        span = self.log_std_max - self.log_std_min
        return mean, self.log_std_min + 0.5 * span * (torch.tanh(raw) + 1.0)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Deterministic action ``tanh(mean)``, ``[..., obs_size] -> [..., action_size]``."""
        mean, _ = self.distribution_params(obs)
        return torch.tanh(mean)

    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Reparameterised sample: ``(actions [..., A], log_prob [...], log_std [..., A])``."""
        mean, log_std = self.distribution_params(obs)
        pre_tanh = mean + log_std.exp() * torch.randn_like(mean)
        return torch.tanh(pre_tanh), squashed_gaussian_log_prob(pre_tanh, mean, log_std), log_std

    @torch.no_grad()
    def act(self, obs: torch.Tensor) -> dict[str, torch.Tensor]:
        """Sample an action for each row of ``obs``.

        Args:
            obs: Normalised policy observations ``[N, obs_size]``.

        Returns:
            ``{"actions": [N, action_size], "log_prob": [N]}``; ``log_prob`` is the log-density of
            exactly the returned (squashed) action.
        """
        actions, log_prob, _ = self.sample(obs)
        return {"actions": actions, "log_prob": log_prob}


class TwinDistributionalCritic(nn.Module):
    """Two independent C51 critics: ``(critic observation, action) -> logits over the atoms``.

    With ``num_atoms=1`` each head outputs a plain scalar Q (TD3's critics).

    Args:
        obs_size: Width of the (normalised) critic observation.
        action_size: Width of the action vector.
        num_atoms: Number of support atoms (>= 2), or 1 for scalar Q heads.
        hidden_dims: Widths of the hidden layers of each critic.
        activation: Hidden-layer activation name.
        layer_norm: Put a LayerNorm after every hidden linear layer.

    Raises:
        ValueError: If a size is not positive, ``num_atoms < 1`` or ``activation`` is unknown.
    """

    def __init__(
        self,
        obs_size: int,
        action_size: int,
        num_atoms: int = 101,
        hidden_dims: Sequence[int] = (1024, 512, 256),
        activation: Activation = "relu",
        layer_norm: bool = False,
    ) -> None:
        super().__init__()
        check_mlp_args(obs_size, hidden_dims, activation)
        _check_action_size(action_size)
        check_arg(num_atoms >= 1, "num_atoms", num_atoms, ">= 1")
        self.num_atoms = num_atoms
        self.heads = nn.ModuleList(
            mlp(obs_size + action_size, num_atoms, hidden_dims, activation, layer_norm)
            for _ in range(2)
        )

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Logits ``[2, B, num_atoms]`` for observations ``[B, obs_size]``, actions ``[B, A]``.

        With one atom the single output of each head is its Q value.
        """
        x = torch.cat((obs, actions), dim=-1)
        return torch.stack([head(x) for head in self.heads])
