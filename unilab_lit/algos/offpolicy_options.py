"""The settings of the off-policy iteration that FastTD3 and FastSAC share."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from unilab_lit.validation import check_arg


@dataclass(frozen=True)
class OffPolicyOptions:
    """The settings of the off-policy iteration that FastTD3 and FastSAC share.

    Args:
        num_atoms: Atoms of the C51 support (>= 2).
        v_min: Lowest atom.
        v_max: Highest atom (> v_min).
        gamma: Discount factor, in (0, 1].
        tau: Polyak rate of the critic targets, in (0, 1].
        updates_per_step: Minibatches (critic updates) per replay item (>= 1).
        policy_frequency: Critic updates per actor update (>= 1).
        use_cdq: Clipped double Q in the critic target and the actor loss.
        max_grad_norm: Per-network gradient-norm clip; 0 disables clipping (>= 0).
        compile_losses: ``torch.compile`` the critic and actor losses (see ``RLAlgorithm._compile``).
        max_nonfinite_steps: Consecutive skipped steps of one kind that stop training (>= 1).
        use_symmetry: Add the left-right mirror of every sampled transition to the batch (the
            task's ``EnvSpec.mirror``); each minibatch then holds its ``batch_size`` sampled
            rows and their mirrors, twice as many rows. Refused for a task without a mirror.

    Raises:
        ValueError: If a field is outside its valid range (the message names it).
    """

    num_atoms: int = 101
    v_min: float = -250.0
    v_max: float = 250.0
    gamma: float = 0.99
    tau: float = 0.1
    updates_per_step: int = 2
    policy_frequency: int = 2
    use_cdq: bool = True
    max_grad_norm: float = 0.0
    compile_losses: bool = False
    max_nonfinite_steps: int = 10
    use_symmetry: bool = False

    def __post_init__(self) -> None:
        check_arg(self.num_atoms >= 2, "num_atoms", self.num_atoms, ">= 2")
        check_arg(self.v_max > self.v_min, "v_max", self.v_max, f"> v_min ({self.v_min})")
        check_arg(0.0 < self.gamma <= 1.0, "gamma", self.gamma, "in (0, 1]")
        check_arg(0.0 < self.tau <= 1.0, "tau", self.tau, "in (0, 1]")
        check_arg(self.updates_per_step >= 1, "updates_per_step", self.updates_per_step, ">= 1")
        check_arg(self.policy_frequency >= 1, "policy_frequency", self.policy_frequency, ">= 1")
        check_arg(
            self.max_grad_norm >= 0.0, "max_grad_norm", self.max_grad_norm, ">= 0 (0 disables)"
        )
        check_arg(
            self.max_nonfinite_steps >= 1, "max_nonfinite_steps", self.max_nonfinite_steps, ">= 1"
        )


# A checkpoint of a directly built learner holds the options in its hyperparameters; Lightning
# loads checkpoints with torch's weights-only unpickler, which needs the class allowed.
# The class lived in unilab_lit.algos.offpolicy until the move into this module; checkpoints
# written then name it there.
torch.serialization.add_safe_globals(
    [OffPolicyOptions, (OffPolicyOptions, "unilab_lit.algos.offpolicy.OffPolicyOptions")]
)
