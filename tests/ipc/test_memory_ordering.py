"""Weakly ordered CPUs are refused in one line before any shared memory exists."""

from __future__ import annotations

import os
import platform

import pytest

from tests.test_cli import assert_no_leftovers, run_cli
from unilab_lit.ipc import ShmBlock, list_segments
from unilab_lit.ipc.block import UnsupportedCPUError, check_memory_ordering

# cli.py on a CPU that reports itself as aarch64.
_CLI_ON_AARCH64 = """
import platform, runpy, sys
platform.machine = lambda: "aarch64"
sys.argv = ["cli.py", *sys.argv[1:]]
runpy.run_path("cli.py", run_name="__main__")
"""


@pytest.mark.parametrize("machine", ["x86_64", "AMD64"])
def test_x86_cpus_are_accepted(machine):
    check_memory_ordering(machine)


@pytest.mark.parametrize("machine", ["aarch64", "arm64", "ppc64le", "riscv64"])
def test_weakly_ordered_cpus_are_refused_in_one_line_naming_the_cpu(machine):
    with pytest.raises(UnsupportedCPUError) as caught:
        check_memory_ordering(machine)
    assert "\n" not in str(caught.value)
    assert repr(machine) in str(caught.value)


def test_no_block_is_created_on_a_weakly_ordered_cpu(monkeypatch):
    before = list_segments(os.getpid())
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    with pytest.raises(UnsupportedCPUError):
        ShmBlock.create(4096, "weights")
    assert list_segments(os.getpid()) == before


def test_cli_fit_on_a_weakly_ordered_cpu_exits_1_with_one_line(marked_env):
    env, mark = marked_env
    run = run_cli(
        ["fit", "--config", "configs/appo.yaml"], env, timeout=240, script=("-c", _CLI_ON_AARCH64)
    )
    assert run.returncode == 1
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("error: unilab_lit's shared-memory transport supports x86-64 CPUs only")
    assert "Traceback" not in run.stderr
    assert_no_leftovers(run, mark)
