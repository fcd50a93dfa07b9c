"""Overlay modes: turn analysis results into per-item looks (fills, badges, edge styles).

Pure functions of (graph, Concat analysis, perf result, mode).  The canvas applies the
result in place, so switching modes never touches the layout.  Perf results come from
``qtquant.perf`` when it is installed; :mod:`qtquant.app.views.perfdata` adapts them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from PySide6.QtGui import QColor

from .items import Badge
from ..app.views.perfdata import node_us
from ..vocab import Overlay
from .style import MISMATCH_BANDS, UNCALIBRATED, fmt_us, heat_color, mismatch_band

__all__ = ["Looks", "compute_looks", "fill_looks", "node_bits"]
RESCALE_BADGE = QColor("#c62828")
LATENCY_BADGE = QColor("#023858")
BITS_BADGE = QColor("#7a0177")
FADED_EDGE = QColor("#d5dbe1")


@dataclass
class Looks:
    nodes: dict = field(default_factory=dict)  # name -> kwargs for NodeItem.set_look
    edges: dict = field(default_factory=dict)  # (tensor, dst) -> kwargs for EdgeItem.set_style
    edge_default: dict | None = None
    legend: tuple = (Overlay.NONE, "", "", "")  # (mode, title, lo, hi) for the Legend widget


def rescale_badge(n: int) -> Badge:
    return Badge(f"+{n} rescale", RESCALE_BADGE)


def node_bits(graph, concats) -> dict[str, float]:
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


def _concat_base(c) -> dict:
    band = mismatch_band(c.ratio, c.rescales)
    look = {"fill": QColor(MISMATCH_BANDS[band][2]), "border_width": 2.0, "badges": []}
    if c.rescales:
        look["badges"] = [rescale_badge(c.rescales)]
    return look


def compute_looks(graph, mode: str, concats=None, perf=None) -> Looks:
    looks = Looks()
    for _ in fill_looks(looks, graph, mode, concats, perf):
        pass
    return looks


_STEP = 1000  # nodes between two yields of fill_looks (~3 ms of work in the latency mode)


def fill_looks(looks: Looks, graph, mode: str, concats=None, perf=None, step: int | None = None):
    """:func:`compute_looks` as a generator that fills ``looks`` and yields every ``step``
    nodes, so a 20,000-node graph can be re-coloured across several event-loop turns."""
    step = step or _STEP
    info = {c.node: c for c in concats} if concats is not None else {}
    # Concats first (every mode shows mismatch colour or heat plus the rescale badge).
    for n in graph.concat_nodes():
        c = info.get(n.name)
        looks.nodes[n.name] = _concat_base(c) if c is not None else {"fill": QColor(UNCALIBRATED),
                                                                      "border_width": 2.0}
    rescaled = {}
    for c in info.values():
        band_col = QColor(MISMATCH_BANDS[mismatch_band(c.ratio, c.rescales)][2]).darker(115)
        for m in c.inputs:
            if m.needs_rescale:
                rescaled[(m.tensor, c.node)] = band_col
    for key, col in rescaled.items():
        looks.edges[key] = {"color": col, "width": 2.6}
    yield

    names = list(graph.nodes)
    parts = [names[i:i + step] for i in range(0, len(names), step)]  # a yield after each
    if mode == Overlay.MISMATCH:
        feeders = {m.producer for c in info.values() for m in c.inputs if m.needs_rescale and m.producer}
        nodes = looks.nodes
        for part in parts:
            for name in part:
                if name not in nodes:
                    fed = name in feeders
                    nodes[name] = {"faded": not fed, "border_width": 2.0 if fed else 1.0}
            yield
        looks.edge_default = {"color": FADED_EDGE, "width": 1.0}
        for key, col in rescaled.items():
            looks.edges[key] = {"color": QColor("#d32f2f"), "width": 3.2}
        looks.legend = (Overlay.MISMATCH, "Red edges: Concat inputs that need a rescale", "", "")
    elif mode == Overlay.LATENCY:
        us = node_us(perf) if perf is not None else {}
        if not us:
            looks.legend = (Overlay.LATENCY, "Latency: not simulated yet", "", "")
            return
        yield
        vmax = max(us.values()) or 1.0
        badge_of: dict[str, Badge] = {}  # few distinct texts: one Badge (and text colour) each
        for part in parts:
            for name in part:
                v = us.get(name)
                base = looks.nodes.get(name, {})
                if v is None:
                    looks.nodes[name] = {**base, "faded": True}
                    continue
                badges = list(base.get("badges", ()))
                if v >= 0.005:  # fused ops cost nothing of their own: no "0.00 µs" clutter
                    text = fmt_us(v)
                    b = badge_of.get(text)
                    if b is None:
                        b = badge_of[text] = Badge(text, LATENCY_BADGE)
                    badges.insert(0, b)
                looks.nodes[name] = {**base, "fill": heat_color(math.sqrt(max(v, 0.0) / vmax), "latency"),
                                     "badges": badges}
            yield
        looks.legend = (Overlay.LATENCY, "Latency per node (√ scale)", "0", fmt_us(vmax))
    elif mode == Overlay.BITS:
        bits = node_bits(graph, concats)
        vmax = 8.0
        yield
        for part in parts:
            for name in part:
                b = bits.get(name)
                base = looks.nodes.get(name, {})
                if b is None:
                    if name not in looks.nodes:
                        looks.nodes[name] = {"faded": True}
                    continue
                badges = list(base.get("badges", ()))
                if b >= 0.05:
                    badges.insert(0, Badge(f"−{b:.1f} b", BITS_BADGE))
                looks.nodes[name] = {**base, "fill": heat_color(min(b, vmax) / vmax, "bits"), "badges": badges,
                                     "border_width": 2.0 if name in info else 1.0}
            yield
        looks.legend = (Overlay.BITS, "Bits lost by sharing (now, or if shared at the Concat)", "0 bits",
                        f"≥ {vmax:.0f} bits")
    else:
        looks.legend = (Overlay.NONE, "", "", "")
