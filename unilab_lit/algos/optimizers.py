"""AdamW with the off-policy recipes' settings as defaults, for ``OptimizerCallable`` arguments.

A constructor default of an ``OptimizerCallable`` argument must be a class for
``--print_config`` to show it as ``class_path`` + ``init_args``; these classes carry the
FastTD3 / FastSAC settings as their defaults, so a YAML that names no optimizer trains as the
recipes do. Any ``torch.optim`` class works in their place.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch


class FastTD3AdamW(torch.optim.AdamW):
    """AdamW with FastTD3's settings as defaults (Seo et al. 2025): lr 3e-4, weight decay 0.1.

    Args:
        params: Parameters or parameter groups.
        lr: Learning rate (> 0).
        betas: ``(β1, β2)``, each in [0, 1).
        eps: Added to the denominator.
        weight_decay: Decoupled weight decay (>= 0).
        fused: One fused kernel per parameter instead of a dozen small ops (CPU and CUDA; on
            CPU it takes a FastTD3 iteration from ~34 to ~29 ms, bench/README.md).
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 3e-4,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.1,
        fused: bool = True,
    ) -> None:
        super().__init__(
            params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, fused=fused
        )


class FastSACAdamW(FastTD3AdamW):
    """AdamW with FastSAC's settings as defaults: lr 3e-4, betas (0.9, 0.95), weight decay 0.001.

    Takes :class:`FastTD3AdamW`'s arguments.
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 3e-4,
        betas: tuple[float, float] = (0.9, 0.95),
        eps: float = 1e-8,
        weight_decay: float = 0.001,
        fused: bool = True,
    ) -> None:
        super().__init__(
            params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, fused=fused
        )


# A checkpoint of a directly built learner holds these classes in its hyperparameters; Lightning
# loads checkpoints with torch's weights-only unpickler, which needs them allowed.
torch.serialization.add_safe_globals([FastTD3AdamW, FastSACAdamW])
