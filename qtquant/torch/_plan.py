"""Reading a sharing plan (the JSON that ``qtquant fix --plan-out`` writes) for the torch side.

Accepts a dict, a path, or a plan object, and validates it with the one plan schema,
:class:`qtquant.files.plan.Plan`.  A plan may be hand-written: it needs only the groups and their
members' tensor names (the format and version may be left out); unknown fields are ignored.
Every problem is a one-line :class:`~qtquant.base.errors.PlanError`.
"""

from __future__ import annotations

import dataclasses
import os

from ..base.errors import PlanError
from ..files.plan import Plan, load_plan, parse_plan

__all__ = ["read_plan"]


def _as_dict(plan) -> dict:
    for meth in ("to_dict", "as_dict", "to_json_dict"):
        fn = getattr(plan, meth, None)
        if callable(fn):
            d = fn()
            if isinstance(d, dict):
                return d
    if dataclasses.is_dataclass(plan) and not isinstance(plan, type):
        return dataclasses.asdict(plan)
    raise PlanError(f"cannot read a plan from a {type(plan).__name__}: pass a dict, a path or a plan object")


def read_plan(plan) -> Plan:
    """Normalise ``plan`` (dict, path or plan object); a bad plan raises :class:`PlanError`."""
    if isinstance(plan, Plan):
        return plan
    if isinstance(plan, (str, os.PathLike)):
        return load_plan(plan, hand_written=True)
    return parse_plan(plan if isinstance(plan, dict) else _as_dict(plan), hand_written=True)
