"""LightningCLI for unilab_lit: algorithm and data module chosen by ``class_path``."""

from __future__ import annotations

import importlib
import logging
import sys
import time
import warnings
from pathlib import Path
from typing import Any, NoReturn

from jsonargparse import ActionConfigFile, Namespace
from lightning.pytorch import LightningDataModule, LightningModule
from lightning.pytorch.callbacks import TQDMProgressBar
from lightning.pytorch.cli import ArgsType, LightningArgumentParser, LightningCLI
from lightning.pytorch.utilities import rank_zero
from lightning.pytorch.utilities.exceptions import SIGTERMException
from typing_extensions import override

from unilab_lit import distributed
from unilab_lit.algos.appo import APPO
from unilab_lit.algos.fast_sac import FastSAC
from unilab_lit.algos.fast_td3 import FastTD3
from unilab_lit.app.cli_io import find_config
from unilab_lit.app.failures import config_error_line, exit_line
from unilab_lit.app.resume import (
    DATA_SIZES,
    check_checkpoint_matches,
    continue_run_directory,
    read_checkpoint,
    resolve_checkpoint,
)
from unilab_lit.app.run_summary import run_summary
from unilab_lit.app.task_overrides import with_task_overrides
from unilab_lit.callbacks.interrupt_guard import SIGTERM_EXIT_STATUS
from unilab_lit.callbacks.step_progress_bar import StepProgressBar
from unilab_lit.config_errors import (
    PREFIX,
    check_moved_class_paths,
    check_override_order,
    check_yaml_files,
    config_files,
    summarize,
)
from unilab_lit.data.replay import ReplayDataModule
from unilab_lit.data.rollout import RolloutDataModule
from unilab_lit.envs.robots.assets import RobotModelError
from unilab_lit.envs.spec import CRITIC, POLICY, EnvSpec
from unilab_lit.envs.task_spec import TaskSpec
from unilab_lit.telemetry.loggers import ResumableCSVLogger

log = logging.getLogger(__name__)
# Imported here so that jsonargparse knows them by name: ``--model.help APPO`` and
# ``--data.help RolloutDataModule`` work and ``--help`` lists them.
_ALGORITHMS = (APPO, FastTD3, FastSAC)
_DATA_MODULES = (RolloutDataModule, ReplayDataModule)
# ``--trainer.logger+=ResumableCSVLogger``: the CSV logger that keeps metrics.csv on resume.
_LOGGERS = (ResumableCSVLogger,)
# Model hyper-parameters the CLI links from the data module's env spec.
_LINKED_SIZES = ("policy_obs_size", "critic_obs_size", "action_size")
# The callbacks behind what the README promises (episode statistics, an exact resume, stop-safe
# checkpoints, the collector's weights and statistics), added to the parsed config when it has
# no entry of the class (or of a subclass), so --print_config and the saved config.yaml show
# what runs. Appended after the config's own, so a listed ``EnvStepBudget`` stays before
# ``EpisodeStatsMonitor`` (its docstring); Lightning moves checkpoint callbacks last.
DEFAULT_CALLBACKS: tuple[dict[str, Any], ...] = (
    {"class_path": "unilab_lit.callbacks.EpisodeStatsMonitor"},
    {"class_path": "unilab_lit.callbacks.RLCheckpoint"},
    {"class_path": "unilab_lit.callbacks.InterruptGuard"},
    {
        "class_path": "unilab_lit.callbacks.StopCheckpoint",
        "init_args": {"save_last": True, "every_n_train_steps": 500},
    },
    {"class_path": "unilab_lit.callbacks.WeightSync"},
    {"class_path": "unilab_lit.callbacks.ObsNormSync"},
)
# Checkpoint state and checkpoints: not added when checkpointing is off (Lightning refuses a
# ModelCheckpoint with ``enable_checkpointing=False``).
_CHECKPOINT_DEFAULTS = ("unilab_lit.callbacks.RLCheckpoint", "unilab_lit.callbacks.StopCheckpoint")
_DESCRIPTION = (
    "Asynchronous reinforcement learning on batched MuJoCo with Lightning. "
    f"Algorithms (--model): {', '.join(c.__name__ for c in _ALGORITHMS)}. "
    f"Data modules (--data): {', '.join(c.__name__ for c in _DATA_MODULES)}. "
    "`fit --model.help APPO` lists an algorithm's options."
)


def _policy_obs_size(spec: EnvSpec) -> int:
    return spec.obs_sizes[POLICY]


