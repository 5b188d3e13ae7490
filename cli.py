"""Command line entry point: ``python cli.py fit --config configs/appo.yaml``.

The top level imports nothing heavy: collector subprocesses start with the
``spawn`` method, which re-imports this script in every child, and a child that
had to import Lightning here would pay seconds before its first line.
"""

from __future__ import annotations


def main(args: list[str] | None = None) -> None:
    from unilab_lit.cli import UnilabCLI

    UnilabCLI(args=args)


if __name__ == "__main__":
    main()
