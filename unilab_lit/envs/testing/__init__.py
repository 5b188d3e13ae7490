"""Checks of a user's task before it trains: :func:`check_task` runs the contract every task
meets; :func:`compare_with_gymnasium` measures how far the task strays from a gymnasium twin."""

from __future__ import annotations

from unilab_lit.envs.testing.contract import TaskContractError, check_task
from unilab_lit.envs.testing.gym_twin import TwinReport, compare_with_gymnasium

__all__ = ["TaskContractError", "TwinReport", "check_task", "compare_with_gymnasium"]
