"""Sharing plans: the user's groups as versioned JSON, to take back to training.

Schema (version 1; the PyTorch side codes against it)::

    {"format": "qtquant-plan", "version": 1, "model": "yolov8n.onnx", "model_sha256": "...",
     "policy": "union", "scheme": "int8-sym",
     "groups": [{"id": 0, "scale": 0.0123, "zero_point": 0, "concats": ["/model.4/Concat"],
                 "members": [{"tensor": "...", "producer": "node name or null",
                              "producer_op": "Conv", "bits_lost": 0.41}]}]}

Readers ignore unknown keys, so later minor additions stay readable.  JSON only: a plan
is data from somewhere else and is never unpickled or evaluated.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from .errors import PlanError, ShareRefused
from .fileio import atomic_write_text
from .quant import bits_lost

__all__ = ["FORMAT", "VERSION", "Plan", "PlanGroup", "PlanMember", "AppliedPlan", "plan_dict", "save_plan",
           "load_plan", "parse_plan", "apply_plan", "apply_plan_file"]

FORMAT = "qtquant-plan"
VERSION = 1
MAX_PLAN_BYTES = 64 << 20  # a plan is small; refuse to slurp something huge


@dataclass(frozen=True)
class PlanMember:
    tensor: str
    producer: str | None = None
    producer_op: str = ""
    bits_lost: float = 0.0


@dataclass(frozen=True)
class PlanGroup:
    id: int
    members: tuple[PlanMember, ...]
    scale: float | None = None
    zero_point: int | None = None
    concats: tuple[str, ...] = ()
    name: str = ""

    @property
    def tensors(self) -> list[str]:
        return [m.tensor for m in self.members]


@dataclass(frozen=True)
class Plan:
    groups: tuple[PlanGroup, ...]
    version: int = VERSION
    model: str | None = None
    model_sha256: str | None = None
    policy: str | None = None
    scheme: str | None = None
    source: str = ""  # file it came from, for messages


@dataclass
class AppliedPlan:
    groups: list = field(default_factory=list)  # groups.Group objects now in the session
    warnings: list[str] = field(default_factory=list)


# -- writing ---------------------------------------------------------------------------------

def _num(x):
    return float(x) if x is not None and math.isfinite(float(x)) else None


def _concats_touching(graph, members) -> list[str]:
    ms = set(members)
    return [n.name for n in graph.concat_nodes() if ms & ({t for t in n.inputs if t} | {n.outputs[0]})]


def plan_dict(session) -> dict:
    graph, dm = session.graph, session.domains
    groups = []
    for g in session.groups:
        d = next((dm.domain_of(t) for t in g.members if dm.domain_of(t) is not None), None)
        q = d.qparams if d is not None else None
        members = []
        for t in g.members:
            p = graph.producer(t)
            own = dm.member_range.get(t)
            b = bits_lost(own, (d.lo, d.hi), dm.scheme) if own is not None and d is not None and q else 0.0
            members.append({"tensor": t, "producer": p.name if p is not None else None,
                            "producer_op": p.op_type if p is not None else
                            ("Input" if t in graph.inputs else "Constant"),
                            "bits_lost": _num(round(b, 4))})
        groups.append({"id": g.id, "name": g.name, "scale": _num(q.scale) if q else None,
                       "zero_point": q.zero_point if q else None,
                       "concats": _concats_touching(graph, g.members), "members": members})
    return {"format": FORMAT, "version": VERSION,
            "model": graph.path.name if graph.path else None, "model_sha256": graph.sha256 or None,
            "policy": session.options.policy.value, "scheme": session.options.scheme.value,
            "groups": groups}


def save_plan(session, path) -> Path:
    return atomic_write_text(path, json.dumps(plan_dict(session), indent=2) + "\n", inputs=[session.graph.path],
                             what="plan file")


# -- reading ---------------------------------------------------------------------------------

def _need(obj, key, types, where, src, optional=False):
    if key not in obj or obj[key] is None:
        if optional:
            return None
        raise PlanError(f"{src}: {where}.{key} is missing")
    v = obj[key]
    # bool is an int in Python; a plan saying "id": true is malformed.
    if isinstance(v, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        raise PlanError(f"{src}: {where}.{key} has the wrong type (bool)")
    if not isinstance(v, types):
        want = " or ".join(t.__name__ for t in (types if isinstance(types, tuple) else (types,)))
        raise PlanError(f"{src}: {where}.{key} must be {want}, not {type(v).__name__}")
    return v


def parse_plan(doc, source: str = "plan") -> Plan:
    """Validate a decoded JSON document into a :class:`Plan`."""
    src = source
    if not isinstance(doc, dict):
        raise PlanError(f"{src} is not a qtquant plan (the top level is not a JSON object)")
    if doc.get("format") != FORMAT:
        raise PlanError(f"{src} is not a qtquant plan (format is {doc.get('format')!r}, expected {FORMAT!r})")
    version = _need(doc, "version", int, "plan", src)
    if version > VERSION:
        raise PlanError(f"{src} was written by a newer qtquant (plan version {version}; "
                        f"this qtquant reads version {VERSION} or older)")
    if version < 1:
        raise PlanError(f"{src}: plan version {version} is not valid")
    raw_groups = _need(doc, "groups", list, "plan", src)
    groups = []
    seen_ids = set()
    for gi, rg in enumerate(raw_groups):
        where = f"groups[{gi}]"
        if not isinstance(rg, dict):
            raise PlanError(f"{src}: {where} must be an object")
        gid = _need(rg, "id", int, where, src, optional=True)
        gid = gi if gid is None else gid
        if gid in seen_ids:
            raise PlanError(f"{src}: {where}.id {gid} is used twice")
        seen_ids.add(gid)
        scale = _need(rg, "scale", (int, float), where, src, optional=True)
        zp = _need(rg, "zero_point", int, where, src, optional=True)
        concats = _need(rg, "concats", list, where, src, optional=True) or []
        if not all(isinstance(c, str) for c in concats):
            raise PlanError(f"{src}: {where}.concats must be a list of node names")
        rms = _need(rg, "members", list, where, src)
        members = []
        for mi, rm in enumerate(rms):
            mw = f"{where}.members[{mi}]"
            if isinstance(rm, str):  # tolerate the short form: just tensor names
                members.append(PlanMember(rm))
                continue
            if not isinstance(rm, dict):
                raise PlanError(f"{src}: {mw} must be an object")
            members.append(PlanMember(
                _need(rm, "tensor", str, mw, src),
                _need(rm, "producer", str, mw, src, optional=True),
                _need(rm, "producer_op", str, mw, src, optional=True) or "",
                float(_need(rm, "bits_lost", (int, float), mw, src, optional=True) or 0.0)))
        name = _need(rg, "name", str, where, src, optional=True) or ""
        groups.append(PlanGroup(gid, tuple(members), None if scale is None else float(scale), zp, tuple(concats),
                                name))
    return Plan(tuple(groups), version, doc.get("model") if isinstance(doc.get("model"), str) else None,
                doc.get("model_sha256") if isinstance(doc.get("model_sha256"), str) else None,
                doc.get("policy") if isinstance(doc.get("policy"), str) else None,
                doc.get("scheme") if isinstance(doc.get("scheme"), str) else None, source)


def load_plan(path) -> Plan:
    p = Path(path)
    if not p.exists():
        raise PlanError(f"plan file not found: {p}")
    if p.is_dir():
        raise PlanError(f"{p} is a folder, not a plan file")
    try:
        if p.stat().st_size > MAX_PLAN_BYTES:
            raise PlanError(f"{p.name} is too large to be a qtquant plan")
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise PlanError(f"{p.name} is not a qtquant plan (not UTF-8 text)") from None
    except OSError as e:
        raise PlanError(f"cannot read plan {p}: {e.strerror or e}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise PlanError(f"{p.name} is not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    except RecursionError:
        raise PlanError(f"{p.name} is nested too deeply to be a qtquant plan") from None
    except ValueError as e:  # e.g. an integer literal over Python's 4300-digit limit
        raise PlanError(f"{p.name} is not a readable qtquant plan ({e})") from None
    return parse_plan(doc, p.name)


# -- applying --------------------------------------------------------------------------------

def apply_plan(session, plan: Plan, *, replace: bool = True) -> AppliedPlan:
    """Make the session's groups those of ``plan`` (or add them, ``replace=False``).

    All-or-nothing: tensors missing from the model, or a group that breaks a sharing
    constraint, raise :class:`PlanError` and leave the session unchanged.
    """
    graph = session.graph
    src = plan.source or "plan"
    missing = list(dict.fromkeys(m.tensor for g in plan.groups for m in g.members if m.tensor not in graph.tensors))
    if missing:
        shown = ", ".join(repr(t) for t in missing[:5])
        more = f" (+{len(missing) - 5} more)" if len(missing) > 5 else ""
        raise PlanError(f"{src} names {len(missing)} tensor(s) missing from the model: {shown}{more}")
    res = AppliedPlan()
    if plan.model_sha256 and graph.sha256 and plan.model_sha256 != graph.sha256:
        res.warnings.append(f"{src} was made for a different file ({plan.model or 'unknown'}); "
                            "tensor names match, so it is applied")
    if plan.policy and plan.policy != session.options.policy.value:
        res.warnings.append(f"{src} was made with policy {plan.policy!r}; scales now follow "
                            f"{session.options.policy.value!r}")
    if plan.scheme and plan.scheme != session.options.scheme.value:
        res.warnings.append(f"{src} was made with scheme {plan.scheme!r}; scales now follow "
                            f"{session.options.scheme.value!r}")
    before = session.groups.snapshot()
    if replace:
        session.groups.clear()
    try:
        made = []
        for g in plan.groups:
            tensors = g.tensors
            if len(set(tensors)) < 2:
                res.warnings.append(f"{src}: group {g.id} has fewer than two tensors; skipped")
                continue
            made.append(session.groups.share(graph, tensors, g.name))
    except ShareRefused as e:
        session.groups.restore(before)
        raise PlanError(f"{src}: group {g.id}: {e}") from None
    final = {x.id: x for x in session.groups.groups}
    res.groups = [final[x.id] for x in {x.id: x for x in made}.values() if x.id in final]
    session.groups_changed()
    return res


def apply_plan_file(session, path, *, replace: bool = True) -> AppliedPlan:
    return apply_plan(session, load_plan(path), replace=replace)
