"""Pre-flight check: will the planned shared memory and batch slots fit before we allocate them?"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from unilab_lit.ipc.block import SHM_DIR, shm_free_bytes


class MemoryBudgetError(RuntimeError):
    """The planned allocation does not fit; the message says by how much and what to shrink."""


def mem_available_bytes() -> int:
    """``MemAvailable`` from /proc/meminfo: RAM the kernel can hand out without swapping."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("/proc/meminfo has no MemAvailable line")


def format_bytes(n: int) -> str:
    """Human-readable binary size, e.g. ``1.50 GiB``."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class BudgetReport:
    """What a passing check measured, for a start-up log line."""

    shm_bytes: int
    host_bytes: int
    device_bytes: int
    shm_free: int
    ram_available: int

    def __str__(self) -> str:
        return (
            f"planned {format_bytes(self.shm_bytes)} in {SHM_DIR} "
            f"({format_bytes(self.shm_free)} free), {format_bytes(self.host_bytes)} host slots, "
            f"{format_bytes(self.device_bytes)} device slots; MemAvailable {format_bytes(self.ram_available)}"
        )


def _total_and_listing(blocks: Sequence[tuple[str, int]]) -> tuple[int, str]:
    total = sum(nbytes for _, nbytes in blocks)
    listing = ", ".join(f"{name} {format_bytes(nbytes)}" for name, nbytes in blocks)
    return total, listing


def check_allocation_budget(
    shm_blocks: Sequence[tuple[str, int]],
    shrink_keys: Sequence[str],
    host_blocks: Sequence[tuple[str, int]] = (),
    device_blocks: Sequence[tuple[str, int]] = (),
    device: torch.device | str = "cpu",
) -> BudgetReport:
    """Refuse, with one line naming both numbers and the config keys to shrink, if the plan won't fit.

    Shared-memory blocks live in /dev/shm, which is RAM: they count against its free
    space *and* against ``MemAvailable``. Host batch slots count against RAM; device batch
    slots count against the device's free memory (RAM when the device is the CPU).

    Args:
        shm_blocks: (name, bytes) of every shared-memory block to be created.
        shrink_keys: config keys that shrink the allocation, quoted in the message.
        host_blocks: (name, bytes) of host-memory batch slots (pinned or plain).
        device_blocks: (name, bytes) of batch slots on ``device``.
        device: where ``device_blocks`` live.

    Returns:
        The measured numbers, for logging.

    Raises:
        MemoryBudgetError: the plan does not fit.
    """
    device = torch.device(device)
    shm_total, shm_listing = _total_and_listing(shm_blocks)
    host_total, host_listing = _total_and_listing(host_blocks)
    device_total, device_listing = _total_and_listing(device_blocks)
    shm_free = shm_free_bytes()
    ram = mem_available_bytes()
    ram_needed = shm_total + host_total + (device_total if device.type == "cpu" else 0)
    shrink = ", ".join(shrink_keys) or "(none given)"
    if shm_total > shm_free:
        raise MemoryBudgetError(
            f"shared memory needs {format_bytes(shm_total)} ({shm_listing}) but {SHM_DIR} has "
            f"{format_bytes(shm_free)} free (MemAvailable {format_bytes(ram)}); shrink: {shrink}"
        )
    if ram_needed > ram:
        raise MemoryBudgetError(
            f"RAM needed {format_bytes(ram_needed)} (shared: {shm_listing}; host: {host_listing or '-'}"
            f"{'; device: ' + device_listing if device.type == 'cpu' and device_listing else ''}) "
            f"but MemAvailable is {format_bytes(ram)} ({SHM_DIR} free {format_bytes(shm_free)}); "
            f"shrink: {shrink}"
        )
    if device.type == "cuda" and device_total:
        free, _ = torch.cuda.mem_get_info(device)
        if device_total > free:
            raise MemoryBudgetError(
                f"device slots need {format_bytes(device_total)} ({device_listing}) but {device} "
                f"has {format_bytes(free)} free; shrink: {shrink}"
            )
    return BudgetReport(shm_total, host_total, device_total, shm_free, ram)
