"""Open and measure one side of ``qtquant diff`` / ``qtquant check`` exactly as ``qtquant analyze``
does (open_session keeping the check's values, the perf simulation beside the fidelity check with
its cross-check), so that a side's figures are the ones ``analyze`` prints for that file alone."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ..compare.sides import Side
from ..base.errors import BadInputError, QtQuantError

__all__ = ["open_side", "is_project"]


def is_project(path) -> bool:
    return str(path).lower().endswith(".qtquant")


def open_side(args, path, *, label: str, plan=None) -> Side:
    """``path``: a model file (float or QDQ; with ``plan`` a sharing plan on top) or a ``.qtquant``
    project, which brings its own model, shapes, calibration settings, groups and precisions.
    An error says which side it is about."""
    try:
        return _open_side(args, path, label, plan)
    except QtQuantError as e:
        e.args = (f"{label} ({Path(path).name}): {e}",)
        raise


def _open_side(args, path, label: str, plan) -> Side:
    from .analyze import perf_and_fidelity, warm_perf

    if not os.path.isfile(path):
        raise BadInputError(f"no such file: {path}")
    if plan is not None and not os.path.isfile(plan):
        raise BadInputError(f"no such plan file: {plan}")
    ns = argparse.Namespace(**{**vars(args), "model": str(path), "plan": plan})
    if is_project(path):
        from ..app.projects import open_project

        session, report = open_project(path, remap=True)
        if report.message():
            import sys

            print(f"qtquant: warning: {label}: {report.message()}", file=sys.stderr)
        if not session.quantized_file and session.calibration is None:
            session.run_calibration(keep_check_values=not ns.no_fidelity)
        if plan is not None:
            from ..app.commands import CommandStack
            from ..app.plans import apply_plan

            stack = CommandStack(session)
            if report.remap is not None:  # the project's groups re-mapped onto its changed model
                stack.record(report.remap)
            apply_plan(stack, plan)
    else:
        from .common import open_session

        session = open_session(ns, keep_check_values=not ns.no_fidelity, opened=warm_perf(ns))
    perf, fid = perf_and_fidelity(session, ns)
    return Side(label=label, path=Path(path), session=session, perf=perf, fidelity=fid,
                plan=Path(plan) if plan else None)
