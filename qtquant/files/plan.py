"""Sharing plans: the user's groups as versioned JSON, to take back to training.

Declared by :class:`Plan` (version 2; qtquant.torch reads plans with the same schema)::

    {"format": "qtquant-plan", "version": 2, "model": "yolov8n.onnx", "model_sha256": "...",
     "policy": "union", "scheme": "int8-sym", "cut": [],
     "precision": {"/model.22/Concat_output_0": "float", "/model.2/cv1/act/Mul_output_0": "int16"},
     "groups": [{"id": 0, "scale": 0.0123, "zero_point": 0, "concats": ["/model.4/Concat"],
                 "members": [{"tensor": "...", "producer": "node name or null",
                              "producer_op": "Conv", "bits_lost": 0.41}]}]}

``cut`` (version 2; absent or ``[]``: the whole file, as every version-1 plan) names the tensors the
model was cut at (``--cut``): applying a plan to another cut warns.  ``precision`` (version 2) maps tensors to
``int16`` or ``float``; every other tensor is int8.  A version-1 plan has none and still loads
(:meth:`Plan._migrate`).  Readers ignore unknown keys, so later minor additions stay readable.
JSON only: a plan
is data from somewhere else and is never unpickled or evaluated.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator

from ..base.errors import PlanError, ShareRefused
from ..base.fileio import atomic_write_text
from ..base.fileio.schema import FileModel, check_format, check_version, one_line, read_json
from ..model.scales import bits_lost
from ..base.vocab import Precision

__all__ = ["FORMAT", "VERSION", "Plan", "PlanGroup", "PlanMember", "AppliedPlan", "plan_dict", "save_plan",
           "load_plan", "parse_plan", "apply_plan"]

FORMAT = "qtquant-plan"
VERSION = 2  # 2: per-tensor precision (int16 / float) and the --cut it was made on; 1 had only groups


# -- the schema (qtquant.torch reads plans with it too) -----------------------------------------

class PlanMember(FileModel):
    tensor: str
    producer: str | None = None
    producer_op: str = ""
    bits_lost: float = 0.0
    module: str | None = None  # optional hint for qtquant.torch: a module path or FX node name

    @model_validator(mode="before")
    @classmethod
    def _short_form(cls, data):
        return {"tensor": data} if isinstance(data, str) else data  # just a tensor name


class PlanGroup(FileModel):
    id: int  # absent in the file: the group's position in the list
    members: tuple[PlanMember, ...] = Field(strict=False)  # lists in JSON, tuples from a plan object
    scale: float | None = None
    zero_point: int | None = None
    concats: tuple[str, ...] = Field((), strict=False)
    name: str = ""

    @property
    def tensors(self) -> list[str]:
        return [m.tensor for m in self.members]


def _hand_written(info: ValidationInfo) -> bool:
    return bool(info.context and info.context.get("hand_written"))


class Plan(FileModel):
    """A sharing plan.  ``parse_plan`` validates one as qtquant writes it; a hand-written plan
    (``context={"hand_written": True}``, as qtquant.torch reads dicts) may leave out the format
    and the version."""

    format: str | None = Field(None, validate_default=True)
    version: int | None = Field(None, validate_default=True)
    groups: tuple[PlanGroup, ...] = Field(strict=False)
    model: str | None = None
    model_sha256: str | None = None
    policy: str | None = None
    scheme: str | None = None
    cut: tuple[str, ...] = Field((), strict=False)  # the tensors the model was cut at; () = whole file
    # tensor -> int16 / float (every other tensor is int8)
    precision: dict[str, Annotated[Precision, Field(strict=False)]] = Field(default_factory=dict)
    source: str = Field("", exclude=True)  # the file it came from, for messages
    reader_fields = ("source",)

    @model_validator(mode="before")
    @classmethod
    def _migrate(cls, data):
        # Version 1 had no precision: everything int8.  A "precision" key in a version-1 file is
        # not ours (readers ignore unknown keys), so it is dropped, not read.
        if isinstance(data, dict) and isinstance(data.get("version"), int) and data["version"] < 2:
            data = {k: v for k, v in data.items() if k != "precision"}
        return data

    @field_validator("model", "model_sha256", "policy", "scheme", mode="before")
    @classmethod
    def _informative(cls, v):
        return v if isinstance(v, str) else None  # only shown in warnings: a bad one is just absent

    @field_validator("format", mode="before")
    @classmethod
    def _format(cls, v, info: ValidationInfo):
        return FORMAT if v is None and _hand_written(info) else check_format(v, FORMAT, "qtquant plan")

    @field_validator("version", mode="after")
    @classmethod
    def _version(cls, v, info: ValidationInfo):
        v = VERSION if v is None and _hand_written(info) else check_version(v, VERSION, "plan")
        if v < 1:
            raise ValueError(f"must be 1 or more, got {v}")
        return v

    @field_validator("groups", mode="before")
    @classmethod
    def _positional_ids(cls, v):
        if isinstance(v, (list, tuple)):
            return [{**g, "id": i} if isinstance(g, dict) and g.get("id") is None else g for i, g in enumerate(v)]
        return v

    @model_validator(mode="after")
    def _unique_ids(self):
        seen = set()
        for i, g in enumerate(self.groups):
            if g.id in seen:
                raise ValueError(f"groups[{i}].id {g.id} is used twice")
            seen.add(g.id)
        return self


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
            "precision": session.options.precision.to_dict(),
            "cut": list(graph.cut), "groups": groups}


def save_plan(session, path) -> Path:
    return atomic_write_text(path, json.dumps(plan_dict(session), indent=2) + "\n", inputs=[session.graph.path],
                             what="plan file")


# -- reading ---------------------------------------------------------------------------------

def parse_plan(doc, source: str = "plan", *, hand_written: bool = False) -> Plan:
    """Validate a decoded JSON document into a :class:`Plan`; a bad one raises a one-line :class:`PlanError`."""
    try:
        return Plan.model_validate(doc, context={"source": source, "hand_written": hand_written})
    except ValidationError as e:
        raise PlanError(one_line(e, source, "qtquant plan")) from None


def load_plan(path, *, hand_written: bool = False) -> Plan:
    doc = read_json(path, noun="plan", error=PlanError)
    return parse_plan(doc, Path(path).name, hand_written=hand_written)


# -- applying --------------------------------------------------------------------------------

def apply_plan(session, plan: Plan, *, replace: bool = True) -> AppliedPlan:
    """Make the session's groups those of ``plan`` (or add them, ``replace=False``).

    All-or-nothing: tensors missing from the model, or a group that breaks a sharing
    constraint, raise :class:`PlanError` and leave the session unchanged.  The front ends apply a
    plan as an edit, one command on the stack: :func:`qtquant.app.plans.apply_plan`.
    """
    graph = session.graph
    src = plan.source or "plan"
    missing = list(dict.fromkeys(m.tensor for g in plan.groups for m in g.members if m.tensor not in graph.tensors))
    cut = graph.cut
    if missing:
        shown = ", ".join(repr(t) for t in missing[:5])
        more = f" (+{len(missing) - 5} more)" if len(missing) > 5 else ""
        hint = f"; {_cut_text(plan.cut, cut)}" if tuple(plan.cut) != cut else ""
        raise PlanError(f"{src} names {len(missing)} tensor(s) missing from the model: {shown}{more}{hint}")
    res = AppliedPlan()
    if tuple(plan.cut) != cut:
        res.warnings.append(f"{src}: {_cut_text(plan.cut, cut)}; its tensor names are all here, so it is applied")
    if plan.model_sha256 and graph.sha256 and plan.model_sha256 != graph.sha256:
        res.warnings.append(f"{src} was made for a different file ({plan.model or 'unknown'}); "
                            "tensor names match, so it is applied")
    if plan.policy and plan.policy != session.options.policy.value:
        res.warnings.append(f"{src} was made with policy {plan.policy!r}; scales now follow "
                            f"{session.options.policy.value!r}")
    if plan.scheme and plan.scheme != session.options.scheme.value:
        res.warnings.append(f"{src} was made with scheme {plan.scheme!r}; scales now follow "
                            f"{session.options.scheme.value!r}")
    bad_prec = [t for t in plan.precision if not graph.is_quantized(t)]
    if bad_prec:
        raise PlanError(f"{src} sets the precision of {len(bad_prec)} tensor(s) that are not quantized "
                        f"tensors of the model: {', '.join(repr(t) for t in bad_prec[:5])}")
    before = session.groups.snapshot()
    if replace:
        session.groups.clear()
    try:
        made = []
        listed: dict[str, int] = {}  # tensor -> the first plan group naming it
        for g in plan.groups:
            tensors = g.tensors
            if len(set(tensors)) < 2:
                res.warnings.append(f"{src}: group {g.id} has fewer than two tensors; skipped")
                continue
            twice = [x for x in dict.fromkeys(tensors) if x in listed]
            if twice:
                res.warnings.append(f"{src}: group {g.id} and group {listed[twice[0]]} both list {twice[0]!r}: "
                                    "they are merged into one")
            listed.update((x, g.id) for x in tensors if x not in listed)
            made.append(session.groups.share(session, tensors, g.name))
    except ShareRefused as e:
        session.groups.restore(before)
        raise PlanError(f"{src}: group {g.id}: {e}") from None
    final = {x.id: x for x in session.groups.groups}
    res.groups = [final[x.id] for x in {x.id: x for x in made}.values() if x.id in final]
    with session.batch():
        session.groups_changed()
        if replace or plan.precision:
            base = {} if replace else session.options.precision
            session.set_options(precision={**base, **plan.precision})
    return res


def _cut_text(plan_cut, cut) -> str:
    def say(c):
        if not c:
            return "the whole model"
        return "the model cut at " + ", ".join(repr(t) for t in c[:6]) + (" ..." if len(c) > 6 else "")
    return f"it was made on {say(tuple(plan_cut))}, this is {say(tuple(cut))}"
