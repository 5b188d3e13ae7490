"""When Lightning's loggers write: the public-API gate for metrics that are costly to log every step."""

from __future__ import annotations

from lightning.pytorch import Trainer


def loggers_write_this_step(trainer: Trainer) -> bool:
    """Whether the loggers write the metrics logged for the training batch that just stepped.

    Lightning writes a training batch's metrics when the count of batches trained so far,
    this one included, is a multiple of ``log_every_n_steps``, and on the batch that stops the
    run. Call this after the batch's optimizer step (late in ``training_step``, or in
    ``on_train_batch_end``), when ``trainer.global_step`` already counts the batch; it assumes
    one ``global_step`` per batch, as the algorithms here take.

    Args:
        trainer: The running trainer.

    Returns:
        True when the metrics logged now reach the loggers.
    """
    every = trainer.log_every_n_steps
    if every == 0:
        return False
    return trainer.global_step % every == 0 or trainer.should_stop
