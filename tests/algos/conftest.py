"""Fixtures for the algorithm tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture
def one_torch_thread() -> Iterator[None]:
    """Run the test's tensor ops on one thread.

    The test networks are tiny: on the shared 2-core machine, two intra-op threads that spin
    while other processes hold the cores made a 40-iteration training test 10x slower.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
