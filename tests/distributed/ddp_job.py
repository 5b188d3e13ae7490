"""One small DDP fit (gloo, CPU, 2 ranks) whose ranks record what the DDP tests compare.

Run as a script (Lightning's DDP launcher re-runs this file for rank 1):
    python tests/distributed/ddp_job.py ALGO OUT_DIR [--steps N] [--devices D] [--ckpt PATH]
        [--kill-collector-rank R]
Each rank writes ``OUT_DIR/rank<r>.pt``: its module state, optimizer states, the raw policy
observations its normaliser folded in, its data module's env-step counter and, on rank 0, the
logged ``Train/env_steps``. ``--kill-collector-rank`` SIGKILLs that rank's collector after its
second iteration (the job must end with that rank's error).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

import torch
from lightning.pytorch import Callback, Trainer, seed_everything
from lightning.pytorch.callbacks import ModelCheckpoint

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from callbacks import EpisodeStatsMonitor, ObsNormSync, RLCheckpoint, WeightSync  # noqa: E402
from unilab_lit import metrics  # noqa: E402
from unilab_lit.algos.appo import APPO  # noqa: E402
from unilab_lit.algos.fast_sac import FastSAC  # noqa: E402
from unilab_lit.algos.fast_td3 import FastTD3  # noqa: E402
from unilab_lit.data.replay import ReplayDataModule  # noqa: E402
from unilab_lit.data.rollout import RolloutDataModule  # noqa: E402

NUM_ENVS = 8


def build(algo: str):
    seed_everything(0)
    if algo == "appo":
        data = RolloutDataModule(
            task="CartpoleSwingup",
            num_envs=NUM_ENVS,
            num_steps=8,
            staging_capacity=2,
            synchronous=True,
            seed=1,
            learner_torch_threads=1,
        )
        spec = data.env_spec
        model = APPO(
            spec.obs_sizes["policy"],
            spec.obs_sizes["critic"],
            spec.action_size,
            actor_hidden_dims=(16,),
            critic_hidden_dims=(16,),
            num_learning_epochs=2,
            num_mini_batches=2,
            desired_kl=0.001,  # the adaptive rate moves every iteration
        )
        return model, data
    data = ReplayDataModule(
        task="CartpoleSwingup",
        num_envs=NUM_ENVS,
        batch_size=8,
        buffer_size=64,
        learning_starts=2,
        synchronous=True,
        seed=1,
        task_kwargs={"max_episode_steps": 7},
        learner_torch_threads=1,
    )
    spec = data.env_spec
    cls = {"fast_sac": FastSAC, "fast_td3": FastTD3}[algo]
    model = cls(
        spec.obs_sizes["policy"],
        spec.obs_sizes["critic"],
        spec.action_size,
        actor_hidden_dims=(16,),
        critic_hidden_dims=(16,),
        num_atoms=11,
        v_min=-10.0,
        v_max=10.0,
        updates_per_step=2,
        policy_frequency=1,
    )
    return model, data


class Recorder(Callback):
    """Keeps every batch the policy normaliser folds in; saves this rank's record at the end."""

    def __init__(self, out_dir: Path, kill_collector_rank: int | None) -> None:
        self.out_dir = out_dir
        self.kill_collector_rank = kill_collector_rank
        self.obs: list[torch.Tensor] = []

    def on_fit_start(self, trainer, pl_module) -> None:
        update = pl_module.obs_normalizer.update

        def recording_update(x: torch.Tensor) -> None:
            self.obs.append(x.detach().reshape(-1, x.shape[-1]).clone())
            update(x)

        pl_module.obs_normalizer.update = recording_update
        pids = {"rank": os.getpid(), "collector": trainer.datamodule.collector.pid}
        torch.save(pids, self.out_dir / f"pids{trainer.global_rank}.pt")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_rank == self.kill_collector_rank and trainer.global_step == 2:
            os.kill(trainer.datamodule.collector.pid, signal.SIGKILL)
            (self.out_dir / "killed_at").write_text(repr(time.time()))

    def on_train_end(self, trainer, pl_module) -> None:
        logged = trainer.callback_metrics.get(metrics.ENV_STEPS)
        record = {
            "state": {k: v.clone() for k, v in pl_module.state_dict().items()},
            "optimizers": [opt.state_dict() for opt in trainer.optimizers],
            "obs": torch.cat(self.obs),
            "env_steps": trainer.datamodule.env_steps,
            "logged_env_steps": None if logged is None else float(logged),
            "global_step": trainer.global_step,
        }
        torch.save(record, self.out_dir / f"rank{trainer.global_rank}.pt")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("algo", choices=("appo", "fast_sac", "fast_td3"))
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--ckpt", type=Path, default=None)
    parser.add_argument("--checkpoint-every", type=int, default=0)
    parser.add_argument("--kill-collector-rank", type=int, default=None)
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    model, data = build(args.algo)
    callbacks: list[Callback] = [
        WeightSync(),
        ObsNormSync(),
        EpisodeStatsMonitor(),
        RLCheckpoint(),
        Recorder(args.out_dir, args.kill_collector_rank),
    ]
    if args.checkpoint_every:
        callbacks.append(
            ModelCheckpoint(
                dirpath=args.out_dir / "checkpoints",
                every_n_train_steps=args.checkpoint_every,
                save_top_k=-1,
            )
        )
    trainer = Trainer(
        max_steps=args.steps,
        accelerator="cpu",
        strategy="ddp",
        devices=args.devices,
        logger=False,
        log_every_n_steps=1,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=bool(args.checkpoint_every),
        callbacks=callbacks,
    )
    trainer.fit(model, datamodule=data, ckpt_path=args.ckpt)


if __name__ == "__main__":
    main()
