"""Overlay modes: analysis results turned into per-item looks (fills, badges, edge styles).

Pure functions of (graph, Concat analysis, perf result, mode), as frozen values with colours as
``"#rrggbb"`` strings.  The canvas applies them in place, so switching modes never touches
the layout.  Many nodes share one look (faded, say): those share one instance, which is safe
because a look never changes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, TypeAlias

from ...quant.precision import RANK, chain_nodes
from ...base.tables import fmt_num
from ...base.vocab import Overlay, Precision
from .accuracy import error_range, finite
from .fmt import fmt_us
from .perfdata import placed_on_cpu
from .palette import BAND_EDGE_COLORS, UNCALIBRATED, heat_hex, mismatch_band, mismatch_hex
from .lookitems import FADED_LOOK, PLAIN, Badge, EdgeLook, Legend, Looks, NodeLook
from .perfdata import node_detail, node_us

if TYPE_CHECKING:
    from ...fidelity.accuracy.report import AccuracyReport
    from ...horizon.match import LogMatch
    from ...model.graphmodel import Graph
    from ...perf import PerfResult
    from ...quant.concat import ConcatInfo

Parts: TypeAlias = "Sequence[Sequence[str]]"  # the graph's node names in runs, with a yield after each

__all__ = ["Badge", "NodeLook", "EdgeLook", "Legend", "Looks", "compute_looks", "fill_looks", "node_bits",
           "rescale_badge", "precision_badge", "error_looks", "PRECISION_BADGES", "PLACED_BADGE"]

RESCALE_BADGE = "#c62828"
LATENCY_BADGE = "#023858"
BITS_BADGE = "#7a0177"
ERROR_BADGE = "#800026"
# Mixed precision: every overlay shows a node's precision when it is not int8.
PRECISION_BADGES = {Precision.INT16: ("int16", "#e65100"), Precision.FLOAT: ("float·CPU", "#1b5e20")}
# A node the march's compiler runs on its CPU whatever the plan (perf/placement.py): no choice of the user's.
PLACED_BADGE = ("CPU", "#5d4037")
FADED_EDGE = "#d5dbe1"
RESCALE_EDGE = "#d32f2f"
BITS_MAX = 8.0  # the bits ramp saturates here


FED_LOOK = NodeLook(border_width=2.0)  # mismatch mode: a node feeding a rescale
_UNCALIBRATED_CONCAT = NodeLook(fill=UNCALIBRATED, border_width=2.0)


def rescale_badge(n: int) -> Badge:
    return Badge(f"+{n} rescale", RESCALE_BADGE)


def node_bits(graph: Graph, concats: Iterable[ConcatInfo] | None) -> dict[str, float]:
    """Per node: bits lost by its output now (after groups) or, for Concat inputs, if shared."""
    out: dict[str, float] = {}
    for c in concats or ():
        worst = 0.0
        for m in c.members():
            if m.constant:
                continue
            b = m.bits_lost_now if m.bits_lost_now > 0.01 else m.bits_lost_if_shared
            if not math.isfinite(b):
                b = 16.0
            worst = max(worst, b)
            if m.producer and m.index >= 0:
                out[m.producer] = max(out.get(m.producer, 0.0), b)
        out[c.node] = max(out.get(c.node, 0.0), worst)
    return out


def _concat_base(c: ConcatInfo) -> NodeLook:
    return NodeLook(fill=mismatch_hex(c.ratio, c.rescales), border_width=2.0,
                    badges=(rescale_badge(c.rescales),) if c.rescales else ())


def compute_looks(graph: Graph, mode: str, concats: Sequence[ConcatInfo] | None = None, perf: PerfResult | None = None,
                  precision: Mapping[str, Precision | str] | None = None, *, accuracy: AccuracyReport | None = None,
                  local: bool = False, compiler: LogMatch | None = None) -> Looks:
    looks = Looks()
    for _ in fill_looks(looks, graph, mode, concats, perf, precision=precision, accuracy=accuracy, local=local,
                        compiler=compiler):
        pass
    return looks


_STEP = 1000  # nodes between two yields of fill_looks (~3 ms of work in the latency mode)


def fill_looks(looks: Looks, graph: Graph, mode: str, concats: Sequence[ConcatInfo] | None = None,
               perf: PerfResult | None = None, step: int | None = None, *,
               precision: Mapping[str, Precision | str] | None = None, accuracy: AccuracyReport | None = None,
               local: bool = False, compiler: LogMatch | None = None) -> Iterator[None]:
    """:func:`compute_looks` as a generator that fills ``looks`` and yields every ``step``
    nodes, so a 20,000-node graph can be re-coloured across several event-loop turns.
    ``precision`` (tensor -> int16 / float): those nodes get a precision badge in every mode.
    ``accuracy`` (an :class:`~qtquant.fidelity.accuracy.AccuracyReport`) colours the Error overlay, by
    cumulative SQNR or, with ``local``, by local SQNR.  ``compiler`` (a compile log placed on the
    graph, :class:`~qtquant.horizon.match.LogMatch`): its requantized inputs are marked in every
    mode, and it colours the Compiler-cosine overlay."""
    step = step or _STEP
    info = {c.node: c for c in concats} if concats is not None else {}
    # Concats first (every mode shows mismatch colour or heat plus the rescale badge).
    for n in graph.concat_nodes():
        c = info.get(n.name)
        looks.nodes[n.name] = _concat_base(c) if c is not None else _UNCALIBRATED_CONCAT
    rescaled: dict[tuple[str, str], EdgeLook] = {}
    for c in info.values():
        edge = EdgeLook(BAND_EDGE_COLORS[mismatch_band(c.ratio, c.rescales)], 2.6)
        for m in c.inputs:
            if m.needs_rescale:
                rescaled[(m.tensor, c.node)] = edge
    looks.edges.update(rescaled)
    yield

    names = list(graph.nodes)
    parts = [names[i:i + step] for i in range(0, len(names), step)]  # a yield after each
    if mode == Overlay.MISMATCH:
        yield from _mismatch(looks, parts, info, rescaled)
    elif mode == Overlay.LATENCY:
        yield from _latency(looks, parts, perf)
    elif mode == Overlay.BITS:
        yield from _bits(looks, parts, info, node_bits(graph, concats))
    elif mode == Overlay.ERROR:
        yield from error_looks(looks, parts, accuracy, local, graph)
    elif mode == Overlay.COSINE:
        from .compiler import cosine_looks

        yield from cosine_looks(looks, parts, compiler)
    else:
        looks.legend = Legend()
    if compiler is not None and concats is not None:
        from ...horizon.reconcile import reconcile_concats
        from .compiler import mark_compiler

        mark_compiler(looks, reconcile_concats(compiler, concats))
    if precision:
        _precision_badges(looks, graph, precision)
    _placed_badges(looks, perf)


def _placed_badges(looks: Looks, perf: PerfResult | None) -> None:
    badge = Badge(*PLACED_BADGE)
    nodes = looks.nodes
    for name in placed_on_cpu(perf):
        base = nodes.get(name, PLAIN)
        nodes[name] = NodeLook(base.fill, (badge, *base.badges), base.faded, base.border_width)


def precision_badge(p: Precision | str) -> Badge | None:
    got = PRECISION_BADGES.get(Precision(p))
    return Badge(*got) if got else None


def _precision_badges(looks: Looks, graph: Graph, precision: Mapping[str, Precision | str]) -> None:
    """The nodes computing an int16 / float tensor (a fused chain's too) show it first."""
    badges = {p: Badge(*got) for p, got in PRECISION_BADGES.items()}
    of: dict[str, Precision] = {}
    for t, given in precision.items():
        p = Precision(given)
        if p in badges and t in graph.tensors:
            for name in chain_nodes(graph, t):
                if RANK[p] > RANK[of.get(name, Precision.INT8)]:
                    of[name] = p
    nodes = looks.nodes
    for name, p in of.items():
        base = nodes.get(name, PLAIN)
        nodes[name] = NodeLook(base.fill, (badges[p], *base.badges), base.faded, base.border_width)


def _mismatch(looks: Looks, parts: Parts, info: Mapping[str, ConcatInfo],
              rescaled: Iterable[tuple[str, str]]) -> Iterator[None]:
    feeders = {m.producer for c in info.values() for m in c.inputs if m.needs_rescale and m.producer}
    nodes = looks.nodes
    for part in parts:
        for name in part:
            if name not in nodes:
                nodes[name] = FED_LOOK if name in feeders else FADED_LOOK
        yield
    looks.edge_default = EdgeLook(FADED_EDGE, 1.0)
    red = EdgeLook(RESCALE_EDGE, 3.2)
    for key in rescaled:
        looks.edges[key] = red
    looks.legend = Legend(Overlay.MISMATCH, "Red edges: Concat inputs that need a rescale")


def _latency(looks: Looks, parts: Parts, perf: PerfResult | None) -> Iterator[None]:
    us = node_us(perf) if perf is not None else {}
    if not us:
        looks.legend = Legend(Overlay.LATENCY, "Latency: not simulated yet")
        return
    yield
    vmax = max(us.values()) or 1.0
    detail = node_detail(perf)  # what bounds each layer and what was fused into it
    badge_of: dict[str, Badge] = {}  # few distinct texts: one Badge each
    nodes = looks.nodes
    for part in parts:
        for name in part:
            v = us.get(name)
            base = nodes.get(name, PLAIN)
            if v is None:
                nodes[name] = FADED_LOOK if base is PLAIN else NodeLook(base.fill, base.badges, True, base.border_width)
                continue
            badges = base.badges
            if v >= 0.005:  # fused ops cost nothing of their own: no "0.00 µs" clutter
                tag = detail.get(name, "")
                text = fmt_us(v) + (f" {tag}" if tag else "")
                b = badge_of.get(text)
                if b is None:
                    b = badge_of[text] = Badge(text, LATENCY_BADGE)
                badges = (b, *badges)
            nodes[name] = NodeLook(heat_hex(math.sqrt(max(v, 0.0) / vmax), "latency"), badges, base.faded,
                                   base.border_width)
        yield
    looks.legend = Legend(Overlay.LATENCY, "Latency per node (√ scale)", "0", fmt_us(vmax))


def _bits(looks: Looks, parts: Parts, info: Mapping[str, ConcatInfo], bits: Mapping[str, float]) -> Iterator[None]:
    yield
    nodes = looks.nodes
    for part in parts:
        for name in part:
            b = bits.get(name)
            base = nodes.get(name)
            if b is None:
                if base is None:
                    nodes[name] = FADED_LOOK
                continue
            base = base or PLAIN
            # On a Concat the figure is its worst member's: the badge says so.
            text = f"worst −{b:.1f} b" if name in info else f"−{b:.1f} b"
            badges = ((Badge(text, BITS_BADGE),) if b >= 0.05 else ()) + base.badges
            nodes[name] = NodeLook(heat_hex(min(b, BITS_MAX) / BITS_MAX, "bits"), badges, base.faded,
                                   2.0 if name in info else 1.0)
        yield
    looks.legend = Legend(Overlay.BITS, "Bits lost by sharing (now, or if shared at the Concat)", "0 bits",
                          f"≥ {BITS_MAX:.0f} bits")


def error_looks(looks: Looks, parts: Parts, report: AccuracyReport | None, local: bool,
                graph: Graph | None = None) -> Iterator[None]:
    """Fill ``looks`` for the Error overlay (a generator, as :func:`fill_looks`).  The
    nodes of a fused chain (Conv -> Sigmoid -> Mul, no Q/DQ inside) take the colour of the
    chain's quantized output; its producer carries the dB badge."""
    what = "Local" if local else "Cumulative"
    if report is None:
        looks.legend = Legend(Overlay.ERROR, "Error: no accuracy check yet (Sensitivity dock › Measure)")
        return
    yield
    figs = report.node_figures()
    val = {n: (t.local_sqnr_db if local else t.sqnr_db) for n, t in figs.items()}
    chained: dict[str, float | None] = {}
    if graph is not None:
        for n, t in figs.items():
            for m in chain_nodes(graph, t.tensor)[1:]:
                if m not in val:
                    chained[m] = val[n]
    lo, hi = error_range(val.values())
    badge_of: dict[str, Badge] = {}
    nodes = looks.nodes
    for part in parts:
        for name in part:
            v = val.get(name)
            base = nodes.get(name, PLAIN)
            c = chained.get(name)
            if v is None and finite(c):  # inside a fused chain: its colour, no badge
                nodes[name] = NodeLook(heat_hex((hi - c) / (hi - lo), "error"), base.badges, base.faded,
                                       base.border_width)
                continue
            if not finite(v):
                if base is PLAIN:
                    nodes[name] = FADED_LOOK
                continue
            text = f"{fmt_num(v, 1)} dB"
            b = badge_of.get(text)
            if b is None:
                b = badge_of[text] = Badge(text, ERROR_BADGE)
            nodes[name] = NodeLook(heat_hex((hi - v) / (hi - lo), "error"), (b, *base.badges), base.faded,
                                   base.border_width)
        yield
    which = "in-sample" if report.in_sample else "held out"
    looks.legend = Legend(Overlay.ERROR, f"{what} SQNR per node, dB ({report.samples} samples, {which})",
                          f"≥ {hi:.0f} dB", f"≤ {lo:.0f} dB")
