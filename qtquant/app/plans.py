"""The apply-a-plan use case: a sharing plan's groups and precision as one command on the session's
stack (:class:`~.commands.ApplyPlanCommand`), so it undoes like any edit and its views refresh once.
``--plan`` on the CLI (:func:`qtquant.cli.common.open_session`, ``qtquant diff``'s sides) and the
window's plan (``qtquant MODEL --plan``, the screenshot command) call :func:`apply_plan`."""

from __future__ import annotations

from pathlib import Path

from ..files.plan import AppliedPlan, Plan, load_plan
from .commands import ApplyPlanCommand, CommandStack

__all__ = ["apply_plan"]


def apply_plan(stack: CommandStack, plan: Plan | Path | str, *, replace: bool = True) -> AppliedPlan:
    """Apply ``plan`` (a :class:`Plan` or its file) to ``stack.session``: all or nothing
    (:class:`~qtquant.base.errors.PlanError` changes nothing); returns its groups and warnings."""
    if not isinstance(plan, Plan):
        plan = load_plan(plan)
    cmd = ApplyPlanCommand(plan=plan, replace=replace)
    stack.push(cmd)
    assert cmd.applied is not None  # (set by do(), or it raised)
    return cmd.applied
