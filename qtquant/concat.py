"""Concat analysis: per-input scales, mismatch ratio, rescales and bits lost (DESIGN §3)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .quant import bits_lost, scales_differ

__all__ = ["ConcatMember", "ConcatInfo", "analyze_concats"]


@dataclass
class ConcatMember:
    tensor: str
    index: int  # input index, or -1 for the output
    producer: str | None
    domain: int | None
    scale: float | None
    zero_point: int | None
    lo: float
    hi: float
    bits_lost_if_shared: float  # against the merged range of this Concat's inputs and output
    bits_lost_now: float  # against the member's current domain (0 unless grouped)
    needs_rescale: bool = False
    constant: bool = False
    other_consumers: int = 0  # consumers other than this Concat: they see the shared scale too

    @property
    def absmax(self) -> float:
        return max(abs(self.lo), abs(self.hi))


@dataclass
class ConcatInfo:
    node: str
    axis: int
    inputs: list[ConcatMember]
    output: ConcatMember
    ratio: float
    rescales: int
    feeds_output: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def mismatched(self) -> bool:
        return self.rescales > 0

    @property
    def rescale_inputs(self) -> list[int]:
        return [m.index for m in self.inputs if m.needs_rescale]

    def members(self) -> list[ConcatMember]:
        return [*self.inputs, self.output]


def _member(graph, dm, tensor, index, concat_name, merged) -> ConcatMember:
    d = dm.domain_of(tensor)
    own = dm.member_range.get(tensor, (float("nan"), float("nan")))
    t = graph.tensors[tensor]
    q = d.qparams if d else None
    return ConcatMember(
        tensor=tensor, index=index, producer=t.producer, domain=d.id if d else None,
        scale=q.scale if q else None, zero_point=q.zero_point if q else None,
        lo=own[0], hi=own[1],
        bits_lost_if_shared=bits_lost(own, merged, dm.scheme) if merged and own[0] == own[0] else 0.0,
        bits_lost_now=bits_lost(own, (d.lo, d.hi), dm.scheme) if d and own[0] == own[0] and d.lo == d.lo else 0.0,
        constant=t.kind == "weight",
        other_consumers=len([c for c in t.consumers if c != concat_name]),
    )


def analyze_concats(graph, dm) -> list[ConcatInfo]:
    """One :class:`ConcatInfo` per Concat whose output is a quantized activation."""
    outputs = set(graph.outputs)
    infos = []
    for node in graph.concat_nodes():
        out = node.outputs[0]
        ins = [(i, t) for i, t in enumerate(node.inputs) if t and t in graph.tensors]
        rs = [dm.member_range[t] for _, t in ins if t in dm.member_range]
        if out in dm.member_range:
            rs.append(dm.member_range[out])
        merged = (min(r[0] for r in rs), max(r[1] for r in rs)) if rs else None
        out_m = _member(graph, dm, out, -1, node.name, merged)
        members = [_member(graph, dm, t, i, node.name, merged) for i, t in ins]
        notes = []
        for m in members:
            if m.constant:
                # Constants are requantized offline to the output scale: no runtime op.
                continue
            if m.scale is None:
                notes.append(f"input {m.index} ({m.tensor}) is not quantized")
                continue
            if out_m.scale is not None and scales_differ(m.scale, out_m.scale):
                m.needs_rescale = True
            elif out_m.scale is not None and m.zero_point != out_m.zero_point:
                m.needs_rescale = True
        scales = [m.scale for m in (*members, out_m) if m.scale and not m.constant]
        ratio = max(scales) / min(scales) if scales else 1.0
        feeds = out in outputs or any(o in outputs for c in graph.consumers(out) for o in c.outputs
                                      if c.handler.role.value == "pass")
        info = ConcatInfo(node.name, int(node.attrs.get("axis", 0)), members, out_m, ratio,
                          sum(m.needs_rescale for m in members), feeds_output=feeds, notes=notes)
        infos.append(info)
    return infos
