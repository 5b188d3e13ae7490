"""Learner → collector weight transport: a versioned flat float32 copy of a module's state."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from unilab_lit.ipc.versioned import VersionedBuffer, VersionedBufferHandle, VersionedRecord
from unilab_lit.validation import check_arg


def _floating_entries(module: nn.Module) -> list[torch.Tensor]:
    # state_dict order covers parameters and persistent buffers (normaliser statistics,
    # per-env noise scales, ...). Its tensors are detached views of the module's storage,
    # so copying into them updates the module in place. Integer entries (counters) are
    # not transported: float32 cannot hold them exactly.
    return [t for t in module.state_dict().values() if t.is_floating_point()]


def flat_size(module: nn.Module) -> int:
    """Number of float32 values :class:`SharedWeights` needs for ``module``'s floating state."""
    return sum(t.numel() for t in _floating_entries(module))


@dataclass(frozen=True)
class SharedWeightsHandle:
    """Picklable handle: attach with :meth:`attach`."""

    buffer: VersionedBufferHandle

    def attach(self) -> SharedWeights:
        """Map the weights in this process (non-owner)."""
        return SharedWeights(self.buffer.numel, _attach=self.buffer)


class SharedWeights(VersionedRecord):
    """A flat float32 block of a module's parameters and floating buffers, plus a version.

    The learner publishes (``publish`` / ``publish_module``); the collector reads only
    when the version is newer (``read_if_newer`` / ``load_module_if_newer``). A reader
    never ends up with a mixture of two versions, and versions are strictly increasing.

    Args:
        num_floats: float32 values per version; use :func:`flat_size` for a module.

    Raises:
        ValueError: ``num_floats`` is not positive.
    """

    def __init__(self, num_floats: int, _attach: VersionedBufferHandle | None = None) -> None:
        check_arg(num_floats > 0, "num_floats", num_floats, "> 0")
        self._open(num_floats, torch.float32, "weights", _attach)

    @staticmethod
    def required_bytes(num_floats: int) -> int:
        """Shared-memory bytes for ``num_floats`` values (both buffers and stamps)."""
        return VersionedBuffer.required_bytes(num_floats, torch.float32)

    @property
    def num_floats(self) -> int:
        """Float32 values per version."""
        return self._buffer.numel

    def handle(self) -> SharedWeightsHandle:
        """Picklable handle a spawn child uses to attach."""
        return SharedWeightsHandle(self._buffer.handle())

    def publish(self, flat: torch.Tensor, version: int | None = None) -> int:
        """Publish a flat vector of ``num_floats`` values (any device / floating dtype).

        Args:
            flat: 1-D tensor with exactly ``num_floats`` elements.
            version: explicit version, greater than the newest; default newest + 1.

        Returns:
            The published version.

        Raises:
            ValueError: wrong size, or a version that does not increase.
        """
        if flat.numel() != self.num_floats:
            raise ValueError(
                f"flat has {flat.numel()} elements, SharedWeights holds {self.num_floats}"
            )
        return self._buffer.publish(lambda dst: dst.copy_(flat.reshape(-1)), version)

    def publish_module(self, module: nn.Module, version: int | None = None) -> int:
        """Publish ``module``'s parameters and floating buffers in state_dict order.

        Raises:
            ValueError: the module's :func:`flat_size` differs from ``num_floats``, or a
                version that does not increase.
        """
        entries = self._checked_entries(module)

        def fill(dst: torch.Tensor) -> None:
            offset = 0
            for tensor in entries:
                dst[offset : offset + tensor.numel()].copy_(tensor.reshape(-1))
                offset += tensor.numel()

        return self._buffer.publish(fill, version)

    def read_if_newer(self, last_version: int, out: torch.Tensor) -> int | None:
        """Copy the newest version into ``out`` if it is newer than ``last_version``.

        Args:
            last_version: the version the caller already has (``NOT_PUBLISHED`` at first).
            out: 1-D tensor of ``num_floats`` elements; untouched when None is returned.

        Returns:
            The version now in ``out``, or None when nothing newer exists.
        """
        if out.numel() != self.num_floats:
            raise ValueError(
                f"out has {out.numel()} elements, SharedWeights holds {self.num_floats}"
            )
        return self._buffer.read_if_newer(last_version, lambda src: out.copy_(src))

    def load_module_if_newer(self, module: nn.Module, last_version: int) -> int | None:
        """Write the newest version into ``module`` in place if it is newer than ``last_version``.

        Returns:
            The version now in the module, or None when nothing newer exists (the module
            is then untouched).
        """
        entries = self._checked_entries(module)

        def read(src: torch.Tensor) -> None:
            offset = 0
            for tensor in entries:
                tensor.copy_(src[offset : offset + tensor.numel()].view(tensor.shape))
                offset += tensor.numel()

        with torch.no_grad():
            return self._buffer.read_if_newer(last_version, read)

    def _checked_entries(self, module: nn.Module) -> list[torch.Tensor]:
        entries = _floating_entries(module)
        size = sum(t.numel() for t in entries)
        if size != self.num_floats:
            raise ValueError(
                f"module has {size} floating state values (flat_size), "
                f"SharedWeights holds {self.num_floats}"
            )
        return entries
