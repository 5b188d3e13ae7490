"""The one thing a data module requires of a model's training step before it starts a collector."""

from __future__ import annotations

from lightning.pytorch import LightningModule
from lightning.pytorch.utilities.signature_utils import is_param_in_hook_signature


def require_dataloader_iter(model: LightningModule, data_module_name: str) -> None:
    """Refuse a model whose ``training_step`` does not take ``dataloader_iter``.

    Lightning's default loop fetches a batch before ``on_train_start`` (the collector waits for
    that first weights publish: a deadlock until ``data_timeout_s``) and one batch ahead after
    it (a replay item's device slot is refilled by the next fetch).

    Raises:
        ValueError: naming the model and the data module.
    """
    if not is_param_in_hook_signature(model.training_step, "dataloader_iter", explicit=True):
        raise ValueError(
            f"{type(model).__name__}.training_step must take `dataloader_iter` to train "
            f"from {data_module_name}: the default loop fetches one batch ahead"
        )
