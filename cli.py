"""Command line entry point of a clone: ``python cli.py fit --config configs/appo.yaml``.

The same as the installed ``unilab-lit`` command (:mod:`unilab_lit.__main__`, which keeps the
import-light top level the collector's ``spawn`` children rely on).
"""

from __future__ import annotations

from unilab_lit.__main__ import main

if __name__ == "__main__":
    main()
