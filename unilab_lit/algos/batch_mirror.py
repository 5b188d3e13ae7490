"""Left-right symmetry augmentation of an off-policy batch (``offpolicy.use_symmetry``)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tensordict import TensorDict
from torch import nn

from unilab_lit.envs.symmetry import Mirror, MirrorSpec

# Keys a mirror changes, with the part of the task's MirrorSpec that maps them; every other key
# of a batch (reward, done, truncated) is repeated unchanged.
_MIRRORED = {
    "obs": "policy_obs",
    "next_obs": "policy_obs",
    "critic_obs": "critic_obs",
    "next_critic_obs": "critic_obs",
    "actions": "actions",
}


class BatchMirror(nn.Module):
    """A task's :class:`MirrorSpec` as index and sign buffers, so that it follows the device."""

    def __init__(self, spec: MirrorSpec) -> None:
        super().__init__()
        for name in ("policy_obs", "critic_obs", "actions"):
            mirror: Mirror = getattr(spec, name)
            self.register_buffer(f"{name}_index", torch.tensor(mirror.index), persistent=False)
            self.register_buffer(f"{name}_sign", torch.tensor(mirror.sign), persistent=False)

    def apply(self, name: str, x: torch.Tensor) -> torch.Tensor:
        """``x``'s mirror under the spec's part ``name`` (``policy_obs``, ``critic_obs``, ``actions``)."""
        index, sign = getattr(self, f"{name}_index"), getattr(self, f"{name}_sign")
        return x[..., index] * sign.to(x.dtype)

    @torch.no_grad()
    def interleave(self, batch: TensorDict, keys: Sequence[str]) -> TensorDict:
        """``batch``'s ``keys`` with each row followed by its mirror (``2 × rows`` rows).

        Interleaved, not appended: each minibatch slice then holds its rows and their mirrors.
        """
        rows = {}
        for key in keys:
            value = batch[key]
            part = _MIRRORED.get(key)
            mirrored = value if part is None else self.apply(part, value)
            rows[key] = torch.stack([value, mirrored], dim=1).flatten(0, 1)
        return TensorDict(rows, batch_size=[2 * batch.shape[0]], device=batch.device)
