"""``unilab-lit fit --config appo.yaml`` (also ``python -m unilab_lit`` and ``python cli.py``).

Imports nothing heavy at the top: collector subprocesses start with the ``spawn`` method,
which re-imports the entry script in every child, and a child that had to import Lightning
there would pay seconds before its first line.
"""

from __future__ import annotations

import sys


def main(args: list[str] | None = None) -> None:
    """Run ``UnilabCLI`` on ``args`` (the command line when ``None``)."""
    argv = sys.argv[1:] if args is None else args
    if argv[:1] == ["fit"]:
        # The collector child imports torch while this process imports Lightning.
        from unilab_lit.collector.prestart import prestart

        prestart()
    from unilab_lit.app.unilab_cli import UnilabCLI

    UnilabCLI(args=args)


if __name__ == "__main__":
    main()
