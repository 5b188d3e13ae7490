"""Learner → collector observation-normaliser statistics: versioned mean / var / count."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import nn

from unilab_lit.ipc.versioned import VersionedBuffer, VersionedBufferHandle, VersionedRecord
from unilab_lit.validation import check_arg


class ObsStatsSnapshot(NamedTuple):
    """One consistent set of statistics (float64, on CPU)."""

    version: int
    mean: torch.Tensor
    var: torch.Tensor
    count: float


@dataclass(frozen=True)
class SharedObsStatsHandle:
    """Picklable handle: attach with :meth:`attach`."""

    buffer: VersionedBufferHandle

    def attach(self) -> SharedObsStats:
        """Map the statistics in this process (non-owner)."""
        return SharedObsStats((self.buffer.numel - 1) // 2, _attach=self.buffer)


class SharedObsStats(VersionedRecord):
    """Mean, variance and count of one observation group, with a version.

    Stored in float64 as ``[mean (size), var (size), count]`` in a double-buffered seqlock
    block (see ``versioned.py``): a reader never combines the mean of one version with
    the variance of another. One instance per observation group.

    Args:
        size: observation dimension, > 0.

    Raises:
        ValueError: ``size`` is not positive.
    """

    def __init__(self, size: int, _attach: VersionedBufferHandle | None = None) -> None:
        check_arg(size > 0, "size", size, "> 0")
        self._size = int(size)
        self._open(2 * self._size + 1, torch.float64, "obs_stats", _attach)

    @staticmethod
    def required_bytes(size: int) -> int:
        """Shared-memory bytes for statistics of dimension ``size``."""
        return VersionedBuffer.required_bytes(2 * size + 1, torch.float64)

    @property
    def size(self) -> int:
        """Observation dimension."""
        return self._size

    def handle(self) -> SharedObsStatsHandle:
        """Picklable handle a spawn child uses to attach."""
        return SharedObsStatsHandle(self._buffer.handle())

    def publish(
        self,
        mean: torch.Tensor,
        var: torch.Tensor,
        count: float | torch.Tensor,
        version: int | None = None,
    ) -> int:
        """Publish one set of statistics.

        Args:
            mean: ``[size]`` running mean.
            var: ``[size]`` running (population) variance.
            count: number of samples the statistics summarise.
            version: explicit version, greater than the newest; default newest + 1.

        Returns:
            The published version.

        Raises:
            ValueError: a shape other than ``[size]``, or a version that does not increase.
        """
        for name, value in (("mean", mean), ("var", var)):
            if tuple(value.shape) != (self._size,):
                raise ValueError(
                    f"{name} must have shape ({self._size},), got {tuple(value.shape)}"
                )
        n = self._size

        def fill(dst: torch.Tensor) -> None:
            dst[:n].copy_(mean)
            dst[n : 2 * n].copy_(var)
            dst[2 * n] = float(count)

        return self._buffer.publish(fill, version)

    def publish_normalizer(self, normalizer: nn.Module, version: int | None = None) -> int:
        """Publish the ``mean`` / ``var`` / ``count`` buffers of an ``ObsNormalizer``."""
        return self.publish(normalizer.mean, normalizer.var, normalizer.count, version)

    def read_if_newer(self, last_version: int) -> ObsStatsSnapshot | None:
        """The newest statistics if their version is newer than ``last_version``, else None."""
        n = self._size
        out = torch.empty(2 * n + 1, dtype=torch.float64)
        version = self._buffer.read_if_newer(last_version, lambda src: out.copy_(src))
        if version is None:
            return None
        return ObsStatsSnapshot(version, out[:n], out[n : 2 * n], float(out[2 * n]))

    def load_normalizer_if_newer(self, normalizer: nn.Module, last_version: int) -> int | None:
        """Copy newer statistics into an ``ObsNormalizer``'s buffers in place.

        Returns:
            The version now in the normaliser, or None when nothing newer exists (the
            normaliser is then untouched).
        """
        n = self._size

        def read(src: torch.Tensor) -> None:
            normalizer.mean.copy_(src[:n])
            normalizer.var.copy_(src[n : 2 * n])
            normalizer.count.copy_(src[2 * n])

        with torch.no_grad():
            return self._buffer.read_if_newer(last_version, read)
