"""``--smoke``: every bench's real code path at its smallest sizes, for a few seconds (CI).

STYLE.md rule 17: each bench has a smoke mode that CI runs (``tests/test_bench_smoke.py``), so
none can rot unnoticed. A bench names its small sizes once, as option values; a smoke run uses
them in place of the defaults and of what was given, and measures nothing worth reading.
Standard library only, as a sibling module of the scripts (``from smoke import parse_args``).
"""

from __future__ import annotations

import argparse


def parse_args(
    parser: argparse.ArgumentParser, argv: list[str] | None = None, **small: object
) -> argparse.Namespace:
    """Add ``--smoke`` to ``parser``, parse, and under ``--smoke`` set each option in ``small``.

    Args:
        parser: The bench's parser, every option already added.
        argv: The arguments to parse (default: the command line's).
        **small: Option destinations (``num_envs`` for ``--num-envs``) and their smoke values.
    """
    parser.add_argument(
        "--smoke", action="store_true", help="a few seconds at the smallest sizes (CI)"
    )
    args = parser.parse_args(argv)
    unknown = sorted(set(small) - set(vars(args)))
    if unknown:
        raise ValueError(f"smoke sizes for options the parser lacks: {unknown}")
    if args.smoke:
        for name, value in small.items():
            setattr(args, name, value)
    return args