def _critic_obs_size(spec: EnvSpec) -> int:
    return spec.obs_sizes[CRITIC]


def _action_size(spec: EnvSpec) -> int:
    return spec.action_size


def _show_library_info() -> None:
    # Collector start-up, the memory plan, replay warm-up, the callbacks' stops (env-step
    # budget, last checkpoint): INFO lines a user of the CLI should see, as Lightning shows its
    # own. Library code only logs; the entry point decides.
    logger = logging.getLogger("unilab_lit")
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)


# Lightning's warnings that do not apply to these runs, each by the start of its message.
_NOT_APPLICABLE_WARNINGS = (
    # The algorithms take ``dataloader_iter`` deliberately (no one-batch prefetch).
    "You are using the `dataloader_iter` step flavor",
    "Found `dataloader_iter`",
    # The algorithms optimise manually and a checkpoint is meant to hold the updated weights.
    "Using ModelCheckpoint with manual optimization and every_n_train_steps",
    # Lightning's own use of torch's pytree API, deprecated in newer torch; nothing to act on.
    r"`isinstance\(treespec, LeafSpec\)` is deprecated",
)
_LITLOGGER_TIP = "💡 Tip: For seamless cloud logging and experiment tracking"
_RESUMED_DIRECTORY_NOTE = r"Checkpoint directory .* exists and is not empty"


class _DropLitLoggerTip(logging.Filter):
    """Drops Lightning's advertisement for its cloud logger, logged at every ``Trainer`` start."""

    @override
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(_LITLOGGER_TIP)


def _hide_lightning_notes() -> None:
    for message in _NOT_APPLICABLE_WARNINGS:
        warnings.filterwarnings("ignore", message=message)
    # Lightning's rank_zero_info logs through the logger named after this module.
    tips = logging.getLogger(rank_zero.__name__)
    if not any(isinstance(f, _DropLitLoggerTip) for f in tips.filters):
        tips.addFilter(_DropLitLoggerTip())


def _seed_collector(config: Namespace) -> None:
    """``data.init_args.collector.seed`` follows ``seed_everything`` unless the config sets it.

    Called after LightningCLI has resolved ``seed_everything`` (``true`` drew a number), so a
    seed-sweep with ``--seed_everything N`` also changes the env resets and randomisation.
    """
    seed = config.get("seed_everything")
    collector = config.get("data.init_args.collector")
    if collector is None or type(seed) is not int:  # seed_everything: false seeds nothing
        return
    if collector.get("seed") is None:
        collector["seed"] = seed


def _class_of(class_path: str) -> type | None:
    module_name, _, name = class_path.rpartition(".")
    try:
        return getattr(importlib.import_module(module_name or "builtins"), name)
    except (ImportError, AttributeError):  # the parser reports an unknown class_path itself
        return None


def add_default_callbacks(trainer: Namespace) -> None:
    """Append to ``trainer.callbacks`` each of :data:`DEFAULT_CALLBACKS` it has no entry of.

    ``RLCheckpoint`` and ``StopCheckpoint`` are not added when checkpointing is off (Lightning
    refuses a ``ModelCheckpoint`` with ``enable_checkpointing=False``).
    """
    listed = trainer.get("callbacks") or []
    listed = list(listed) if isinstance(listed, list) else [listed]
    classes = [_class_of(entry.get("class_path", "")) for entry in listed if "class_path" in entry]
    checkpointing = trainer.get("enable_checkpointing") is not False
    for default in DEFAULT_CALLBACKS:
        cls = _class_of(default["class_path"])
        if any(isinstance(c, type) and issubclass(c, cls) for c in classes):
            continue
        if default["class_path"] in _CHECKPOINT_DEFAULTS and not checkpointing:
            continue
        listed.append(
            Namespace(
                class_path=default["class_path"],
                init_args=Namespace(**default.get("init_args", {})),
            )
        )
    trainer["callbacks"] = listed


class _ConfigFile(ActionConfigFile):
    """``--config``: a file, or the name of a shipped config (:func:`~unilab_lit.app.cli_io.find_config`)."""

    @override
    def __call__(
        self, parser: Any, cfg: Any, values: Any, option_string: str | None = None
    ) -> None:
        super().__call__(parser, cfg, find_config(values), option_string)


