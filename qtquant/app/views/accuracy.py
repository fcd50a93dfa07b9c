"""What the GUI shows of the accuracy debugger (Qt-free): the Error overlay's looks, the
sensitivity dock's rows, the inspector's two SQNR figures, the trade-off plot's points."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeGuard

from ...base.tables import fmt_num
from ...base.vocab import Precision, RankedBy

if TYPE_CHECKING:
    from ...fidelity.accuracy.report import AccuracyReport
    from ...fidelity.accuracy.share import SqnrShareReport

__all__ = ["error_range", "finite", "SensitivityRow", "sensitivity_rows", "tensor_error_text",
           "status_text", "TradeoffPoint", "tradeoff_points", "ERROR_SPAN_DB", "SENSITIVITY_HEADERS",
           "sensitivity_headers", "PER_US_COLUMN"]

ERROR_SPAN_DB = 10.0  # the colour ramp spans at least this many dB
ERROR_BADGE = "#800026"
SENSITIVITY_HEADERS = ("Node", "Precision", "Gain dB", "How", "Worst slice after", "Latency µs", "dB/µs")
PER_US_COLUMN = 6  # the ranking's order: the dock sorts by it, highest first


def sensitivity_headers(report: AccuracyReport | None) -> tuple[str, ...]:
    """:data:`SENSITIVITY_HEADERS`, the gain's unit the report's (pp where it ranks by agreement)."""
    if report is None or report.ranked_by is RankedBy.SQNR:
        return SENSITIVITY_HEADERS
    unit = report.ranked_by.gain_unit
    return tuple(f"Gain {unit}" if h == "Gain dB" else f"{unit}/µs" if h == "dB/µs" else h
                 for h in SENSITIVITY_HEADERS)


def finite(x: object) -> TypeGuard[float]:
    return x is not None and isinstance(x, float) and math.isfinite(x)


def error_range(values: Iterable[float | None]) -> tuple[float, float]:
    """(lowest, highest) dB the ramp spans: the measured values, at least :data:`ERROR_SPAN_DB` wide."""
    vals = [v for v in values if finite(v)]
    if not vals:
        return 0.0, ERROR_SPAN_DB
    lo, hi = max(0.0, min(vals)), min(60.0, max(vals))
    if hi - lo < ERROR_SPAN_DB:
        hi = lo + ERROR_SPAN_DB
    return lo, hi


@dataclass(frozen=True)
class SensitivityRow:
    node: str
    cells: tuple[str, ...]  # as SENSITIVITY_HEADERS
    keys: tuple[str | float, ...]  # per column: what the column sorts by
    measured: bool
    precision: Precision = Precision.FLOAT
    tensors: tuple[str, ...] = ()  # what applying the row sets to ``precision``

    @property
    def apply_text(self) -> str:
        """The command's (and the menu entry's) words: "add_spike: int16", "Keep add_spike in float"."""
        if self.precision is Precision.FLOAT:
            return f"Keep {self.node} in float"
        return f"{self.node}: {self.precision.value}"


def _num_text(x: float | None, signed: bool = False) -> str:
    if not finite(x):
        return "n/a"
    return fmt_num(x, signed=signed)


def sensitivity_rows(report: AccuracyReport | None) -> list[SensitivityRow]:
    """One row per candidate, in the ranking's order; the dB/µs column sorts in that order too."""
    from ...fidelity.accuracy.report import latency_text, per_us_text

    rows: list[SensitivityRow] = []
    cands = report.sensitivity if report is not None else []
    for k, s in enumerate(cands):
        gain = s.gain if finite(s.gain) else -math.inf
        after = s.after_text()
        lat = s.latency_delta_us
        cells = (s.node, s.precision.value, _num_text(s.gain, True), "estimate" if s.estimate else "measured",
                 after, latency_text(lat), per_us_text(s))
        keys = (s.node, s.precision.value, gain, 0 if s.estimate else 1,
                s.worst if finite(s.worst) else -math.inf, lat if lat is not None else math.inf, len(cands) - k)
        rows.append(SensitivityRow(s.node, cells, keys, not s.estimate, s.precision, tuple(s.tensors)))
    return rows


def tensor_error_text(report: AccuracyReport | None, tensor: str) -> str:
    """'SQNR 12.46 dB cumulative, 29.00 dB local (7 samples in-sample …)', or '' when unmeasured."""
    t = report.tensor(tensor) if report is not None else None
    if report is None or t is None:
        return ""
    local = "kept in float" if t.local_sqnr_db is None else f"{_num_text(t.local_sqnr_db)} dB local"
    return f"SQNR {_num_text(t.sqnr_db)} dB cumulative, {local} ({report.sample_text})"


def status_text(report: AccuracyReport | None, stale: bool = False) -> str:
    if report is None:
        return "No accuracy check yet: Measure runs it on the check samples (a minute on a small detector)."
    n = len({s.node for s in report.sensitivity})
    m = sum(1 for s in report.sensitivity if not s.estimate)
    agreement = report.base.worst_agreement  # set whenever the ranking is by agreement
    if report.ranked_by is RankedBy.AGREEMENT and agreement is not None:  # integer outputs only
        label, share = agreement
        worst = f"none (integer outputs); least agreeing {label} {RankedBy.AGREEMENT.value_text(share)}"
    else:
        worst = f"{report.base.worst_label or 'no slice measured'} {_num_text(report.base.worst_db)} dB"
    spread = f"; {report.no_single_fix}" if report.no_single_fix else ""
    return (f"{report.sample_text}; worst slice {worst}; {n} nodes ranked in int16 and float by gain per µs, "
            f"{m} candidates measured by a real export{spread}" + ("; stale: the model changed since" if stale else ""))


@dataclass(frozen=True)
class TradeoffPoint:
    removed: int  # rescales removed
    worst_db: float
    accepted: bool
    concat: str


def tradeoff_points(share_report: SqnrShareReport) -> list[TradeoffPoint]:
    return [TradeoffPoint(s.removed, s.worst_db, s.accepted, s.concat) for s in share_report.steps]
