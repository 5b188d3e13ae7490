"""A short ``Trainer`` for tests that fit on a real collector subprocess."""

from __future__ import annotations

from typing import Any

from lightning.pytorch import Callback, Trainer

from unilab_lit.callbacks import ObsNormSync, WeightSync

_QUIET = {
    "accelerator": "cpu",
    "logger": False,
    "enable_checkpointing": False,
    "enable_progress_bar": False,
    "enable_model_summary": False,
}


def collector_trainer(max_steps: int, *callbacks: Callback, **kwargs: Any) -> Trainer:
    """A CPU ``Trainer`` with ``WeightSync`` and ``ObsNormSync`` first, then ``callbacks``.

    No logger, checkpoints, progress bar or model summary unless ``kwargs`` (any ``Trainer``
    argument) turns them on.
    """
    return Trainer(
        max_steps=max_steps,
        callbacks=[WeightSync(), ObsNormSync(), *callbacks],
        **{**_QUIET, **kwargs},
    )


def tiny_appo(data: Any, cls: type | None = None, **kwargs: Any) -> Any:
    """An APPO (or ``cls``) sized from ``data.env_spec`` with 16-unit networks; ``kwargs`` set
    its other arguments."""
    from unilab_lit.algos.appo import APPO

    spec = data.env_spec
    return (cls or APPO)(
        policy_obs_size=spec.obs_sizes["policy"],
        critic_obs_size=spec.obs_sizes["critic"],
        action_size=spec.action_size,
        actor_hidden_dims=(16,),
        critic_hidden_dims=(16,),
        **kwargs,
    )
