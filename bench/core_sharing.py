"""Are two cores two cores for the learner's math? A loop pinned to one core, alone and next to another.

A virtual machine's vCPUs may be hyperthreads of one physical core (sharing its vector units) or
share memory bandwidth. The bench pins a one-thread loop to ``--core`` (default 0) and measures
its throughput for ``--seconds``, first with the other core (``--other``, default 1) idle, then
with a neighbour process pinned there running:

- ``gemm``: the same matrix-multiply loop (vector FP, what the learner does);
- ``spin``: a pure-Python loop (scalar integer work);
- ``copy``: copies of a 256-MiB tensor (memory bandwidth).

The matmul loops run at ``--sizes`` (square, one thread, ``--dtypes``). Printed: GFLOP/s of the
pinned loop per neighbour and its ratio to alone, the neighbour's own figure, then the copy
bandwidth alone and next to a copying neighbour. If a ``gemm`` neighbour costs much more than a
``spin`` one, the two vCPUs share vector units and a second learner thread cannot add much.

    python bench/core_sharing.py
    python bench/core_sharing.py --sizes 256 --dtypes float32 --seconds 5
    python bench/core_sharing.py --smoke     # one size and dtype, 0.2 s loops (CI)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from smoke import parse_args

_NEIGHBOURS = ("gemm", "spin", "copy")
_COPY_BYTES = 256 * 1024 * 1024
# The neighbour starts this long before the timed loop and runs this long after it.
_LEAD_S = 1.0


def run_loop(kind: str, core: int, seconds: float, size: int, dtype: str) -> float:
    """Pin this process to ``core``, run ``kind`` for ``seconds``: GFLOP/s, GB/s or 0 (spin)."""
    import torch

    os.sched_setaffinity(0, {core})
    torch.set_num_threads(1)
    if kind == "spin":
        end, x = time.perf_counter() + seconds, 0
        while time.perf_counter() < end:
            for i in range(1000):
                x += i
        return 0.0
    if kind == "copy":
        src = torch.empty(_COPY_BYTES // 4)
        dst = torch.empty_like(src)
        work, step = 2 * _COPY_BYTES, lambda: dst.copy_(src)
    else:
        a = torch.randn(size, size, dtype=getattr(torch, dtype))
        b = torch.randn(size, size, dtype=getattr(torch, dtype))
        work, step = 2 * size**3, lambda: torch.mm(a, b)
        for _ in range(20):
            step()
    began, count = time.perf_counter(), 0
    while time.perf_counter() - began < seconds:
        step()
        count += 1
    return count * work / (time.perf_counter() - began) / 1e9


def next_to(kind: str, args: argparse.Namespace, size: int, dtype: str, neighbour: str) -> tuple:
    """``kind`` on ``args.core`` with ``neighbour`` (or nothing) on ``args.other``."""
    child = None
    if neighbour:
        command = [sys.executable, __file__, "--child", neighbour, str(args.other)]
        command += [str(args.seconds + 2 * _LEAD_S), str(size), dtype]
        child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        time.sleep(_LEAD_S)
    mine = run_loop(kind, args.core, args.seconds, size, dtype)
    theirs = float(child.communicate()[0]) if child else float("nan")
    return mine, theirs


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        kind, core, seconds, size, dtype = sys.argv[2:7]
        print(run_loop(kind, int(core), float(seconds), int(size), dtype), flush=True)
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--core", type=int, default=0)
    parser.add_argument("--other", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=3.0, help="timed loop per measurement")
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 512])
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    args = parse_args(parser, seconds=0.2, sizes=[64], dtypes=["float32"])
    print(f"loop on core {args.core}, neighbour on core {args.other}; load {os.getloadavg()}")
    for dtype in args.dtypes:
        for size in args.sizes:
            alone, _ = next_to("gemm", args, size, dtype, "")
            print(f"{dtype} {size}^3 matmul: alone {alone:6.1f} GFLOP/s", flush=True)
            for neighbour in _NEIGHBOURS:
                mine, theirs = next_to("gemm", args, size, dtype, neighbour)
                print(
                    f"{dtype} {size}^3 matmul next to {neighbour:4s}: {mine:6.1f} GFLOP/s "
                    f"({mine / alone:.2f} of alone), neighbour {theirs:6.1f}",
                    flush=True,
                )
    alone, _ = next_to("copy", args, 0, "float32", "")
    mine, theirs = next_to("copy", args, 0, "float32", "copy")
    print(
        f"copy: alone {alone:.1f} GB/s, next to copy {mine:.1f} ({mine / alone:.2f}), "
        f"neighbour {theirs:.1f}"
    )


if __name__ == "__main__":
    main()
