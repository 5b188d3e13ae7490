"""One small DDP fit (gloo, CPU, 2 ranks) whose ranks record what the DDP tests compare.

Run as a script (Lightning's DDP launcher re-runs this file for rank 1; under ``torchrun``, one
launcher per node starts it with ``--devices 1 --num-nodes 2``):
    python tests/distributed/ddp_job.py ALGO OUT_DIR [--steps N] [--devices D] [--num-nodes M]
        [--ckpt PATH]
        [--kill-collector-rank R] [--stop-collector-rank R] [--max-env-steps B] [--evaluate]
        [--save-replay]
Each rank writes ``OUT_DIR/rank<r>.pt``: its module state, optimizer states, the raw policy
observations its normaliser folded in, its data module's env-step counter, on rank 0 the logged
``Train/env_steps``, and what it resumed from (the step and env-step counter at the start of
training, the rank whose callback state it restored). A job stopped by SIGTERM exits with
status 143, as ``unilab_lit.app.unilab_cli`` does. ``--kill-collector-rank`` SIGKILLs that rank's collector after its
second iteration (the job must end with that rank's error); ``--stop-collector-rank`` SIGSTOPs it
there instead and touches ``OUT_DIR/hung`` (that rank then waits on data). ``--max-env-steps`` adds an
``EnvStepBudget`` of ``B`` env steps. ``--evaluate`` adds a ``PolicyEvaluator`` with clips, a
TensorBoard logger and checkpoints monitoring ``Eval/mean_reward``, ``Train/mean_reward`` and
``Loss/value``;
only rank 0's collector finishes episodes (8-step ones), so rank 1 has none of its own.
``--save-replay`` saves each rank's replay with the checkpoints (``RLCheckpoint(save_replay=True)``).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import sys
import time
from pathlib import Path

import torch
from lightning.pytorch import Callback, Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities.exceptions import SIGTERMException

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.test_resume import _build as build_appo  # noqa: E402
from tests.test_resume import _build_offpolicy as build_fast_td3  # noqa: E402
from unilab_lit.algos.appo import APPO  # noqa: E402
from unilab_lit.algos.fast_sac import FastSAC  # noqa: E402
from unilab_lit.app.unilab_cli import SIGTERM_EXIT_STATUS  # noqa: E402
from unilab_lit.callbacks import (  # noqa: E402
    EnvStepBudget,
    EpisodeStatsMonitor,
    InterruptGuard,
    ObsNormSync,
    PolicyEvaluator,
    RLCheckpoint,
    WeightSync,
)
from unilab_lit.telemetry import metrics  # noqa: E402


def build(algo: str):
    """APPO and FastTD3 as the single-process resume tests build them; FastSAC on FastTD3's data.

    ``appo_options`` is that APPO with PopArt, a linear learning rate and a tight observation clip.
    """
    if algo == "appo":
        return build_appo()
    if algo == "appo_options":
        model, data = build_appo()
        options = {"value_normalization": "popart", "schedule": "linear", "obs_clip": 2.0}
        return APPO(**{**model.hparams, **options}), data
    td3, data = build_fast_td3()
    if algo == "fast_td3":
        return td3, data
    hp = td3.hparams
    # policy_frequency=1: actor and temperature step with every critic step.
    model = FastSAC(
        hp.policy_obs_size,
        hp.critic_obs_size,
        hp.action_size,
        actor_hidden_dims=hp.actor_hidden_dims,
        critic_hidden_dims=hp.critic_hidden_dims,
        offpolicy=dataclasses.replace(td3.offpolicy, policy_frequency=1),
    )
    return model, data


class Recorder(Callback):
    """Keeps every batch the policy normaliser folds in; saves this rank's record at the end."""

    def __init__(
        self, out_dir: Path, kill_collector_rank: int | None, stop_collector_rank: int | None
    ) -> None:
        self.out_dir = out_dir
        self.kill_collector_rank = kill_collector_rank
        self.stop_collector_rank = stop_collector_rank
        self.obs: list[torch.Tensor] = []
        self.restored_rank: int | None = None
        self.start: tuple[int, int] | None = None

    def state_dict(self) -> dict:
        # Rank-local callback state: a resumed rank must get back its own.
        return {"rank": self.rank}

    def load_state_dict(self, state_dict: dict) -> None:
        self.restored_rank = state_dict["rank"]

    def setup(self, trainer, pl_module, stage) -> None:
        self.rank = trainer.global_rank

    def on_fit_start(self, trainer, pl_module) -> None:
        update = pl_module.obs_normalizer.update

        def recording_update(x: torch.Tensor) -> None:
            self.obs.append(x.detach().reshape(-1, x.shape[-1]).clone())
            update(x)

        pl_module.obs_normalizer.update = recording_update
        pids = {"rank": os.getpid(), "collector": trainer.datamodule.session.process.pid}
        torch.save(pids, self.out_dir / f"pids{trainer.global_rank}.pt")

    def on_train_start(self, trainer, pl_module) -> None:
        self.start = (trainer.global_step, trainer.datamodule.feed.env_steps)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == 1:
            (self.out_dir / f"trained{trainer.global_rank}").touch()
        if trainer.global_rank == self.kill_collector_rank and trainer.global_step == 2:
            os.kill(trainer.datamodule.session.process.pid, signal.SIGKILL)
            (self.out_dir / "killed_at").write_text(repr(time.time()))
        if trainer.global_rank == self.stop_collector_rank and trainer.global_step == 2:
            os.kill(trainer.datamodule.session.process.pid, signal.SIGSTOP)
            (self.out_dir / "hung").touch()

    def on_train_end(self, trainer, pl_module) -> None:
        logged = trainer.callback_metrics.get(metrics.ENV_STEPS)
        record = {
            "callback_metrics": {k: float(v) for k, v in trainer.callback_metrics.items()},
            "state": {k: v.clone() for k, v in pl_module.state_dict().items()},
            "optimizers": [opt.state_dict() for opt in trainer.optimizers],
            "obs": torch.cat(self.obs),
            "env_steps": trainer.datamodule.feed.env_steps,
            "logged_env_steps": None if logged is None else float(logged),
            "global_step": trainer.global_step,
            "start": self.start,
            "restored_rank": self.restored_rank,
        }
        torch.save(record, self.out_dir / f"rank{trainer.global_rank}.pt")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("algo", choices=("appo", "appo_options", "fast_sac", "fast_td3"))
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--num-nodes", type=int, default=1)
    parser.add_argument("--ckpt", type=Path, default=None)
    parser.add_argument("--checkpoint-every", type=int, default=0)
    parser.add_argument("--kill-collector-rank", type=int, default=None)
    parser.add_argument("--stop-collector-rank", type=int, default=None)
    parser.add_argument("--max-env-steps", type=int, default=None)
    parser.add_argument("--evaluate", action="store_true")
    parser.add_argument("--save-replay", action="store_true")
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    model, data = build(args.algo)
    if args.evaluate:
        # Rank 1 is this script re-run by Lightning's launcher with LOCAL_RANK set.
        rank = int(os.environ.get("LOCAL_RANK", 0))
        task = {"class_path": "CartpoleSwingup", "init_args": {"max_episode_steps": 8}}
        if rank == 0:
            data.collector = dataclasses.replace(data.collector, task=task)
    callbacks: list[Callback] = [
        WeightSync(),
        ObsNormSync(),
        EpisodeStatsMonitor(),
        RLCheckpoint(args.save_replay, replay_dir=str(args.out_dir / "checkpoints")),
        InterruptGuard(),
        Recorder(args.out_dir, args.kill_collector_rank, args.stop_collector_rank),
    ]
    if args.max_env_steps is not None:
        callbacks.insert(0, EnvStepBudget(args.max_env_steps))
    if args.checkpoint_every:
        callbacks.append(
            ModelCheckpoint(
                dirpath=args.out_dir / "checkpoints",
                every_n_train_steps=args.checkpoint_every,
                save_top_k=-1,
                save_last=True,
            )
        )
    logger = False
    if args.evaluate:
        evaluator = PolicyEvaluator(
            every_n_steps=1,
            episodes=2,
            num_envs=2,
            task=task,
            every_n_video_steps=2,
            video_frames=4,
            video_width=32,
            video_height=24,
        )
        callbacks.append(evaluator)
        monitored = {metrics.EVAL_MEAN_REWARD: "max", metrics.MEAN_REWARD: "max"}
        monitored[metrics.LOSS_VALUE] = "min"
        for key, mode in monitored.items():
            callbacks.append(
                ModelCheckpoint(
                    dirpath=args.out_dir / "best" / key.replace("/", "_"),
                    monitor=key,
                    mode=mode,
                    every_n_train_steps=1,
                )
            )
        logger = TensorBoardLogger(args.out_dir, name="tb")
    trainer = Trainer(
        max_steps=args.steps,
        accelerator="cpu",
        strategy="ddp",
        devices=args.devices,
        num_nodes=args.num_nodes,
        logger=logger,
        log_every_n_steps=1,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=bool(args.checkpoint_every) or args.evaluate,
        callbacks=callbacks,
    )
    try:
        trainer.fit(model, datamodule=data, ckpt_path=args.ckpt)
    except SIGTERMException:
        raise SystemExit(SIGTERM_EXIT_STATUS) from None


if __name__ == "__main__":
    main()
