"""The summary a finished run logs: iterations, env steps, returns, paths, next commands."""

from __future__ import annotations

from lightning.pytorch import Trainer

from unilab_lit.app import export, play
from unilab_lit.telemetry.metrics import ENV_STEPS, EVAL_MEAN_REWARD, MEAN_REWARD


def run_summary(trainer: Trainer, wall_s: float) -> str:
    """The block a finished fit logs: how far it got, its returns, where it wrote, what next.

    Call it on every rank: ``trainer.log_dir`` is a collective under DDP.
    """
    metrics = trainer.callback_metrics

    def figure(key: str, absent: str) -> str:
        return f"{float(metrics[key]):.1f}" if key in metrics else absent

    env_steps = f"{int(metrics[ENV_STEPS]):,}" if ENV_STEPS in metrics else "not counted"
    checkpoint = trainer.checkpoint_callback
    last = (checkpoint.last_model_path or checkpoint.best_model_path) if checkpoint else ""
    lines = [
        "run summary",
        f"  iterations     {trainer.global_step:,}",
        f"  env steps      {env_steps}",
        f"  wall-clock     {wall_s:,.1f} s",
        f"  Train return   {figure(MEAN_REWARD, 'no episode finished')}",
        f"  Eval return    {figure(EVAL_MEAN_REWARD, 'not evaluated (no PolicyEvaluator)')}",
        f"  checkpoints    {checkpoint.dirpath if checkpoint else 'none (checkpointing is off)'}",
        f"  logs           {trainer.log_dir}",
    ]
    if last:
        lines += [
            f"  play           python -m {play.__name__} --ckpt_path {last}",
            f"  export         python -m {export.__name__} --ckpt_path {last} --output policy.onnx",
        ]
    return "\n".join(lines)
