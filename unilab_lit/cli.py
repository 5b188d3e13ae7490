"""LightningCLI for unilab_lit: algorithm and data module chosen by ``class_path``."""

from __future__ import annotations

import logging
import warnings

from lightning.pytorch import LightningDataModule, LightningModule
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from unilab_lit.envs.spec import CRITIC, POLICY, EnvSpec
from unilab_lit.resume import continue_run_directory


def _policy_obs_size(spec: EnvSpec) -> int:
    return spec.obs_sizes[POLICY]


def _critic_obs_size(spec: EnvSpec) -> int:
    return spec.obs_sizes[CRITIC]


def _action_size(spec: EnvSpec) -> int:
    return spec.action_size


def _show_library_info() -> None:
    # Collector start-up, the memory plan, replay warm-up: INFO lines a user of the CLI should
    # see, as Lightning shows its own. Library code only logs; the entry point decides.
    logger = logging.getLogger("unilab_lit")
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)


def _root_message(err: BaseException) -> str:
    while err.__cause__ is not None:
        err = err.__cause__
    if isinstance(err, KeyError) and err.args:
        return str(err.args[0])
    return str(err)


class UnilabCLI(LightningCLI):
    """``LightningCLI`` that links the data module's env spec into the model.

    Any ``LightningModule`` / ``LightningDataModule`` subclass can be chosen with
    ``class_path``; the model receives ``policy_obs_size``, ``critic_obs_size``
    and ``action_size`` from ``data.env_spec`` once the data module exists.
    The saved ``config.yaml`` is overwritten on a rerun or resume instead of
    refusing to start. ``fit --ckpt_path last`` (or a path) continues the run: the
    checkpoint is found and the loggers write into its run directory
    (``unilab_lit.resume``).
    """

    def __init__(self, args: list[str] | None = None, run: bool = True) -> None:
        # The algorithms take ``dataloader_iter`` deliberately (no one-batch prefetch, see
        # README); Lightning's "experimental" notice about it would greet every run.
        for message in (
            "You are using the `dataloader_iter` step flavor",
            "Found `dataloader_iter`",
        ):
            warnings.filterwarnings("ignore", message=message, category=UserWarning)
        _show_library_info()
        super().__init__(
            LightningModule,
            LightningDataModule,
            subclass_mode_model=True,
            subclass_mode_data=True,
            save_config_kwargs={"overwrite": True},
            args=args,
            run=run,
        )

    def instantiate_classes(self) -> None:
        """Build model, data and trainer; a constructor's validation error ends the run in one line.

        Invalid values are found by the constructors (they name the argument, the value and
        the valid range). jsonargparse wraps that message in its union-resolution report;
        the user sees only the constructor's message, before anything has started.
        """
        try:
            super().instantiate_classes()
        except (ValueError, KeyError, TypeError) as err:
            raise SystemExit(f"error: invalid config: {_root_message(err)}") from None

    def before_instantiate_classes(self) -> None:
        if self.subcommand == "fit":
            continue_run_directory(self.config.fit)

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        for target, fn in (
            ("model.init_args.policy_obs_size", _policy_obs_size),
            ("model.init_args.critic_obs_size", _critic_obs_size),
            ("model.init_args.action_size", _action_size),
        ):
            parser.link_arguments("data.env_spec", target, compute_fn=fn, apply_on="instantiate")
