"""What Share (Ctrl+G) on a canvas selection proposes, and what each member would lose.

A rubber band catches more than the user means: over the three branches of a Concat it also
catches a neighbouring branch (``attn/q_flat`` on the demo) which then loses bits for nothing.
So a selection proposes only tensors that feed a Concat, directly or through pass-through ops
(Reshape, Transpose, MaxPool, Split ...), and the GUI shows the proposal before committing it:

* Concats selected: every selected Concat's members (its quantized inputs and output), plus the
  selected tensors that feed one of them through pass-through ops.
* No Concat selected: the largest set of selected tensors that feeds one Concat.

Everything else caught by the selection is named in :attr:`SharePlan.left_out` with the reason.
A lone Concat (Ctrl+G) and a drop onto a Concat keep their own, direct paths in the editor.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..quant.concat import concat_members
from ..base.errors import QtQuantError
from ..quant.groups import GroupSet, check_member, check_ships_quantized, ships_float
from ..quant.outputs import pass_through_walk
from ..model.scales import bits_lost

if TYPE_CHECKING:
    from ..calib.state import SessionState
    from ..model.graphitems import Node
    from ..model.graphmodel import Graph
    from ..quant.domains import DomainMap

__all__ = ["SharePlan", "feeders", "plan_share", "member_bits"]


def feeders(graph: Graph, concat: Node | str) -> set[str]:
    """Tensors that reach ``concat``'s inputs directly or through a chain of pass-through ops."""
    node = graph.nodes[concat] if isinstance(concat, str) else concat
    return set(pass_through_walk(graph, [t for t in node.inputs if t and t in graph.tensors], upstream=True))


@dataclass(frozen=True)
class SharePlan:
    members: tuple[str, ...]  # in graph order
    concats: tuple[str, ...]  # the Concat(s) the members feed
    bits: dict[str, float | None] = field(default_factory=dict)  # member -> bits it would lose (None: not calibrated)
    now: dict[str, float | None] = field(default_factory=dict)  # member -> bits it loses today
    left_out: tuple[tuple[str, str], ...] = ()  # (tensor, why): caught by the selection, feeding none
    unquantized: int = 0  # outputs in the selection that can never be shared (a Conv's raw output ...)

    @property
    def worst(self) -> float | None:
        vals = [b for b in self.bits.values() if b is not None]
        return max(vals) if vals else None

    def text(self) -> str:
        """The proposal as plain lines (the dialog shows the same in a table)."""
        lines = [f"Share {len(self.members)} tensors feeding {', '.join(self.concats)}:"]
        for t in self.members:
            b = self.bits.get(t)
            lines.append(f"  {t}: " + ("not calibrated yet" if b is None else f"loses {b:.2f} bits"))
        for t, why in self.left_out:
            lines.append(f"  left out {t}: {why}")
        if self.unquantized:
            lines.append(f"  left out {self.unquantized} that cannot be quantized")
        return "\n".join(lines)


def _order(graph: Graph, tensors: Iterable[str]) -> tuple[str, ...]:
    def key(t: str) -> int:
        p = graph.producer(t)
        return p.index if p is not None else -1

    return tuple(sorted(dict.fromkeys(tensors), key=key))


def _outputs(graph: Graph, names: Iterable[str]) -> list[str]:
    from .scene import INPUT_PREFIX, OUTPUT_PREFIX

    out: list[str] = []
    for n in names:
        if n.startswith((INPUT_PREFIX, OUTPUT_PREFIX)):
            t = n.split(":", 1)[1]
            out += [t] if t in graph.tensors else []
        elif n in graph.nodes:
            out += [t for t in graph.nodes[n].outputs if t and t in graph.tensors]
    return list(dict.fromkeys(out))


def _shareable(session: SessionState, t: str, floats: Collection[str]) -> str | None:
    try:
        check_member(session.graph, t)
        check_ships_quantized(session, [t], floats)
    except QtQuantError as e:
        return str(e)
    return None


def member_bits(session: SessionState, members: Sequence[str]
                ) -> tuple[dict[str, float | None], dict[str, float | None]]:
    """(bits each member would lose once ``members`` share one observer, bits it loses now);
    values are None before calibration."""
    if not session.ready:
        return dict.fromkeys(members), dict.fromkeys(members)
    trial = GroupSet(list(session.groups.groups), session.groups.next_id)
    trial.share(session.graph, members)
    dm_after, dm_now = session.domains_with(trial.as_lists()), session.domains

    def of(dm: DomainMap, t: str) -> float | None:
        d, r = dm.domain_of(t), dm.member_range.get(t)
        return None if d is None or r is None else bits_lost(r, (d.lo, d.hi), dm.scheme)

    return {t: of(dm_after, t) for t in members}, {t: of(dm_now, t) for t in members}


def plan_share(session: SessionState, selected: Iterable[str]) -> SharePlan | None:
    """The proposal for Share on the nodes ``selected``; None when nothing selected feeds a Concat."""
    g = session.graph
    names = [n for n in selected if n]
    floats = ships_float(session)  # (once: every tensor below asks)
    picked = [t for t in _outputs(g, names) if _shareable(session, t, floats) is None]
    cats = [n for n in names if n in g.nodes and g.nodes[n].op_type == "Concat"]
    if cats:
        feed = {c: feeders(g, c) for c in cats}
        members = [t for c in cats for t in concat_members(g, c)]
        members += [t for t in picked if any(t in f for f in feed.values())]
        chosen = cats
    else:
        best: str | None = None
        hits: list[str] = []
        for node in g.concat_nodes():
            f = feeders(g, node)
            h = [t for t in picked if t in f]
            if len(h) > len(hits):
                best, hits = node.name, h
        if best is None or len(hits) < 2:
            return None
        members, chosen = hits, [best]
    members = [t for t in _order(g, members) if _shareable(session, t, floats) is None]
    if len(members) < 2:
        return None
    kept = set(members)
    rest = [t for t in _outputs(g, names) if t not in kept]
    why = f"does not feed {' or '.join(chosen)} through pass-through ops"
    left = tuple((t, why) for t in rest if _shareable(session, t, floats) is None)
    bits, now = member_bits(session, members)
    return SharePlan(tuple(members), tuple(chosen), bits, now, left, len(rest) - len(left))
