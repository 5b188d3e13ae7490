"""Learner updates/s per algorithm at the shipped sizes: eager vs compiled, 1 vs 2 torch threads, fp32 vs bf16.

For each config (default: ``fast_td3.yaml``, ``fast_sac.yaml``, ``fast_sac_humanoid.yaml``,
``appo_halfcheetah.yaml``) the config's model is trained by a plain ``Trainer`` on random items
of the config's item shape (off-policy: ``batch_size × updates_per_step`` replay rows; APPO: the
staging pool's ``[num_steps, num_envs × staging_capacity]`` rollout), in this process, with no
collector: the learner's own speed. A setting is ``compile_losses`` off/on,
``torch.set_num_threads`` 1/2 and the trainer's precision (``32-true``, or ``bf16-mixed``, CPU
autocast: suffix ``-bf16``), each on a fresh model; every setting sets all three, whatever the
config says. An update is one critic step (off-policy) or one minibatch step (APPO). The first
iteration (where the compile happens) is reported apart, then ``--warm`` iterations are skipped
and ``--iterations`` timed.

``--fit-seconds S`` adds the fit-level figure: ``Trainer.fit`` of the config itself (collector
running) for S seconds after its first iteration, eager fp32 with 1 learner thread and with the
bench's best setting: learner iterations/s and env-steps/s (``fit_timing.FitMeter``).

Ends with one line per algorithm, for scripts:

    <algo>: updates/s eager-1-thread A, best B (<setting>), speed-up B/A

``--cache-dir`` points inductor at a cache directory (an empty one measures a cold compile).

    python bench/learner_speed.py
    python bench/learner_speed.py --configs configs/fast_td3.yaml --fit-seconds 60
    python bench/learner_speed.py --cache-dir "$(mktemp -d)"      # cold compile
    python bench/learner_speed.py --smoke      # fast_td3, eager-1, 1 + 2 iterations (CI)
"""

from __future__ import annotations

# Only the standard library at module level: a fit's collector is a spawn child that re-imports
# this script before its first line.
import argparse
import os
import tempfile
import time

from smoke import parse_args

DEFAULT_CONFIGS = (
    "configs/fast_td3.yaml",
    "configs/fast_sac.yaml",
    "configs/fast_sac_humanoid.yaml",
    "configs/appo_halfcheetah.yaml",
)
DEFAULT_SETTINGS = (
    "eager-1",
    "eager-2",
    "compiled-1",
    "compiled-2",
    "eager-1-bf16",
    "compiled-1-bf16",
)
BASELINE = (False, 1, False)
"""The speed-up's reference: eager, one thread, fp32."""

Setting = tuple[bool, int, bool]
"""``(compiled, threads, bf16)``."""


def setting_name(compiled: bool, threads: int, bf16: bool) -> str:
    kind = "compiled" if compiled else "eager"
    return f"{kind}-{threads}-thread{'-bf16' if bf16 else ''}"


def _overrides(config: str, compiled: bool, threads: int, bf16: bool) -> list[str]:
    """``compile_losses`` (APPO's own argument, the off-policy learners' ``offpolicy`` field), the
    learner's torch threads and the trainer's precision for ``config``."""
    import yaml

    with open(config) as file:
        model_class = yaml.safe_load(file)["model"]["class_path"]
    key = "compile_losses" if model_class.endswith(".APPO") else "offpolicy.compile_losses"
    return [
        f"--model.init_args.{key}={str(compiled).lower()}",
        f"--data.init_args.collector.learner_torch_threads={threads}",
        f"--trainer.precision={'bf16-mixed' if bf16 else '32-true'}",
    ]


def _cli(config: str, log_dir: str, extra: list[str]):
    from fit_timing import lift_env_step_budget
    from lightning.pytorch.callbacks import ModelCheckpoint

    from unilab_lit.app.unilab_cli import UnilabCLI

    overrides = [
        f"--trainer.logger.init_args.save_dir={log_dir}",
        "--trainer.max_steps=-1",
        "--trainer.enable_progress_bar=false",
        *extra,
    ]
    cli = UnilabCLI(args=["--config", config, *overrides], run=False)
    lift_env_step_budget(cli.trainer.callbacks)
    cli.trainer.callbacks = [c for c in cli.trainer.callbacks if not isinstance(c, ModelCheckpoint)]
    return cli


def _random_items(model, data, count: int = 4) -> list:
    """``count`` random items in the model's item contract at the data module's sizes."""
    import torch
    from tensordict import TensorDict

    from unilab_lit.algos.appo import APPO
    from unilab_lit.data.staging import rollout_batch

    g = torch.Generator().manual_seed(0)
    hp = model.hparams
    dp, dc, a = hp.policy_obs_size, hp.critic_obs_size, hp.action_size

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g)

    def flags(*shape: int, p: float) -> torch.Tensor:
        return torch.rand(*shape, generator=g) < p

    items = []
    for _ in range(count):
        if isinstance(model, APPO):
            t, m = data.num_steps, data.collector.num_envs * data.staging_capacity
            steps = {"obs": randn(t, m, dp), "critic_obs": randn(t, m, dc)}
            steps |= {"actions": randn(t, m, a), "log_prob": -randn(t, m).abs() * a}
            steps |= {"reward": randn(t, m), "done": flags(t, m, p=0.01)}
            steps |= {"truncated": flags(t, m, p=0.005), "final_critic_obs": randn(t, m, dc)}
            columns = {"last_critic_obs": randn(m, dc), "fresh": torch.ones(m, dtype=torch.bool)}
            columns["policy_version"] = torch.zeros(m, dtype=torch.int64)
            items.append(rollout_batch(steps, columns))
        else:
            r = data.batch_size * model.offpolicy.updates_per_step
            rows = {"obs": randn(r, dp), "next_obs": randn(r, dp), "actions": randn(r, a).tanh()}
            rows |= {"reward": randn(r), "done": flags(r, p=0.01), "truncated": flags(r, p=0.005)}
            rows |= {"critic_obs": randn(r, dc), "next_critic_obs": randn(r, dc)}
            items.append(TensorDict(rows, batch_size=[r]))
    return items


