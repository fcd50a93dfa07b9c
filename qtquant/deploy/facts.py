"""What every deploy target writes from: the session's groups with their one scale, the int16 and
float choices with the nodes they fall on, and every quantized tensor's scale.

Read once from a session (:meth:`DeployFacts.from_session`), so a target module never walks the
graph itself and every target states the same decisions.  The float choices include the model
outputs qtquant's own export leaves in float (:func:`qtquant.quant.outputs.export_float_of`: an output
Concat whose members cannot share one int8 scale), so no target quantizes what the QDQ export
does not.  :class:`Note` is a decision a target
cannot state as made (int16 in a TensorRT INT8 cache, float32 in hb_compile's qtypes): each is
listed in the target's files and printed, never dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..base.errors import BadInputError
from ..export.overrides import overrides_dict
from ..quant.outputs import export_float_of
from ..quant.precision import chain_nodes
from ..base.vocab import Precision, Scheme
from .scopes import scope_path, split_scope

# Ops whose outputs hold their first input's values on its grid: a member made by one takes its
# scale from the module feeding it.
PASS_THROUGH = {"Split", "Reshape", "Transpose", "Slice", "Flatten", "Squeeze", "Unsqueeze"}

__all__ = ["PASS_THROUGH", "Member", "DeployGroup", "Choice", "DeployFacts", "Note", "NotExpressible", "Deployed"]


class NotExpressible(BadInputError):
    """A target cannot state a decision of the session (``--strict``: refused, not noted)."""


@dataclass(frozen=True)
class Note:
    """A decision the target cannot state as made, and what its files do instead."""

    subject: str  # the tensor or node
    text: str

    def line(self) -> str:
        return f"{self.subject}: {self.text}"


@dataclass(frozen=True)
class Member:
    tensor: str
    producer: str | None  # ONNX node name; None for a model input or a constant
    producer_op: str  # "Input" / "Constant" when there is no producer
    module: str  # the module path its ONNX scope names ("" when the name has no scope)
    # The node whose module makes the values: the producer, or behind ops that pass their input's
    # values and scale through (a Split's outputs carry the scale of what feeds it).
    source: str | None = None
    source_op: str = ""

    @property
    def op_tail(self) -> str:
        """The producer's own name inside its scope (``Conv``, ``Concat_1``)."""
        return split_scope(self.producer)[1] if self.producer else ""


@dataclass(frozen=True)
class DeployGroup:
    id: int
    name: str
    scale: float  # float32-exact: what every format stores
    concats: tuple[str, ...]
    members: tuple[Member, ...]


@dataclass(frozen=True)
class Choice:
    """An int16 or float decision on one quantized tensor."""

    tensor: str
    precision: Precision
    member: Member  # the tensor and its producer
    nodes: tuple[str, ...]  # the producer and the fused chain behind it: the nodes it falls on
    readers: tuple[tuple[str, int], ...]  # (node, input index) of each node reading the tensor
    scale16: float | None  # int16: the scale over its domain's range (symmetric int16)
    # "user": an --int16/--keep-float or plan choice; "output rule": a model output the export leaves
    # in float (qtquant.quant.outputs: its Concat's members cannot share one int8 scale)
    origin: str = "user"


@dataclass
class DeployFacts:
    model: str  # the model's file name
    model_sha256: str
    march: str
    scheme: Scheme
    groups: list[DeployGroup]
    choices: list[Choice]
    scales: dict[str, float]  # every quantized float activation -> its int8 scale (groups' members share one)
    zero_points: dict[str, int] = field(default_factory=dict)
    inputs: tuple[str, ...] = ()

    @classmethod
    def from_session(cls, session) -> "DeployFacts":
        graph, dm = session.graph, session.domains
        ov = overrides_dict(session)  # (onnxruntime's writer: the one rule for which tensors carry a scale)
        scales = {t: v[0]["scale"] for t, v in ov.items()}
        zps = {t: v[0]["zero_point"] for t, v in ov.items()}

        def member(t: str) -> Member:
            p = graph.producer(t)
            if p is None:
                return Member(t, None, "Input" if t in graph.inputs else "Constant", "")
            src = p
            while src.op_type in PASS_THROUGH and src.inputs and graph.producer(src.inputs[0]) is not None:
                src = graph.producer(src.inputs[0])
            return Member(t, p.name, p.op_type, scope_path(src.name), src.name, src.op_type)

        groups = []
        for g in session.groups:
            scale = next((scales[t] for t in g.members if t in scales), None)
            if scale is None:  # (a group of tensors that ship float: nothing to deploy)
                continue
            concats = tuple(n.name for n in graph.concat_nodes()
                            if set(g.members) & ({t for t in n.inputs if t} | {n.outputs[0]}))
            groups.append(DeployGroup(g.id, g.name, scale, concats, tuple(member(t) for t in g.members)))
        choices = []
        chosen = dict(session.options.precision.items())
        for t in sorted(export_float_of(graph, session.options, session.qdq, dm) - set(chosen)):
            if t in scales:
                chosen[t] = Precision.FLOAT
        for t, p in chosen.items():
            if t not in graph.tensors:
                raise BadInputError(f"the precision map names {t!r}, which the model lacks")
            readers = tuple((c.name, i) for c in graph.consumers(t) for i, x in enumerate(c.inputs) if x == t)
            q16 = dm.qparams_at(t, Precision.INT16) if p is Precision.INT16 else None
            choices.append(Choice(t, p, member(t), tuple(chain_nodes(graph, t)), readers,
                                  float(q16.scale) if q16 is not None else None,
                                  "user" if t in session.options.precision else "output rule"))
        return cls(model=graph.path.name if graph.path else "model.onnx", model_sha256=graph.sha256 or "",
                   march=str(session.options.march), scheme=dm.scheme, groups=groups, choices=choices,
                   scales=scales, zero_points=zps, inputs=tuple(graph.inputs))

    @property
    def stem(self) -> str:
        return self.model.rsplit(".", 1)[0] if "." in self.model else self.model

    def of(self, precision: Precision) -> list[Choice]:
        return [c for c in self.choices if c.precision is precision]

    def group_of(self, tensor: str) -> DeployGroup | None:
        return next((g for g in self.groups if any(m.tensor == tensor for m in g.members)), None)


@dataclass
class Deployed:
    """What a target wrote: its files, the decisions it could not state, what was checked, and
    (x5-qat) the names it could not map to a module."""

    target: str
    files: list = field(default_factory=list)  # Paths
    notes: list[Note] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)
    unmapped: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = [f"wrote {self.target}: {p}" for p in self.files]
        out += [f"checked: {c}" for c in self.checks]
        out += [f"unmapped: {u}" for u in self.unmapped]
        out += [f"note: {n.line()}" for n in self.notes]
        return out

    def to_dict(self) -> dict:
        return {"target": self.target, "files": [str(p) for p in self.files], "checks": list(self.checks),
                "unmapped": list(self.unmapped), "notes": [{"subject": n.subject, "text": n.text} for n in self.notes]}