class _OneLineErrorParser(LightningArgumentParser):
    """Ends a run on a config error with one line instead of usage text and a union report."""

    @override
    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        if not self.exit_on_error:
            # A nested parser (a class_path's arguments) inside union resolution: jsonargparse
            # catches its error and tries the next type, then reports from the outer parser.
            super().error(message, ex)
        # "Subcommand 'fit' does not accept option ..." comes from the root parser; the keys
        # to suggest from are the subcommand's.
        parser = getattr(ex, "subcommand_parser", None) or self
        option_keys = [action.dest for action in parser._actions]
        raise SystemExit(PREFIX + summarize(message, option_keys))

    @override
    def _parse_common(self, cfg: Namespace, **kwargs: Any) -> Namespace:
        # A whole parse (not jsonargparse's defaults-only or nested ones), before it fills class
        # defaults and prints --print_config: the callbacks added here are in the printed
        # config, the saved config.yaml and the trainer.
        if kwargs.get("defaults") and not kwargs.get("nested_parse"):
            subcommand = cfg.get("subcommand")
            trainer = cfg.get(f"{subcommand}.trainer" if subcommand else "trainer")
            if isinstance(trainer, Namespace):
                add_default_callbacks(trainer)
        return super()._parse_common(cfg, **kwargs)


