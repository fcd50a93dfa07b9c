"""Colours, sizes and number formats shared by the canvas and the docks.

Every colour decision lives here so the canvas, the legend, the Concat list and the
screenshots agree.  Colour functions return ``QColor``; the band logic itself is plain
arithmetic (:func:`mismatch_band`) so tests can check it without pixels.
"""

from __future__ import annotations

import math

from PySide6.QtGui import QColor, QPainter

from ..app.scene import NODE_H, NODE_W, TERM_H, TERM_W

__all__ = ["CATEGORY_COLORS", "category_color", "MISMATCH_BANDS", "mismatch_band", "mismatch_color",
           "heat_color", "text_color_on", "fmt_us", "fmt_ratio", "fmt_bytes", "fmt_scale", "NODE_W", "NODE_H", "TERM_W",
           "TERM_H", "UNCALIBRATED", "SELECT", "EDGE", "FADED", "paint_ended"]


# Muted fills by op category (qtquant.ops handler categories): the mismatch and heat
# colours must stand out against them, so they stay light and low in saturation.
CATEGORY_COLORS = {
    "conv": "#cfe0f3",
    "matmul": "#d7d4f0",
    "activation": "#f6e3c8",
    "eltwise": "#d3ece6",
    "reduce": "#e6d5ec",
    "concat": "#e0e0e0",
    "layout": "#eceff1",
    "pool": "#d6edf2",
    "resize": "#dcedd5",
    "shape": "#f4f4f4",
    "unknown": "#f7d9de",
    "other": "#e8e8e8",
    "input": "#455a64",
    "output": "#455a64",
}

UNCALIBRATED = QColor("#bdbdbd")
SELECT = QColor("#1565c0")
EDGE = QColor("#8d99a6")
FADED = QColor("#f2f2f2")

# Mismatch bands on a log scale of max scale / min scale.  (upper bound, name, colour)
MISMATCH_BANDS = [
    (1.0 + 1e-6, "equal", "#43a047"),
    (2.0, "≤ 2×", "#fdd835"),
    (8.0, "≤ 8×", "#fb8c00"),
    (math.inf, "> 8×", "#e53935"),
]


def category_color(category: str) -> QColor:
    return QColor(CATEGORY_COLORS.get(category, CATEGORY_COLORS["other"]))


def mismatch_band(ratio: float, rescales: int | None = None) -> int:
    """0 equal, 1 up to 2x, 2 up to 8x, 3 beyond.  A Concat without rescales is 'equal'."""
    if rescales == 0 or not (ratio == ratio) or ratio <= MISMATCH_BANDS[0][0]:
        return 0
    for i, (hi, _, _) in enumerate(MISMATCH_BANDS):
        if ratio <= hi:
            return i
    return len(MISMATCH_BANDS) - 1


def mismatch_color(ratio: float, rescales: int | None = None) -> QColor:
    return QColor(MISMATCH_BANDS[mismatch_band(ratio, rescales)][2])


# Sequential ramps for the heat overlays, chosen apart from the mismatch bands (green,
# yellow, orange, red) so a heat colour is never read as a mismatch: latency goes from
# pale to deep blue (ColorBrewer PuBu), bits lost from pale pink to deep purple (RdPu).
RAMPS = {
    "latency": ["#fff7fb", "#ece7f2", "#d0d1e6", "#a6bddb", "#74a9cf", "#3690c0", "#0570b0", "#045a8d", "#023858"],
    "bits": ["#fff7f3", "#fde0dd", "#fcc5c0", "#fa9fb5", "#f768a1", "#dd3497", "#ae017e", "#7a0177", "#49006a"],
}


_RAMP_RGB: dict[str, list[tuple[int, int, int]]] = {}


def heat_color(t: float, ramp: str = "latency") -> QColor:
    """Colour for t in [0, 1] on a heat ramp (NaN -> light grey)."""
    if not (t == t):
        return QColor(FADED)
    stops = _RAMP_RGB.get(ramp)
    if stops is None:  # parsed once: a latency overlay colours 20,000 nodes per refresh
        stops = _RAMP_RGB[ramp] = [QColor(c).getRgb()[:3] for c in RAMPS[ramp]]
    t = min(1.0, max(0.0, t)) * (len(stops) - 1)
    i = min(int(t), len(stops) - 2)
    f = t - i
    a, b = stops[i], stops[i + 1]
    return QColor(round(a[0] + (b[0] - a[0]) * f), round(a[1] + (b[1] - a[1]) * f), round(a[2] + (b[2] - a[2]) * f))


def text_color_on(fill: QColor) -> QColor:
    lum = 0.2126 * fill.redF() + 0.7152 * fill.greenF() + 0.0722 * fill.blueF()
    return QColor("#ffffff") if lum < 0.5 else QColor("#1f2328")


def fmt_us(us: float | None) -> str:
    if us is None or not (us == us):
        return "—"
    if us >= 1000:
        return f"{us / 1000:.2f} ms"
    if us >= 100:
        return f"{us:.0f} µs"
    if us >= 10:
        return f"{us:.1f} µs"
    return f"{us:.2f} µs"


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "—"
    for unit, k in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= k:
            return f"{n / k:.2f} {unit}"
    return f"{n:.0f} B"


def fmt_ratio(r: float | None) -> str:
    if r is None or not (r == r):
        return "—"
    return f"{r:.0f}×" if r >= 100 else f"{r:.3g}×"


def fmt_scale(s: float | None) -> str:
    return "—" if s is None else f"{s:.4g}"


def paint_ended(widget, ev, paint) -> None:
    """``paint(painter, ev)`` on ``widget``, the painter ended here rather than when its Python
    wrapper is freed: a frame kept alive elsewhere (a traceback, a profiler's stack sample)
    would end it later on another thread, after Qt has moved on, and crash Qt."""
    p = QPainter(widget)
    try:
        paint(p, ev)
    finally:
        p.end()
