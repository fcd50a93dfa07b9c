"""The Concat table and the model summary: what the Concats and Model docks show."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from ...quant.concat import rescale_node_names
from ...files.report import dtype_note, qdq_file_note
from ...model.shapes import format_shape
from ...base.vocab import ConcatScaleRule
from ..options import concat_rule
from .compiler import compiler_reconciliation, log_cell, log_tooltip
from .fmt import fmt_bits, fmt_ratio, fmt_us
from .palette import mismatch_hex
from .perfdata import rescale_us_by_concat

if TYPE_CHECKING:
    from ...horizon.reconcile import ConcatReconciliation
    from ...quant.concat import ConcatInfo
    from ..session import Session

__all__ = ["CONCAT_HEADERS", "CONCAT_TIPS", "ConcatRow", "concat_rows", "concat_status", "ModelInfoView",
           "model_info"]

CONCAT_HEADERS = ("Concat", "In", "Ratio", "Resc.", "Bits", "Gain", "Log")
CONCAT_TIPS = ("Concat node", "number of inputs", "largest scale / smallest scale over inputs and output",
               "rescale ops the compiler inserts", "worst bits an input loses if all inputs share one scale",
               "latency saved if the inputs share one scale (rescale cost)",
               "inputs the compile log requantizes; = qtquant predicts the same, −N it misses N, +N it adds N")


_CONCAT_TAIL = re.compile(r"/Concat(_\d+)?$")


def concat_label(name: str) -> str:
    """A Concat's name as the narrow list shows it: a trailing "/Concat" says nothing in a list of
    Concats, and eliding the whole name showed "…/Concat" on every row of a YOLO, so it becomes "…"
    ("/model.22/Concat_3" -> "/model.22/…_3"); the whole name is in the tooltip."""
    m = _CONCAT_TAIL.search(name)
    return name[:m.start()] + "/…" + (m.group(1) or "") if m and m.start() > 0 else name


@dataclass(frozen=True)
class ConcatRow:
    """One Concat.  The texts are formatted on first use: a table with 2,000 Concats asks
    only for the rows on screen."""

    name: str
    inputs: int
    ratio: float
    rescales: int
    worst_bits: float  # the worst an input loses if all inputs share one scale
    gain_us: float | None  # the rescale cost sharing would save (None: not simulated)
    info: ConcatInfo = field(repr=False, compare=False)  # for the tooltip
    log: ConcatReconciliation | None = field(default=None, repr=False, compare=False)  # with a compile log

    @property
    def color(self) -> str:
        return mismatch_hex(self.ratio, self.rescales)

    def sort_key(self, column: int) -> float | str:
        logged = None if self.log is None else float(len(self.log.compiler_list))
        v = (self.name, self.inputs, self.ratio, self.rescales, self.worst_bits, self.gain_us, logged)[column]
        if v is None:
            return -1.0
        return v if not isinstance(v, float) or math.isfinite(v) else 1e30

    @cached_property
    def cells(self) -> tuple[str, ...]:
        return (concat_label(self.name), str(self.inputs), fmt_ratio(self.ratio), str(self.rescales),
                fmt_bits(self.worst_bits), fmt_us(self.gain_us), log_cell(self.log))

    @cached_property
    def tooltip(self) -> str:
        info = self.info
        lines = [f"in {m.index}: {m.tensor}  scale {m.scale:.4g}"
                 + ("  (rescale: " + " / ".join(rescale_node_names(info.node, m.tensor, m.index)) + ")"
                    if m.needs_rescale else "")
                 + ("  (the output takes this scale)" if m.index == info.reference_input and not info.output_float
                    else "")
                 + ("  (written at the output's scale by its producer)" if m.index in info.written else "")
                 for m in info.inputs if m.scale]
        if info.export_float:  # a ratio with no rescale: say why
            lines.append("the export leaves the output in float: the inputs keep their own scales, none is rescaled")
        lines += log_tooltip(self.log)
        # The name first: a narrow list elides it to its last characters
        return "\n".join([self.name, *lines])


# What the model-info panel says of the march's Concat rule (nothing for a plain own scale).
_RULE_SHOWN = {
    ConcatScaleRule.WIDEST_INPUT: ", Concat output: widest input's scale",
    ConcatScaleRule.PRODUCERS_WRITE: ", Concat output: its own scale, written by inputs made for it alone",
}


def _concats(session: Session | None) -> list[ConcatInfo] | None:
    return session.concats() if session is not None and session.ready else None


def concat_rows(session: Session | None) -> list[ConcatRow]:
    """In the analysis' order (the table sorts); empty before calibration."""
    perf = session.perf.value if session is not None and session.perf is not None else None
    gains = rescale_us_by_concat(perf)
    cs = _concats(session) or []
    rec = compiler_reconciliation(session, cs) if cs else None
    return [ConcatRow(c.node, len(c.inputs), c.ratio, c.rescales,
                      max((m.bits_lost_if_shared for m in c.inputs if not m.constant), default=0.0),
                      gains.get(c.node), c, rec.of(c.node) if rec is not None else None) for c in cs]