class UnilabCLI(LightningCLI):
    """``LightningCLI`` that links the data module's env spec into the model.

    Any ``LightningModule`` / ``LightningDataModule`` subclass can be chosen with
    ``class_path``; the model receives ``policy_obs_size``, ``critic_obs_size``
    and ``action_size`` from ``data.env_spec`` once the data module exists.
    The saved ``config.yaml`` is overwritten on a rerun or resume instead of
    refusing to start. ``fit --ckpt_path last`` (or a path) continues the run: the
    checkpoint is found and the loggers write into its run directory
    (``unilab_lit.app.resume``); a checkpoint of another model class, task, size or world size is
    refused before anything starts.

    Every failure before training ends in one line on stderr and exit status 1: a misspelled
    or mistyped key (with the closest valid key), a YAML syntax error (file and line), a
    constructor's validation error, a checkpoint that does not fit, a memory plan that does
    not fit. A run stopped by SIGTERM / SIGUSR1 (``unilab_lit.callbacks.InterruptGuard``) exits with
    status 143 after its last checkpoint. A finished ``fit`` logs one summary: iterations, env
    steps, wall-clock, the last Train and Eval returns, the checkpoint and log directories and
    the ``play`` / ``export`` commands for its last checkpoint. ``fit`` is the only subcommand,
    and ``--config`` also takes a shipped config's name (``appo.yaml``).
    ``--data.init_args.collector.task.init_args.<arg>=<value>`` changes one argument of the task
    the config gives (:func:`~unilab_lit.app.task_overrides.with_task_overrides`).

    Callbacks: the trainer gets each of :data:`DEFAULT_CALLBACKS` the config lacks; a config's own
    instance of that class (or a subclass) wins with its settings. Configs list only changes.
    """

    def __init__(self, args: list[str] | None = None, run: bool = True) -> None:
        _hide_lightning_notes()
        _show_library_info()
        self._resume_from: tuple[Path, dict[str, Any]] | None = None
        self._fit_began = time.monotonic()
        try:
            super().__init__(
                LightningModule,
                LightningDataModule,
                subclass_mode_model=True,
                subclass_mode_data=True,
                save_config_kwargs={"overwrite": True},
                # The algorithms build their own optimizers (``optimizer`` of each algorithm).
                auto_configure_optimizers=False,
                args=args,
                run=run,
            )
        except SIGTERMException:
            log.warning("stopped by a termination signal; exit status %d", SIGTERM_EXIT_STATUS)
            # Every rank agreed on the stop and wrote its part: the same exit as a normal end's.
            distributed.leave_process_group()
            raise SystemExit(SIGTERM_EXIT_STATUS) from None
        except Exception as err:
            # A known cause (a checkpoint that does not fit among them) ends in one line.
            line = exit_line(err, getattr(self, "trainer", None))
            if line is None:
                raise
            raise SystemExit(line) from None

    @staticmethod
    @override
    def subcommands() -> dict[str, set[str]]:
        """Only ``fit``: validation, test and prediction loops have no meaning for these
        modules (a trained policy is evaluated by ``unilab_lit.callbacks.PolicyEvaluator`` and
        ``python -m unilab_lit.app.play``)."""
        return {"fit": LightningCLI.subcommands()["fit"]}

    @override
    def init_parser(self, **kwargs: Any) -> LightningArgumentParser:
        kwargs.setdefault("description", _DESCRIPTION)
        parser = _OneLineErrorParser(**kwargs)
        parser.add_argument(
            "-c",
            "--config",
            action=_ConfigFile,
            help="A YAML config file, or the name of a shipped one (appo.yaml, fast_td3.yaml, ...).",
        )
        return parser

    @override
    def parse_arguments(self, parser: LightningArgumentParser, args: ArgsType) -> None:
        command_line = sys.argv[1:] if args is None else args
        merged = command_line
        if isinstance(command_line, list):
            check_yaml_files(config_files(command_line))
            check_moved_class_paths(command_line)
            merged = with_task_overrides(parser, command_line)
            check_override_order(command_line)
        if merged == command_line:
            super().parse_arguments(parser, args)
        else:  # as LightningCLI parses; its warning about args given with sys.argv does not apply
            self.config = parser.parse_args(merged)
        if self.config.get("subcommand") == "fit":
            self._refuse_other_run(self.config.fit)

    def instantiate_classes(self) -> None:
        """Build model, data and trainer; a constructor's validation error ends the run in one line.

        Invalid values are found by the constructors (they name the argument, the value and
        the valid range). jsonargparse wraps that message in its union-resolution report;
        the user sees only the constructor's message, before anything has started.
        """
        try:
            super().instantiate_classes()
        except (ValueError, KeyError, TypeError, RobotModelError) as err:
            config = self.config.get(self.subcommand) if self.subcommand else self.config
            raise SystemExit(config_error_line(err, config)) from None
        self._count_global_steps_in_progress_bar()

    def _count_global_steps_in_progress_bar(self) -> None:
        # Lightning's default bar (added when no progress bar is configured) counts the epoch's
        # batches and shows 1/? after a resume; ours counts global steps.
        callbacks = self.trainer.callbacks
        for i, callback in enumerate(callbacks):
            if type(callback) is TQDMProgressBar:
                callbacks[i] = StepProgressBar(refresh_rate=callback.refresh_rate)

    def before_instantiate_classes(self) -> None:
        config = self.config.get(str(self.subcommand), self.config)
        _seed_collector(config)
        if self.subcommand == "fit":
            continue_run_directory(self.config.fit)
            if self.config.fit.get("ckpt_path") is not None:
                # A resumed run writes into its own checkpoint directory, which is not empty.
                warnings.filterwarnings("ignore", message=_RESUMED_DIRECTORY_NOTE)

    @override
    def before_fit(self) -> None:
        self._fit_began = time.monotonic()
        if self._resume_from is None:
            return
        path, checkpoint = self._resume_from
        expected: dict[str, Any] = {key: self.model.hparams.get(key) for key in _LINKED_SIZES}
        expected["world size"] = self.trainer.world_size
        check_checkpoint_matches(path, checkpoint, expected)

    def after_fit(self) -> None:
        """Log one summary of the run: how far it got, its returns, where it wrote, what next.

        Every rank builds it (``run_summary`` reads ``trainer.log_dir``, a broadcast under DDP,
        which a rank alone would wait on forever); rank 0 logs it.
        """
        summary = run_summary(self.trainer, time.monotonic() - self._fit_began)
        if self.trainer.is_global_zero:
            log.info("%s", summary)
        # The summary's broadcast was the run's last collective.
        distributed.leave_process_group()

    def _refuse_other_run(self, fit_config: Any) -> None:
        """Refuse a checkpoint of another model class or task, before LightningCLI would load
        the checkpoint's hyper-parameters (and with them its model class) into the config.

        The ``CheckpointMismatchError`` ends the run in one line (``failures.exit_line``)."""
        path = resolve_checkpoint(fit_config)
        if path is None:
            return
        checkpoint = read_checkpoint(path)
        data_args = fit_config.data.get("init_args") if fit_config.get("data") else None
        expected = {"model class": fit_config.model.get("class_path"), "task": None}
        if data_args is not None:
            task = data_args.get("collector.task")
            expected["task"] = None if task is None else TaskSpec.of(task).class_path
            expected.update({name: data_args.get(key) for name, key in DATA_SIZES.items()})
        check_checkpoint_matches(path, checkpoint, expected)
        self._resume_from = (path, checkpoint)

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        for target, fn in (
            ("model.init_args.policy_obs_size", _policy_obs_size),
            ("model.init_args.critic_obs_size", _critic_obs_size),
            ("model.init_args.action_size", _action_size),
        ):
            parser.link_arguments("data.env_spec", target, compute_fn=fn, apply_on="instantiate")
