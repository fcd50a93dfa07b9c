"""Number formats every view shares (a missing or NaN value shows as "—")."""

from __future__ import annotations

import math

__all__ = ["fmt_us", "fmt_bytes", "fmt_ratio", "fmt_scale", "fmt_bits"]


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


def fmt_bits(b: float | None) -> str:
    if b is None:
        return "—"
    return "∞" if not math.isfinite(b) else f"{b:.2f}"
