"""The collector child's entry is import-light: what a spawn child loads before ``main`` runs."""

from __future__ import annotations

import subprocess
import sys

# What a spawn child imports before its first line: the entry module and the classes of its
# arguments (the control block and the metrics channel), unpickled by multiprocessing.
_CHILD_PRELUDE = (
    "import sys, unilab_lit.collector._entry, unilab_lit.ipc.control, unilab_lit.ipc.channel; "
    "print(' '.join(sorted(m for m in ('torch', 'lightning', 'jsonargparse') if m in sys.modules)))"
)


def test_child_entry_loads_neither_torch_nor_lightning_nor_jsonargparse():
    result = subprocess.run(
        [sys.executable, "-c", _CHILD_PRELUDE], capture_output=True, text=True, check=True
    )
    assert result.stdout.split() == []
