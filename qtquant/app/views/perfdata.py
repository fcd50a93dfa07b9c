"""Optional back ends (perf simulator, fidelity) and tolerant readers of their results.

The GUI must run before and without these modules: when ``qtquant.perf`` or
``qtquant.fidelity.measure`` cannot be imported the docks show "—".  The readers accept the
documented result attributes and degrade to empty values if one is missing.
"""

from __future__ import annotations

import math
from functools import partial

__all__ = ["CHART_ROWS", "simulator", "edit_price_of", "confidences", "fidelity_measure", "node_us",
           "rescale_us_by_concat", "rescale_us_for_input", "top_layers", "num", "node_detail", "BOUND_ABBR"]

BOUND_ABBR = {"compute": "cmp", "memory": "mem", "overhead": "ovh"}  # the latency badge's bound tag


def simulator():
    """``qtquant.perf.simulate_session``."""
    from ...perf import simulate_session

    return simulate_session


def confidences(perf, march) -> tuple[str, str, str, str]:
    """(static short, static full, board short, board full): how sure the two latencies are, from the
    march fit's leave-one-out errors (``qtquant.perf.confidence``); empty without it."""
    try:
        from ...perf import load_march
        from ...perf.confidence import confidence
        from ...perf.march import FigureKind
        m = load_march(march)
    except Exception:  # noqa: BLE001 - no simulator, or a march that fails to load: the totals say so
        return "", "", "", ""
    family = getattr(perf, "family", "")
    s, b = confidence(m, family, FigureKind.STATIC), confidence(m, family, FigureKind.BOARD)
    return s.short, s.text, b.short, b.text


def edit_price_of(before, after):
    """``qtquant.perf.price.edit_price(before, after)``, or None (no simulator, no baseline)."""
    if before is None or after is None:
        return None
    try:
        from ...perf.price import edit_price
    except ImportError:
        return None
    try:
        return edit_price(before, after)
    except (AttributeError, TypeError):
        return None


def fidelity_measure(worker=None):
    """``qtquant.fidelity.measure.measure_session`` (following edits: one check per edit comes);
    with ``worker`` (a :class:`~qtquant.app.fidelity_worker.FidelityWorker`), the same check run in
    its child process."""
    from ...fidelity.measure import measure_session

    return worker.measure if worker is not None else partial(measure_session, follow_edits=True)


def num(x) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _us_of(v) -> float | None:
    """A layer entry's latency in µs, whatever shape the entry has."""
    if isinstance(v, (int, float)):
        return num(v)
    for attr in ("us", "latency_us", "total_us", "time_us"):
        if hasattr(v, attr):
            return num(getattr(v, attr))
    if hasattr(v, "ms"):
        x = num(v.ms)
        return x * 1000 if x is not None else None
    if isinstance(v, dict):
        for k in ("us", "latency_us", "total_us"):
            if k in v:
                return num(v[k])
    return None


def node_us(perf) -> dict[str, float]:
    """Latency per graph node in µs (rescale ops folded into their Concat by the simulator)."""
    if perf is None:
        return {}
    try:
        raw = perf.by_node()
    except Exception:
        return {}
    out = {}
    for k, v in dict(raw).items():
        us = _us_of(v)
        if us is not None:
            out[k] = us
    return out


_detail_memo: list = [None, {}]  # (perf, tags) of the latest perf: the perf job computes it once


def node_detail(perf) -> dict[str, str]:
    """Per graph node: what bounds its layer and what was fused into it, as the latency
    badge's tag ("mem", "cmp BN+Relu", "mem SiLU (LUT)"); nodes merged into another layer
    say where ("in /model.0/conv/Conv").  Remembered for the latest ``perf``, as top_layers."""
    if perf is None:
        return {}
    if _detail_memo[0] is perf:
        return _detail_memo[1]
    out = _node_detail(perf)
    _detail_memo[:] = [perf, out]
    return out


def _node_detail(perf) -> dict[str, str]:
    from ...perf.report import short_fused

    out = {}
    for layer in getattr(perf, "layers", None) or ():
        name = getattr(layer, "name", None)
        if name is None or getattr(layer, "is_rescale", False):
            continue
        into = getattr(layer, "fused_into", None)
        if into:
            out[name] = f"in {into}"
            continue
        tag = BOUND_ABBR.get(getattr(layer, "bound", ""), "")
        try:
            fused = short_fused(layer)
        except AttributeError:
            fused = ""
        out[name] = (tag + (" " + fused if fused else "")).strip()
    return out


def rescale_us_by_concat(perf) -> dict[str, float]:
    if perf is None:
        return {}
    try:
        return {k: float(v) for k, v in perf.rescale_cost_by_concat().items()}
    except Exception:
        return {}


def rescale_us_for_input(perf, concat: str, index: int) -> float | None:
    """Cost of the virtual rescale op ``<concat>_rescale_<index>`` if the simulator lists it."""
    if perf is None:
        return None
    want = f"{concat}_rescale_{index}"
    for layer in getattr(perf, "layers", None) or ():
        if getattr(layer, "name", None) == want:
            return _us_of(layer)
    return None


_top_memo: dict = {}  # n -> (perf, rows): the docks ask again on every refresh


CHART_ROWS = 12  # layers in the perf dock's chart


def top_layers(perf, n: int = CHART_ROWS) -> list[tuple[str, str, float]]:
    """(name, op type, µs) of the n slowest layers, rescales included.

    Remembered for the latest ``perf``: 20,000 layers take ~0.1 s, which the perf job spends
    (it calls this once) rather than the GUI thread."""
    hit = _top_memo.get(n)
    if hit is not None and hit[0] is perf:
        return list(hit[1])
    rows = _top_layers(perf, n)
    _top_memo[n] = (perf, rows)
    return list(rows)


def _top_layers(perf, n: int) -> list[tuple[str, str, float]]:
    rows = []
    for layer in getattr(perf, "layers", None) or ():
        us = _us_of(layer)
        if us is None:
            continue
        rows.append((str(getattr(layer, "name", "?")), str(getattr(layer, "op_type", getattr(layer, "op", ""))), us))
    if not rows:
        rows = [(k, "", v) for k, v in node_us(perf).items()]
    rows.sort(key=lambda r: -r[2])
    return rows[:n]
