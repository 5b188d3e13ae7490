"""The learning rate of the PPO family: KL-adaptive, fixed or linear (``LearningRateSchedule``)."""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch.optim.lr_scheduler import LinearLR

from unilab_lit import distributed
from unilab_lit.validation import check_arg

Schedule = Literal["adaptive", "fixed", "linear"]
"""Learning-rate schedules of :class:`LearningRateSchedule`."""

SCHEDULES: tuple[str, ...] = Schedule.__args__


def adaptive_learning_rate(
    lr: float,
    kl: float,
    desired_kl: float,
    kl_tolerance_factor: float,
    lr_factor: float,
    min_lr: float,
    max_lr: float,
) -> float:
    """The next learning rate of the KL-adaptive schedule (as rsl_rl's PPO, with bounds).

    Divides by ``lr_factor`` when ``kl > desired·tolerance``, multiplies when
    ``0 < kl < desired/tolerance`` and keeps it otherwise (including ``kl == 0``, the first
    minibatch of an iteration, and a NaN kl); the result stays in ``[min_lr, max_lr]``.
    """
    if kl > desired_kl * kl_tolerance_factor:
        return max(min_lr, lr / lr_factor)
    if 0.0 < kl < desired_kl / kl_tolerance_factor:
        return min(max_lr, lr * lr_factor)
    return lr


class LearningRateSchedule:
    """The learning rate of a PPO-family learner: KL-adaptive, fixed or linear.

    - ``"adaptive"``: before each optimizer step, :meth:`adapt` moves the rate by
      :func:`adaptive_learning_rate` from the minibatch's ``KL(target ‖ current)``.
    - ``"fixed"``: the optimizer's ``lr`` throughout.
    - ``"linear"``: from the optimizer's ``lr`` down to ``min_learning_rate`` over the trainer's
      ``max_steps`` iterations, then constant (as rsl_rl's and SB3's linear schedules). It is the
      ``LinearLR`` of :meth:`scheduler`, which the learner returns from
      ``configure_optimizers`` (so Lightning checkpoints and restores its state, and a resumed
      run continues the decay where it stopped; the checkpoint's horizon too, so a resume with
      a larger ``max_steps`` stays at ``min_learning_rate`` past the old one) and steps once
      per iteration.

    Args:
        schedule: One of :data:`SCHEDULES`.
        desired_kl: Target KL per minibatch of the adaptive schedule (> 0).
        kl_tolerance_factor: Tolerance of the adaptive schedule around ``desired_kl`` (> 1).
        lr_factor: Multiplicative change per adaptive step (> 1).
        min_learning_rate: Lower bound of the adaptive rate, final rate of the linear one (> 0).
        max_learning_rate: Upper bound of the adaptive rate (>= ``min_learning_rate``).

    Raises:
        ValueError: If an argument is outside its valid range (the message names it).
    """

    def __init__(
        self,
        schedule: Schedule,
        desired_kl: float,
        kl_tolerance_factor: float,
        lr_factor: float,
        min_learning_rate: float,
        max_learning_rate: float,
    ) -> None:
        check_arg(schedule in SCHEDULES, "schedule", schedule, f"one of {list(SCHEDULES)}")
        check_arg(desired_kl > 0.0, "desired_kl", desired_kl, "> 0")
        check_arg(kl_tolerance_factor > 1.0, "kl_tolerance_factor", kl_tolerance_factor, "> 1")
        check_arg(lr_factor > 1.0, "lr_factor", lr_factor, "> 1")
        check_arg(min_learning_rate > 0.0, "min_learning_rate", min_learning_rate, "> 0")
        check_arg(
            max_learning_rate >= min_learning_rate,
            "max_learning_rate",
            max_learning_rate,
            f">= min_learning_rate ({min_learning_rate})",
        )
        self.schedule = schedule
        self.desired_kl = desired_kl
        self.kl_tolerance_factor = kl_tolerance_factor
        self.lr_factor = lr_factor
        self.min_lr = min_learning_rate
        self.max_lr = max_learning_rate

    def scheduler(self, optimizer: torch.optim.Optimizer, max_steps: int) -> LinearLR | None:
        """Check the optimizer's ``lr`` against the schedule; the ``LinearLR`` of ``"linear"``.

        Args:
            optimizer: The optimizer; its first group's ``lr`` is the initial rate.
            max_steps: The trainer's ``max_steps`` (``-1`` when unset).

        Raises:
            ValueError: If the ``lr`` is not a finite value > 0, lies outside the bounds under
                ``"adaptive"`` or below ``min_learning_rate`` under ``"linear"``, or
                ``max_steps`` is unset under ``"linear"``.
        """
        lr = optimizer.param_groups[0]["lr"]
        check_arg(lr > 0.0 and math.isfinite(lr), "the optimizer's lr", lr, "a finite value > 0")
        if self.schedule == "adaptive":
            check_arg(
                self.min_lr <= lr <= self.max_lr,
                "the optimizer's lr",
                lr,
                f"in [min_learning_rate, max_learning_rate] = [{self.min_lr}, {self.max_lr}] "
                "with schedule='adaptive'",
            )
        if self.schedule != "linear":
            return None
        check_arg(
            lr >= self.min_lr,
            "the optimizer's lr",
            lr,
            f">= min_learning_rate ({self.min_lr}) with schedule='linear'",
        )
        check_arg(
            max_steps >= 1,
            "trainer.max_steps",
            max_steps,
            "set (>= 1) with schedule='linear': the rate decays over max_steps iterations",
        )
        return LinearLR(
            optimizer, start_factor=1.0, end_factor=self.min_lr / lr, total_iters=max_steps
        )

    def adapt(self, optimizer: torch.optim.Optimizer, loss: torch.Tensor, kl: torch.Tensor) -> None:
        """Under ``"adaptive"``, set every group's rate for the next step from this minibatch's KL.

        Under DDP the rank-averaged loss and KL decide, so every rank sets the same rate; a
        non-finite loss (a step about to be skipped) leaves the rate alone. Every rank must call
        it for every minibatch.
        """
        if self.schedule != "adaptive":
            return
        loss_value, kl_value = distributed.mean_over_ranks(
            torch.stack((loss.detach(), kl))
        ).tolist()
        if not math.isfinite(loss_value):
            return
        lr = adaptive_learning_rate(
            optimizer.param_groups[0]["lr"],
            kl_value,
            self.desired_kl,
            self.kl_tolerance_factor,
            self.lr_factor,
            self.min_lr,
            self.max_lr,
        )
        for group in optimizer.param_groups:
            group["lr"] = lr
