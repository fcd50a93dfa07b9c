"""Number formats every view shares (a missing or NaN value shows as "—")."""

from __future__ import annotations

import math
from collections.abc import Iterable

__all__ = ["fmt_us", "fmt_bytes", "fmt_ratio", "fmt_scale", "fmt_bits", "scope_of", "in_scope", "distinct_parts"]


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


def scope_of(name: str) -> str:
    """The module path a node or tensor name sits in (exporters name them after it):
    ``/model.4/Concat`` -> ``/model.4/``; "" for a name with none."""
    cut = name.rfind("/")
    return name[:cut + 1] if cut > 0 else ""


def in_scope(name: str, scope: str) -> str:
    """``name`` as read inside ``scope`` (the selected node's module): ``/model.4/m.0/Add_output_0``
    in ``/model.4/`` is ``m.0/Add_output_0``.  A narrow table elided the full names of one Concat's
    inputs to the same "/mod…ut_0"; the part that tells them apart is what is left."""
    return name[len(scope):] if scope and name.startswith(scope) and len(name) > len(scope) else name


def distinct_parts(items: Iterable[object]) -> list[str]:
    """The part of each name that tells it from the others in one list: the shared leading path
    ("/model.1/") and a shared tail ("_output_0") become "…", and of the rest only as many trailing
    path parts as tell the rows apart stay, so a narrow column shows "…Conv…", "…Sigmoid…", "…Mul…"
    where eliding in the middle showed "/mod…ut_0" for every row."""
    import os

    names = [str(n) for n in items]
    if len(set(names)) < 2:
        return names
    pre = os.path.commonprefix(names)
    pre = pre[:pre.rfind("/") + 1]
    if len(pre) < 2 and not all("/" in n.strip("/") for n in names):  # flat names ("conv_a_out") read best whole
        return names
    suf = os.path.commonprefix([n[::-1] for n in names])[::-1]
    cut = suf.find("_")
    suf = suf[cut:] if cut >= 0 and len(suf) - cut >= 3 else ""  # a whole "_output_0", not half a word
    if any(len(n) - len(pre) - len(suf) < 1 for n in names):
        suf = ""
    if any(len(n) - len(pre) - len(suf) < 1 for n in names):
        return names
    mids = [n[len(pre):len(n) - len(suf)] for n in names]
    # The fewest trailing path parts that still tell the rows apart ("Mul", not "act/Mul"): the
    # inspector's column is narrow, and the op at the end is what differs most
    parts = [m.split("/") for m in mids]
    for k in range(1, max(len(p) for p in parts) + 1):
        tails = ["/".join(p[-k:]) for p in parts]
        if len(set(tails)) == len(set(mids)):
            cut = any(len(p) > k for p in parts)
            return [("…" if pre or (cut and len(p) > k) else "") + t + ("…" if suf else "")
                    for p, t in zip(parts, tails)]
    return [("…" if pre else "") + m + ("…" if suf else "") for m in mids]