def _updates_per_iteration(model) -> int:
    from unilab_lit.algos.appo import APPO

    if isinstance(model, APPO):
        return model.hparams.num_learning_epochs * model.hparams.num_mini_batches
    return model.offpolicy.updates_per_step


def learner_alone(config: str, setting: Setting, warm: int, iterations: int) -> dict:
    """Updates/s of the config's model on random items, no collector; first iteration apart."""
    import itertools

    import torch
    from lightning.pytorch import Callback, Trainer
    from torch.utils.data import DataLoader, IterableDataset

    from unilab_lit.data.base import _as_is

    class Items(IterableDataset):
        def __init__(self, items: list) -> None:
            self.items = items

        def __iter__(self):
            return itertools.cycle(self.items)

    stamps: list[float] = []

    class Stamps(Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if not stamps:
                stamps.append(time.perf_counter())

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            stamps.append(time.perf_counter())

    with tempfile.TemporaryDirectory() as log_dir:
        cli = _cli(config, log_dir, _overrides(config, *setting))
        model, data = cli.model, cli.datamodule
        items = _random_items(model, data)
        torch.set_num_threads(setting[1])
        Trainer(
            max_steps=1 + warm + iterations,
            precision=cli.trainer.precision,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            callbacks=[Stamps()],
        ).fit(model, train_dataloaders=DataLoader(Items(items), batch_size=None, collate_fn=_as_is))
    timed = stamps[-1] - stamps[1 + warm]
    return {
        "first_s": stamps[1] - stamps[0],
        "updates_per_s": iterations * _updates_per_iteration(model) / timed,
        "ms_per_iteration": 1e3 * timed / iterations,
    }


def fit_level(config: str, setting: Setting, seconds: float) -> dict:
    """``Trainer.fit`` of the config with its collector: FitMeter's figures."""
    from fit_timing import FitMeter

    with tempfile.TemporaryDirectory() as log_dir:
        cli = _cli(config, log_dir, _overrides(config, *setting))
        meter = FitMeter(seconds)
        cli.trainer.callbacks.append(meter)
        cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    return meter.result


def _setting(name: str) -> Setting:
    """``"eager-1"`` / ``"compiled-2"`` / ``"compiled-1-bf16"`` -> (compiled, threads, bf16)."""
    kind, threads, *precision = name.split("-")
    return kind == "compiled", int(threads), precision == ["bf16"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=list(DEFAULT_CONFIGS))
    parser.add_argument("--warm", type=int, default=5, help="untimed iterations after the first")
    parser.add_argument("--iterations", type=int, default=40, help="timed iterations")
    parser.add_argument(
        "--settings",
        nargs="*",
        default=list(DEFAULT_SETTINGS),
        help="learner-alone settings; none: fit-level only",
    )
    parser.add_argument("--fit-seconds", type=float, default=0.0, help="0: no fit-level figure")
    parser.add_argument(
        "--fit-settings", nargs="*", default=None, help="default: eager-1 and the best setting"
    )
    parser.add_argument("--cache-dir", default=None, help="inductor cache directory")
    args = parse_args(
        parser, configs=["configs/fast_td3.yaml"], warm=1, iterations=2, settings=["eager-1"]
    )
    if args.cache_dir is not None:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = args.cache_dir
    summary = []
    for config in args.configs:
        results = {}
        for setting in map(_setting, args.settings):
            result = learner_alone(config, setting, args.warm, args.iterations)
            results[setting] = result
            print(
                f"{config} {setting_name(*setting):23s}: "
                f"{result['updates_per_s']:7.1f} updates/s, {result['ms_per_iteration']:6.1f} "
                f"ms/iteration; first iteration {result['first_s']:5.1f} s",
                flush=True,
            )
        best = max(results, key=lambda key: results[key]["updates_per_s"], default=None)
        fit_settings = (
            dict.fromkeys([BASELINE, best] if best else [BASELINE])
            if args.fit_settings is None
            else map(_setting, args.fit_settings)
        )
        for setting in fit_settings if args.fit_seconds > 0 else ():
            fit = fit_level(config, setting, args.fit_seconds)
            print(
                f"{config} fit {setting_name(*setting):23s}: "
                f"{fit['iterations_per_s']:6.1f} learner iterations/s, "
                f"{fit['env_steps_per_s']:8.0f} env-steps/s, wait share "
                f"{100 * fit['wait_share']:.1f}% ({fit['seconds']:.0f} s)",
                flush=True,
            )
        if BASELINE in results:
            base, top = results[BASELINE]["updates_per_s"], results[best]["updates_per_s"]
            algo = os.path.splitext(os.path.basename(config))[0]
            summary.append(
                f"{algo}: updates/s eager-1-thread {base:.1f}, best {top:.1f} "
                f"({setting_name(*best)}), speed-up {top / base:.2f}"
            )
    print("\n".join(summary))


if __name__ == "__main__":
    main()
