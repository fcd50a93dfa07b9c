"""What the GUI shows of the accuracy debugger (Qt-free): the Error overlay's looks, the
sensitivity dock's rows, the inspector's two SQNR figures, the trade-off plot's points."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...base.tables import fmt_num
from ...base.vocab import Overlay, RankedBy
from .palette import heat_hex

__all__ = ["error_looks", "error_range", "SensitivityRow", "sensitivity_rows", "tensor_error_text",
           "status_text", "TradeoffPoint", "tradeoff_points", "ERROR_SPAN_DB", "SENSITIVITY_HEADERS",
           "sensitivity_headers"]

ERROR_SPAN_DB = 10.0  # the colour ramp spans at least this many dB
ERROR_BADGE = "#800026"
SENSITIVITY_HEADERS = ("Node", "Precision", "Gain dB", "How", "Worst slice after", "Latency µs")


def sensitivity_headers(report) -> tuple[str, ...]:
    """:data:`SENSITIVITY_HEADERS`, the gain's unit the report's (pp where it ranks by agreement)."""
    if report is None or report.ranked_by is RankedBy.SQNR:
        return SENSITIVITY_HEADERS
    return tuple(f"Gain {report.ranked_by.gain_unit}" if h == "Gain dB" else h for h in SENSITIVITY_HEADERS)


def _finite(x) -> bool:
    return x is not None and isinstance(x, float) and math.isfinite(x)


def error_range(values) -> tuple[float, float]:
    """(lowest, highest) dB the ramp spans: the measured values, at least :data:`ERROR_SPAN_DB` wide."""
    vals = [v for v in values if _finite(v)]
    if not vals:
        return 0.0, ERROR_SPAN_DB
    lo, hi = max(0.0, min(vals)), min(60.0, max(vals))
    if hi - lo < ERROR_SPAN_DB:
        hi = lo + ERROR_SPAN_DB
    return lo, hi


def error_looks(looks, parts, report, local: bool, graph=None):
    """Fill ``looks`` for the Error overlay (a generator, as :func:`~.looks.fill_looks`).  The
    nodes of a fused chain (Conv -> Sigmoid -> Mul, no Q/DQ inside) take the colour of the
    chain's quantized output; its producer carries the dB badge."""
    from .looks import FADED_LOOK, PLAIN, Badge, Legend, NodeLook

    what = "Local" if local else "Cumulative"
    if report is None:
        looks.legend = Legend(Overlay.ERROR, "Error: no accuracy check yet (Sensitivity dock › Measure)")
        return
    yield
    figs = report.node_figures()
    val = {n: (t.local_sqnr_db if local else t.sqnr_db) for n, t in figs.items()}
    chained = {}
    if graph is not None:
        from ...quant.precision import chain_nodes

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
            if v is None and _finite(chained.get(name)):  # inside a fused chain: its colour, no badge
                c = chained[name]
                nodes[name] = NodeLook(heat_hex((hi - c) / (hi - lo), "error"), base.badges, base.faded,
                                       base.border_width)
                continue
            if not _finite(v):
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
    n = report.samples
    which = "in-sample" if report.in_sample else "held out"
    looks.legend = Legend(Overlay.ERROR, f"{what} SQNR per node, dB ({n} samples, {which})", f"≥ {hi:.0f} dB",
                          f"≤ {lo:.0f} dB")


@dataclass(frozen=True)
class SensitivityRow:
    node: str
    cells: tuple[str, ...]  # as SENSITIVITY_HEADERS
    keys: tuple  # per column: what the column sorts by
    measured: bool


def _num_text(x, signed=False) -> str:
    if not _finite(x):
        return "n/a"
    return fmt_num(x, signed=signed)


def sensitivity_rows(report) -> list[SensitivityRow]:
    rows = []
    for s in report.sensitivity if report is not None else ():
        gain = s.gain if _finite(s.gain) else -math.inf
        after = s.after_text()
        lat = s.latency_delta_us
        cells = (s.node, s.precision.value, _num_text(s.gain, True), "estimate" if s.estimate else "measured",
                 after, "n/a" if lat is None else f"{lat:+.1f}")
        keys = (s.node, s.precision.value, gain, 0 if s.estimate else 1,
                s.worst if _finite(s.worst) else -math.inf, lat if lat is not None else math.inf)
        rows.append(SensitivityRow(s.node, cells, keys, not s.estimate))
    return rows


def tensor_error_text(report, tensor: str) -> str:
    """'SQNR 12.46 dB cumulative, 29.00 dB local (7 samples in-sample …)', or '' when unmeasured."""
    t = report.tensor(tensor) if report is not None else None
    if t is None:
        return ""
    local = "kept in float" if t.local_sqnr_db is None else f"{_num_text(t.local_sqnr_db)} dB local"
    return f"SQNR {_num_text(t.sqnr_db)} dB cumulative, {local} ({report.sample_text})"


def status_text(report, stale: bool = False) -> str:
    if report is None:
        return "No accuracy check yet: Measure runs it on the check samples (a minute on a small detector)."
    n = len(report.sensitivity)
    m = sum(1 for s in report.sensitivity if not s.estimate)
    if report.ranked_by is RankedBy.AGREEMENT:  # integer outputs only: ranked by how often they agree
        label, share = report.base.worst_agreement
        worst = f"none (integer outputs); least agreeing {label} {RankedBy.AGREEMENT.value_text(share)}"
    else:
        worst = f"{report.base.worst_label or 'no slice measured'} {_num_text(report.base.worst_db)} dB"
    spread = f"; {report.no_single_fix}" if report.no_single_fix else ""
    return (f"{report.sample_text}; worst slice {worst}; {n} nodes ranked, {m} measured by a real "
            f"export{spread}" + ("; stale: the model changed since" if stale else ""))


@dataclass(frozen=True)
class TradeoffPoint:
    removed: int  # rescales removed
    worst_db: float
    accepted: bool
    concat: str


def tradeoff_points(share_report) -> list[TradeoffPoint]:
    return [TradeoffPoint(s.removed, s.worst_db, s.accepted, s.concat) for s in share_report.steps]
