"""Reading a sharing plan (the JSON that ``qtquant fix --plan-out`` writes) for the torch side.

Accepts a dict, a path, or a plan object from :mod:`qtquant.plan`, and normalises it to a
small typed view.  Only the fields ``apply_plan`` needs are required, so a hand-written
plan works too; unknown fields are ignored.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass

from ..errors import PlanError

__all__ = ["PlanMember", "PlanGroup", "TorchPlan", "read_plan"]

FORMAT = "qtquant-plan"
VERSION = 1


@dataclass(frozen=True)
class PlanMember:
    tensor: str
    producer: str | None = None
    producer_op: str | None = None
    bits_lost: float = 0.0
    module: str | None = None  # optional hint: a module path or FX node name in the torch model


@dataclass(frozen=True)
class PlanGroup:
    id: int
    members: tuple[PlanMember, ...]
    concats: tuple[str, ...] = ()
    scale: float | None = None
    zero_point: int | None = None


@dataclass(frozen=True)
class TorchPlan:
    groups: tuple[PlanGroup, ...]
    model: str = ""
    scheme: str = ""
    policy: str = ""


def _as_dict(plan) -> dict:
    if isinstance(plan, dict):
        return plan
    if isinstance(plan, (str, os.PathLike)):
        try:
            with open(plan, encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError:
            raise PlanError(f"plan file not found: {plan}") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise PlanError(f"cannot read plan {os.fspath(plan)!r}: {e}") from None
        if not isinstance(data, dict):
            raise PlanError(f"plan {os.fspath(plan)!r} is not a JSON object")
        return data
    for meth in ("to_dict", "as_dict", "to_json_dict"):
        fn = getattr(plan, meth, None)
        if callable(fn):
            d = fn()
            if isinstance(d, dict):
                return d
    if dataclasses.is_dataclass(plan) and not isinstance(plan, type):
        return dataclasses.asdict(plan)
    raise PlanError(f"cannot read a plan from a {type(plan).__name__}: pass a dict, a path or a plan object")


def _member(m, gid) -> PlanMember:
    if isinstance(m, str):
        return PlanMember(tensor=m)
    if not isinstance(m, dict) or not isinstance(m.get("tensor"), str):
        raise PlanError(f"plan group {gid}: every member needs a 'tensor' name")
    try:
        bits = float(m.get("bits_lost") or 0.0)
    except (TypeError, ValueError):
        bits = 0.0
    return PlanMember(tensor=m["tensor"], producer=m.get("producer") or None,
                      producer_op=m.get("producer_op") or None, bits_lost=bits,
                      module=m.get("module") or None)


def read_plan(plan) -> TorchPlan:
    """Normalise ``plan`` (dict, path or plan object); a bad plan raises :class:`PlanError`."""
    if isinstance(plan, TorchPlan):
        return plan
    d = _as_dict(plan)
    fmt = d.get("format", FORMAT)
    if fmt != FORMAT:
        raise PlanError(f"not a qtquant plan (format {fmt!r}, expected {FORMAT!r})")
    ver = d.get("version", VERSION)
    if not isinstance(ver, int) or ver > VERSION:
        raise PlanError(f"plan format version {ver!r} is newer than this qtquant understands ({VERSION}); "
                        "upgrade qtquant")
    raw = d.get("groups")
    if not isinstance(raw, (list, tuple)):  # tuples: a dataclasses.asdict() of a plan object
        raise PlanError("plan has no 'groups' list")
    groups = []
    for i, g in enumerate(raw):
        if not isinstance(g, dict) or not isinstance(g.get("members"), (list, tuple)):
            raise PlanError(f"plan group {i} has no 'members' list")
        gid = g.get("id", i)
        members = tuple(_member(m, gid) for m in g["members"])
        scale = g.get("scale")
        zp = g.get("zero_point")
        groups.append(PlanGroup(id=int(gid) if isinstance(gid, (int, float)) else i, members=members,
                                concats=tuple(c for c in (g.get("concats") or ()) if isinstance(c, str)),
                                scale=float(scale) if isinstance(scale, (int, float)) else None,
                                zero_point=int(zp) if isinstance(zp, (int, float)) else None))
    return TorchPlan(groups=tuple(groups), model=str(d.get("model") or ""), scheme=str(d.get("scheme") or ""),
                     policy=str(d.get("policy") or ""))
