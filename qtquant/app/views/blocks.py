"""Looks of collapsed blocks (what is inside, aggregated) and the Concat a model opens on.

A collapsed block shows: the rescales of the Concats inside (summed), the worst mismatch colour
among them, the total simulated latency inside (latency overlay), and the worst SQNR of a node
inside where accuracy figures exist.  Edges styled for a node hidden in a block are styled on
the block's edge for the same tensor.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from ...base.vocab import Overlay
from ..scene.hierarchy import block_id
from .fmt import fmt_us
from .lookitems import FADED_LOOK, Badge, Looks, NodeLook
from .looks import LATENCY_BADGE, rescale_badge
from .palette import mismatch_band, mismatch_hex
from .perfdata import node_us
from .concats import concat_rows
from ...base.tables import fmt_num

if TYPE_CHECKING:
    from ...fidelity.accuracy import AccuracyReport
    from ...perf import PerfResult
    from ...quant.concat import ConcatInfo
    from ..scene.view import SceneModel
    from ..session import Session

__all__ = ["BlockSummary", "block_summaries", "fill_block_looks", "worst_concat", "node_sqnr", "SQNR_BADGE"]

SQNR_BADGE = "#4a148c"


class BlockSummary:
    __slots__ = ("rescales", "concats", "worst", "latency_us", "sqnr_db")

    def __init__(self) -> None:
        self.rescales = 0
        self.concats = 0
        self.worst: ConcatInfo | None = None  # the Concat with the worst mismatch inside
        self.latency_us = 0.0
        self.sqnr_db: float | None = None


def _worse(a: ConcatInfo, b: ConcatInfo) -> bool:
    """Is Concat ``a`` a worse mismatch than ``b``?"""
    ka = (mismatch_band(a.ratio, a.rescales), a.rescales > 0, a.ratio if math.isfinite(a.ratio) else 1e30)
    kb = (mismatch_band(b.ratio, b.rescales), b.rescales > 0, b.ratio if math.isfinite(b.ratio) else 1e30)
    return ka > kb


def block_summaries(model: SceneModel, concats: Iterable[ConcatInfo] | None = None, perf: PerfResult | None = None,
                    sqnr: Mapping[str, float | None] | None = None) -> dict[str, BlockSummary]:
    """Canvas block name -> what its collapsed box aggregates, for every collapsed block shown."""
    # One pass over the figures, each charged to the block that shows its node: not a walk of
    # every block's members (20,000 nodes in 700 blocks, on the GUI thread, at every looks pass).
    out: dict[str, BlockSummary] = {u: BlockSummary() for u in model.units if block_id(u) is not None}
    if not out:
        return out
    unit_of = model.unit_of
    for c in concats or ():
        s = out.get(unit_of.get(c.node, ""))  # ("": not shown)
        if s is not None:
            s.concats += 1
            s.rescales += c.rescales
            if s.worst is None or _worse(c, s.worst):
                s.worst = c
    for n, us in (node_us(perf) if perf is not None else {}).items():
        s = out.get(unit_of.get(n, ""))
        if s is not None:
            s.latency_us += us
    for n, db in (sqnr or {}).items():
        s = out.get(unit_of.get(n, ""))
        if s is not None and db is not None and (s.sqnr_db is None or db < s.sqnr_db):
            s.sqnr_db = db
    return out


def fill_block_looks(looks: Looks, model: SceneModel, mode: str, concats: Iterable[ConcatInfo] | None = None,
                     perf: PerfResult | None = None, sqnr: Mapping[str, float | None] | None = None) -> None:
    """Add the collapsed blocks' looks to ``looks`` (filled for the graph's nodes already)."""
    for unit, s in block_summaries(model, concats, perf, sqnr).items():
        badges: list[Badge] = []
        if s.rescales:
            badges.append(rescale_badge(s.rescales))
        if mode == Overlay.LATENCY and s.latency_us >= 0.005:
            badges.insert(0, Badge(fmt_us(s.latency_us), LATENCY_BADGE))
        if s.sqnr_db is not None:
            badges.append(Badge(f"{fmt_num(s.sqnr_db, 1)} dB", SQNR_BADGE))
        w = s.worst
        fill = mismatch_hex(w.ratio, w.rescales) if w is not None and w.rescales else None
        faded = mode == Overlay.MISMATCH and not s.rescales
        if not badges and fill is None:
            looks.nodes[unit] = FADED_LOOK if faded else looks.nodes.get(unit, NodeLook())
            continue
        looks.nodes[unit] = NodeLook(fill, tuple(badges), faded, 2.0 if w is not None else 1.0)
    # Edge styles keyed on a node inside a collapsed block move to the block's edge.
    unit_of = model.unit_of
    for (t, dst), look in list(looks.edges.items()):
        u = unit_of.get(dst, dst)
        if u != dst:
            looks.edges.setdefault((t, u), look)


def node_sqnr(report: AccuracyReport | None) -> dict[str, float] | None:
    """Per node the worst cumulative SQNR (dB) of its tensors in an accuracy report, or None."""
    if report is None:
        return None
    out: dict[str, float] = {}
    for t in report.tensors:
        v = t.sqnr_db
        if t.node and v is not None and math.isfinite(v) and v < out.get(t.node, math.inf):
            out[t.node] = v
    return out


def worst_concat(session: Session | None) -> str | None:
    """The Concat to open on: the highest rescale cost (simulated), then the highest ratio."""
    best: str | None = None
    key: tuple[float, int, float] | None = None
    for r in concat_rows(session):
        if not r.rescales:
            continue
        ratio = r.ratio if math.isfinite(r.ratio) else 1e30
        k = (r.gain_us or 0.0, r.rescales, ratio)
        if key is None or k > key:
            best, key = r.name, k
    return best
