"""Colours, sizes and number formats shared by the canvas and the docks, as Qt values.

The decisions live in :mod:`qtquant.app.views.palette` (colours as ``"#rrggbb"``) and
:mod:`qtquant.app.views.fmt`; this module only turns them into ``QColor``.
"""

from __future__ import annotations

from PySide6.QtGui import QColor, QPainter

from ..app.scene import NODE_H, NODE_W, TERM_H, TERM_W
from ..app.views.fmt import fmt_bytes, fmt_ratio, fmt_scale, fmt_us
from ..app.views import palette
from ..app.views.palette import CATEGORY_COLORS, MISMATCH_BANDS, RAMPS, mismatch_band

__all__ = ["CATEGORY_COLORS", "category_color", "MISMATCH_BANDS", "mismatch_band", "mismatch_color",
           "heat_color", "text_color_on", "qcolor", "fmt_us", "fmt_ratio", "fmt_bytes", "fmt_scale", "NODE_W",
           "NODE_H", "TERM_W", "TERM_H", "UNCALIBRATED", "SELECT", "EDGE", "FADED", "paint_ended"]

UNCALIBRATED = QColor(palette.UNCALIBRATED)
SELECT = QColor(palette.SELECT)
EDGE = QColor(palette.EDGE)
FADED = QColor(palette.FADED)


_QCOLORS: dict[str, QColor] = {}


def qcolor(hex_color: str) -> QColor:
    """The QColor of a view-model colour, made once per colour (20,000 looks share a few dozen).
    Shared: callers copy before changing it."""
    c = _QCOLORS.get(hex_color)
    if c is None:
        c = _QCOLORS[hex_color] = QColor(hex_color)
    return c


def category_color(category: str) -> QColor:
    return QColor(CATEGORY_COLORS.get(category, CATEGORY_COLORS["other"]))


def mismatch_color(ratio: float, rescales: int | None = None) -> QColor:
    return QColor(MISMATCH_BANDS[mismatch_band(ratio, rescales)][2])


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


def paint_ended(widget, ev, paint) -> None:
    """``paint(painter, ev)`` on ``widget``, the painter ended here rather than when its Python
    wrapper is freed: a frame kept alive elsewhere (a traceback, a profiler's stack sample)
    would end it later on another thread, after Qt has moved on, and crash Qt."""
    p = QPainter(widget)
    try:
        paint(p, ev)
    finally:
        p.end()
