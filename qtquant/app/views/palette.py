"""Every colour the views use, as ``"#rrggbb"`` strings, and the arithmetic that picks one.

The canvas, the legend, the docks and the screenshots agree because they all read these; the
GUI only turns a string into its toolkit's colour.
"""

from __future__ import annotations

import math

__all__ = ["CATEGORY_COLORS", "category_hex", "MISMATCH_BANDS", "mismatch_band", "mismatch_hex", "RAMPS",
           "heat_hex", "text_on", "BAND_EDGE_COLORS", "GROUP_COLORS", "group_hex", "UNCALIBRATED", "SELECT",
           "EDGE", "FADED"]

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
    "block": "#f3f5f8",  # a collapsed block of the module hierarchy
}

UNCALIBRATED = "#bdbdbd"
SELECT = "#1565c0"
EDGE = "#8d99a6"
FADED = "#f2f2f2"

# Mismatch bands on a log scale of max scale / min scale.  (upper bound, name, colour)
MISMATCH_BANDS = [
    (1.0 + 1e-6, "no rescale", "#43a047"),  # equal scales, or a float-kept output Concat
    (2.0, "≤ 2×", "#fdd835"),
    (8.0, "≤ 8×", "#fb8c00"),
    (math.inf, "> 8×", "#e53935"),
]
# Each band's colour darkened as Qt's QColor.darker(115) does (value × 100 / 115 in HSV):
# the edges into a mismatched Concat, a shade under its fill.
BAND_EDGE_COLORS = ["#3a8b3e", "#dcbc2e", "#da7a00", "#c7322e"]

# One colour per group, away from the Concat mismatch bands (green, yellow, orange, red)
# and from the op-category pastels, so a hull never reads as a mismatch colour.  Blue,
# the selection colour, comes last.
GROUP_COLORS = ["#8e24aa", "#00897b", "#c2185b", "#3949ab", "#6d4c41", "#00acc1", "#546e7a", "#1e88e5"]

# Sequential ramps for the heat overlays, chosen apart from the mismatch bands (green,
# yellow, orange, red) so a heat colour is never read as a mismatch: latency goes from
# pale to deep blue (ColorBrewer PuBu), bits lost from pale pink to deep purple (RdPu).
RAMPS = {
    "latency": ["#fff7fb", "#ece7f2", "#d0d1e6", "#a6bddb", "#74a9cf", "#3690c0", "#0570b0", "#045a8d", "#023858"],
    # Error overlay: pale at high SQNR, dark red at the lowest (YlOrRd).
    "error": ["#ffffcc", "#ffeda0", "#fed976", "#feb24c", "#fd8d3c", "#fc4e2a", "#e31a1c", "#bd0026", "#800026"],
    "bits": ["#fff7f3", "#fde0dd", "#fcc5c0", "#fa9fb5", "#f768a1", "#dd3497", "#ae017e", "#7a0177", "#49006a"],
    # Compiler cosine: pale at 1.0, deep orange-brown at the log's lowest (Oranges).
    "cosine": ["#fff5eb", "#fee6ce", "#fdd0a2", "#fdae6b", "#fd8d3c", "#f16913", "#d94801", "#a63603", "#7f2704"],
}


def _rgb(hex_color: str) -> tuple[int, int, int]:
    h = hex_color.lstrip("#")
    return int(h[0:2], 16), int(h[2:4], 16), int(h[4:6], 16)


# Parsed once: a latency overlay colours 20,000 nodes per refresh.
_RAMP_RGB = {name: [_rgb(c) for c in stops] for name, stops in RAMPS.items()}


def category_hex(category: str) -> str:
    return CATEGORY_COLORS.get(category, CATEGORY_COLORS["other"])


def group_hex(group_id: int) -> str:
    """Stable per group: ids survive undo/redo (snapshots), so colours do too."""
    return GROUP_COLORS[group_id % len(GROUP_COLORS)]


def mismatch_band(ratio: float, rescales: int | None = None) -> int:
    """0 no rescale, 1 up to 2x, 2 up to 8x, 3 beyond.  A Concat without rescales (equal scales, or
    an output Concat the export keeps in float) is band 0: it costs nothing."""
    if rescales == 0 or not (ratio == ratio) or ratio <= MISMATCH_BANDS[0][0]:
        return 0
    for i, (hi, _, _) in enumerate(MISMATCH_BANDS):
        if ratio <= hi:
            return i
    return len(MISMATCH_BANDS) - 1


def mismatch_hex(ratio: float, rescales: int | None = None) -> str:
    return MISMATCH_BANDS[mismatch_band(ratio, rescales)][2]


def heat_hex(t: float, ramp: str = "latency") -> str:
    """Colour for t in [0, 1] on a heat ramp (NaN -> the faded grey)."""
    if not (t == t):
        return FADED
    stops = _RAMP_RGB[ramp]
    t = min(1.0, max(0.0, t)) * (len(stops) - 1)
    i = min(int(t), len(stops) - 2)
    f = t - i
    a, b = stops[i], stops[i + 1]
    return "#%02x%02x%02x" % tuple(round(a[k] + (b[k] - a[k]) * f) for k in range(3))


def text_on(fill: str) -> str:
    """Readable text colour on ``fill``: white on dark, near-black on light."""
    r, g, b = _rgb(fill)
    lum = (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255
    return "#ffffff" if lum < 0.5 else "#1f2328"
