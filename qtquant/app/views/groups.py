"""The Groups dock: every shared-observer group with its members, scale, bits lost and latency saved."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...model.scales import bits_lost
from .fmt import fmt_bits, fmt_scale, fmt_us
from .palette import group_hex
from .perfdata import rescale_us_by_concat

if TYPE_CHECKING:
    from ...model.graphmodel import Graph
    from ...quant.groups import Group
    from ..session import Session

__all__ = ["GROUP_HEADERS", "GROUP_TIPS", "MemberRow", "GroupRow", "group_rows"]

GROUP_HEADERS = ("Group", "Tensors", "Scale", "Bits lost", "Saved")
GROUP_TIPS = ("group name (or id) and its members; the colour is its hull on the canvas",
              "number of tensors tied to the shared observer", "the shared scale",
              "worst bits a member loses by sharing: log2(absmax(group) / absmax(member))",
              "latency saved: rescale cost of the Concats it touches, before minus after")


@dataclass(frozen=True)
class MemberRow:
    tensor: str
    producer: str | None
    own_scale: float | None  # its scale without any group
    bits_lost: float | None  # log2(absmax(group) / absmax(tensor))

    @property
    def cells(self) -> tuple[str, ...]:
        return (self.tensor, "", fmt_scale(self.own_scale), fmt_bits(self.bits_lost), "")

    @property
    def tooltip(self) -> str:
        return (f"{self.tensor}\nproduced by {self.producer or '(model input or constant)'}\n"
                f"own scale {fmt_scale(self.own_scale)}; right-click to remove it from the group")


@dataclass(frozen=True)
class GroupRow:
    id: int
    name: str
    members: tuple[MemberRow, ...]
    scale: float | None
    worst_bits: float | None
    saved_us: float | None  # rescale cost of the Concats it touches, before minus after
    concats: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def title(self) -> str:
        """Short enough for the dock: auto-share names list every Concat ("auto: a, b, c ...")."""
        if not self.name:
            return f"group {self.id}"
        name = self.name.removeprefix("auto: ").removesuffix(" ...")
        parts = [p.strip() for p in name.split(", ")]
        more = len(self.concats) - 1 if self.name.startswith("auto: ") else len(parts) - 1
        return parts[0] + (f" +{more}" if more > 0 else "")

    @property
    def color(self) -> str:
        """Its hull's colour on the canvas."""
        return group_hex(self.id)

    @property
    def cells(self) -> tuple[str, ...]:
        return (self.title, str(len(self.members)), fmt_scale(self.scale), fmt_bits(self.worst_bits),
                fmt_us(self.saved_us))

    @property
    def tooltip(self) -> str:
        tip = [f"group {self.id}" + (f" ({self.name})" if self.name else "") + f": {len(self.members)} tensors"]
        if self.concats:
            tip.append("Concats: " + ", ".join(self.concats[:6]) + (" …" if len(self.concats) > 6 else ""))
        return "\n".join(tip + list(self.notes))


def _concats_by_group(graph: Graph, groups: Iterable[Group]) -> dict[int, list[str]]:
    """Concats whose inputs or output a group holds; a Concat counts once, for the group
    holding its output if any, else the first group touching it (so savings add up)."""
    of = {t: g.id for g in groups for t in g.members}
    out: dict[int, list[str]] = {}
    for node in graph.concat_nodes():
        owner = of.get(node.outputs[0]) if node.outputs else None
        if owner is None:
            owner = next((of[t] for t in node.inputs if t in of), None)
        if owner is not None:
            out.setdefault(owner, []).append(node.name)
    return out


def group_rows(session: Session) -> list[GroupRow]:
    g = session.graph
    groups = list(session.groups)
    ready = session.ready
    dm = session.domains if ready else None
    base = session.baseline_domains if ready else None
    after = rescale_us_by_concat(session.perf.value if session.perf is not None else None)
    before = rescale_us_by_concat(session.perf_baseline.value if session.perf_baseline is not None else None)
    by_group = _concats_by_group(g, groups)
    rows: list[GroupRow] = []
    for gr in groups:
        members: list[MemberRow] = []
        worst: float | None = None
        scale: float | None = None
        for t in gr.members:
            p = g.tensors[t].producer if t in g.tensors else None
            b: float | None = None
            own: float | None = None
            d = dm.domain_of(t) if dm is not None else None
            if dm is not None and base is not None and d is not None:
                scale = d.scale if scale is None else scale
                own = base.scale_of(t)
                r = dm.member_range.get(t)
                if r is not None:
                    b = bits_lost(r, (d.lo, d.hi), dm.scheme)
                    worst = b if worst is None else max(worst, b)
            members.append(MemberRow(t, p, own, b))
        cats = by_group.get(gr.id, [])
        saved = None
        if after and before:
            saved = sum(before.get(c, 0.0) - after.get(c, 0.0) for c in cats)
        rows.append(GroupRow(gr.id, gr.name, tuple(members), scale, worst, saved, tuple(cats), tuple(gr.notes)))
    return rows