def _totals(cs: Sequence[ConcatInfo]) -> tuple[int, int, int]:
    return len(cs), sum(1 for c in cs if c.rescales), sum(c.rescales for c in cs)


def concat_status(session: Session | None) -> str:
    """The line under the table."""
    if session is None:
        return ""
    cs = _concats(session)
    if cs is None:
        return "Concat scales appear when calibration finishes."
    n, mismatched, rescales = _totals(cs)
    return f"{n} Concats, {mismatched} mismatched, {rescales} rescales. Click a row to jump to it."


@dataclass(frozen=True)
class ModelInfoView:
    model: str = "—"
    model_tip: str = ""
    nodes: str = "—"
    inputs: str = "—"
    quantization: str = "—"
    quantization_tip: str = ""
    calibration: str = "—"
    calibration_tip: str = ""
    concats: str = "—"


def model_info(session: Session | None) -> ModelInfoView:
    if session is None:
        return ModelInfoView()
    g, o = session.graph, session.options
    cal = session.calibration
    calibration_tip = ""
    if session.quantized_file:
        calibration = "scales read from the file"
    elif cal is None:
        calibration = "not calibrated yet"
    else:
        # Both counts, as the accuracy check defines them: "5 samples" for a folder of 7 photos
        # said nothing about the 2 held back for the check.  Short, for the dock's width: the
        # source by its name, in full in the tooltip.
        held = max(cal.held_back, cal.check_samples)
        check = (", in-sample check" if cal.in_sample and cal.check_samples else
                 f" + {held} held out" + (f" (check on {cal.check_samples})" if held > cal.check_samples else "")
                 if cal.check_samples else ", no check")
        calibration = f"{cal.method_text}, {cal.batches} samples{check} ({cal.data_label(short=True)})"
        calibration_tip = (f"{cal.batches} calibration samples from {cal.data_label()}; the accuracy check runs on "
                           f"{cal.check_description}")
        if cal.search is not None:
            calibration_tip += f"\n{cal.search.summary()}"
    if session.compiler_log is not None:
        m = session.compiler_log
        name = m.log.path.rsplit("/", 1)[-1]
        given = sum(1 for t in g.observed_tensors if t in m.thresholds)
        calibration += f"; compile log: {given} scales" if session.compiler_ranges else "; compile log shown"
        calibration_tip += (f"\n{name}: " + (f"the compiler's thresholds fix {given} of {len(g.observed_tensors)} "
                                              "observed tensors' scales" if session.compiler_ranges else
                                              "shown beside qtquant's own scales")).lstrip("\n")
    invalid = qdq_file_note(g)  # the file's opset, which opening may have raised, is the one it breaks
    cs = _concats(session)
    if cs is None:
        concats = f"{len(g.concat_nodes())} (analysis after calibration)"
    else:
        n, mismatched, rescales = _totals(cs)
        concats = f"{n}, {mismatched} mismatched, {rescales} rescales"
    return ModelInfoView(
        model=(g.path.name if g.path else "(in memory)") + (f" (cut at {len(g.cut)} tensors)" if g.cut else "")
        + (f" ({g.source_dtype}, read as float32)" if g.source_dtype is not None else ""),
        model_tip=(str(g.path) if g.path else "") + ("\ncut at: " + ", ".join(g.cut) if g.cut else "")
        + (f"\n{dtype_note(g)}" if g.source_dtype is not None else ""),
        nodes=f"{len(g.nodes)} ops, {len(g.tensors)} tensors, opset {g.opset}"
              + (f" (raised from {g.source_opset})" if g.source_opset is not None else ""),
        inputs=", ".join(f"{k} {format_shape(v)}" for k, v in g.input_shapes.items()) or "—",
        quantization=("QDQ file" + (f" (invalid at opset {g.qdq_info.opset})" if invalid and g.qdq_info else "") + ", "
                      if session.quantized_file else "float model, ")
        + f"{o.scheme.value}, policy {o.policy.value}"
        + _RULE_SHOWN.get(concat_rule(o), ""),
        quantization_tip=invalid, calibration=calibration, calibration_tip=calibration_tip,
        concats=concats)
