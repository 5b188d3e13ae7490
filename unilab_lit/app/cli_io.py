"""What the entry points share: shipped configs by name, checkpoint arguments, output checks."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import unilab_lit

SHIPPED_CONFIGS = Path(unilab_lit.__file__).parent / "configs"
"""The configs the package ships (a link to the repository's ``configs/`` in a checkout)."""


def find_config(path: str) -> str:
    """``path``, or the shipped config of that name when no such file exists here.

    ``appo.yaml`` and ``configs/appo.yaml`` both name the shipped ``appo.yaml`` from any
    directory, so an installed package runs the README's commands. A path that names neither
    is returned as it is, for the caller to report as missing.
    """
    given = Path(path)
    if given.exists() or given.parent.name not in ("", SHIPPED_CONFIGS.name):
        return path
    shipped = SHIPPED_CONFIGS / given.name
    return str(shipped) if shipped.is_file() else path


class OutputError(Exception):
    """An output path cannot be written; the message is one line for the user."""


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows ``(default: X)`` only where there is a value to show: not for ``None`` (the help
    says what happens then), not for a flag (``store_true`` / ``store_false``), and not where
    the help names its default itself."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.nargs == 0 or "(default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


def checkpoint_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """A parser with ``--ckpt_path`` (a file or ``last``) and where ``last`` is looked for
    (``--run_dir``, or ``--config``'s logger directory), the arguments every entry point that
    loads a trained run takes; help shows each default."""
    parser = argparse.ArgumentParser(
        prog=prog, description=description, formatter_class=DefaultsHelpFormatter
    )
    parser.add_argument(
        "--ckpt_path",
        required=True,
        default=argparse.SUPPRESS,  # no "(default: None)" on a required argument
        help="checkpoint file, or 'last': the newest last*.ckpt of the one experiment under "
        "--run_dir (refused when it holds several)",
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--run_dir",
        default="runs",
        help="where --ckpt_path last looks: a run, an experiment (<save_dir>/<name>) or a "
        "directory of experiments",
    )
    where.add_argument(
        "--config",
        help="the run's fit config (a file or a shipped config's name): --ckpt_path last looks "
        "in its logger's <save_dir>/<name>",
    )
    return parser


def launcher_parser(prog: str, description: str, log_dir_default: str) -> argparse.ArgumentParser:
    """The arguments of an entry point that runs fits of one config (seeds, sweeps):
    ``--config`` and ``--log_dir``; arguments after ``--`` go to every fit (``split_passthrough``)."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description=f"{description} Arguments after -- go to every fit unchanged.",
        formatter_class=DefaultsHelpFormatter,
    )
    parser.add_argument("--config", required=True, help="the fit config (a file or a shipped name)")
    parser.add_argument(
        "--log_dir", default=None, help=f"save_dir of the runs (default: {log_dir_default})"
    )
    return parser


def fit_argv(config: str) -> list[str]:
    """``python -m unilab_lit fit --config <config>`` in this interpreter: one launched fit."""
    return [sys.executable, "-m", "unilab_lit", "fit", "--config", config]


def split_passthrough(argv: list[str]) -> tuple[list[str], list[str]]:
    """``argv`` split at its first ``--``: the launcher's own arguments and the fits' ones."""
    if "--" not in argv:
        return argv, []
    cut = argv.index("--")
    return argv[:cut], argv[cut + 1 :]


def check_output(path: str | Path, suffix: str, flag: str) -> Path:
    """``path`` as a ``Path`` once it is sure that a file can be written there.

    Checked before any work starts, so a bad path costs nothing and leaves nothing behind.

    Raises:
        OutputError: If the suffix is not ``suffix``, the path is a directory, or its directory
            does not exist or is not writable.
    """
    path = Path(path)
    if path.suffix.lower() != suffix:
        raise OutputError(f"{flag} {str(path)!r} must end in {suffix}")
    if path.is_dir():
        raise OutputError(f"{flag} {str(path)!r} is a directory")
    parent = path.parent
    if not parent.is_dir():
        raise OutputError(f"{flag} {str(path)!r}: directory {str(parent)!r} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise OutputError(f"{flag} {str(path)!r} is not writable")
    return path


def one_line(err: BaseException) -> str:
    """The first line of an exception's message (its type name when the message is empty)."""
    lines = str(err).strip().splitlines()
    return lines[0] if lines else type(err).__name__
