"""APPO minibatch step with ``torch.compile`` of the loss over the same step in eager mode.

One minibatch step is what an APPO learner iteration repeats ``num_learning_epochs x
num_mini_batches`` times: actor and critic forward, the clipped surrogate, value and entropy
terms (``APPO._minibatch_loss``), backward and the optimizer step. The bench builds the APPO
model of a config (default ``configs/appo.yaml``, its widths, minibatch size
``num_envs x num_steps x staging_capacity / num_mini_batches`` and optimizer) and times that
step on random inputs of the right shapes, in this process:

- eager: the model as ``fit`` runs it;
- compiled: the same step with the loss wrapped in ``torch.compile`` (inductor, CPU); the
  one-off compile time is reported apart, with the iterations it takes to earn it back.

Rounds alternate eager and compiled so that load drift hits both. Threads: the learner's
(``torch.set_num_threads``, default 1 as on 2 cores).

    python bench/compile_loss.py
    python bench/compile_loss.py --config configs/appo.yaml --steps 300 --rounds 3
    python bench/compile_loss.py --smoke                 # 2 steps, 1 round (CI)
"""

from __future__ import annotations

import argparse
import tempfile
import time

from smoke import parse_args


def _model_and_sizes(config: str, log_dir: str):
    from unilab_lit.app.unilab_cli import UnilabCLI

    cli = UnilabCLI(
        args=["--config", config, f"--trainer.logger.init_args.save_dir={log_dir}"], run=False
    )
    model, data = cli.model, cli.datamodule
    model.trainer = cli.trainer  # configure_optimizers reads max_steps (the linear schedule)
    hp = model.hparams
    rows = data.collector.num_envs * data.num_steps * data.staging_capacity
    return model, rows // hp.num_mini_batches


def _minibatch(model, rows: int) -> dict:
    import torch

    hp = model.hparams
    obs, critic_obs, actions = hp.policy_obs_size, hp.critic_obs_size, hp.action_size
    generator = torch.Generator().manual_seed(0)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator)

    return {
        "obs": randn(rows, obs),
        "critic_obs": randn(rows, critic_obs),
        "actions": randn(rows, actions),
        "behaviour_log_prob": randn(rows),
        "target_log_prob": randn(rows),
        "target_mean": randn(rows, actions),
        "target_std": torch.ones(rows, actions),
        "values": randn(rows),
        "returns": randn(rows),
        "advantages": randn(rows),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/appo.yaml", help="APPO config")
    parser.add_argument("--steps", type=int, default=300, help="timed steps per side and round")
    parser.add_argument("--rounds", type=int, default=2, help="eager/compiled pairs")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the learner's)")
    args = parse_args(parser, steps=2, rounds=1)
    if args.steps < 1 or args.rounds < 1:
        parser.error("--steps and --rounds must be >= 1")
    import torch

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="compile_loss_") as log_dir:
        model, rows = _model_and_sizes(args.config, log_dir)
    optimizer = model.configure_optimizers()
    optimizer = optimizer["optimizer"] if isinstance(optimizer, dict) else optimizer
    mb = _minibatch(model, rows)

    def step(loss_fn) -> None:
        loss, _ = loss_fn(mb)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    def ms_per_step(loss_fn) -> float:
        for _ in range(10):
            step(loss_fn)
        began = time.perf_counter()
        for _ in range(args.steps):
            step(loss_fn)
        return (time.perf_counter() - began) / args.steps * 1e3

    eager = model._minibatch_loss
    compiled = torch.compile(model._minibatch_loss)
    began = time.perf_counter()
    step(compiled)
    compile_s = time.perf_counter() - began
    hp = model.hparams
    steps_per_iteration = hp.num_learning_epochs * hp.num_mini_batches
    print(
        f"{args.config}: minibatch {rows} rows, {steps_per_iteration} steps per iteration, "
        f"{args.threads} thread(s); compile + first step {compile_s:.1f} s"
    )
    eager_ms, compiled_ms = [], []
    for r in range(args.rounds):
        eager_ms.append(ms_per_step(eager))
        compiled_ms.append(ms_per_step(compiled))
        print(
            f"round {r}: eager {eager_ms[-1]:.2f} ms/step, compiled {compiled_ms[-1]:.2f} ms/step, "
            f"ratio compiled / eager {compiled_ms[-1] / eager_ms[-1]:.2f}"
        )
    saved_ms = (min(eager_ms) - min(compiled_ms)) * steps_per_iteration
    if saved_ms > 0:
        print(
            f"best of rounds: {saved_ms:.1f} ms saved per iteration; the compile is earned back "
            f"after {compile_s * 1e3 / saved_ms:.0f} iterations"
        )
    else:
        print("best of rounds: the compiled step is not faster")


if __name__ == "__main__":
    main()
