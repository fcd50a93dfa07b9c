"""The measuring bench of the accuracy debugger: one float reference, many QDQ variants.

A :class:`Bench` holds the session's check samples (held out from calibration, or the
calibration samples themselves; every figure says which) and the float model's outputs on
them, computed once.  :meth:`Bench.measure` builds the QDQ model the exporter would write for
a domain map, with some activations left in float, runs it in onnxruntime at default session
options (Q/DQ fused into int8 kernels, as a user runs the file) and reduces each output and
each output slice to :class:`~qtquant.fidelity.metrics.ErrorSums`: the same figures, the same worst-slice
headline and the same no-signal sentences as the fidelity check (:mod:`qtquant.fidelity.measure`).

A variant's "worst slice" is the lowest measured SQNR over every slice of every float output
(the whole output where it has no slices).  Integer outputs have no SQNR; the least-agreeing of
them (the lowest share of elements equal to the float model's) is kept beside it, which the
sensitivity ranking uses where a model has no float output.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import math
from dataclasses import dataclass

from ...base.errors import BadInputError
from ..measure import OutputFidelity, output_figures, run_feeds, checked_outputs_of, runtime_text
from ...quant.outputs import OutputMode, float_output_tensors, output_slices
from ...model.runtime import with_outputs
from ...base.tables import samples_text
from ...base.vocab import Blank

if TYPE_CHECKING:
    from ...calib.state import SessionState

__all__ = ["Bench", "Variant", "worst_of", "worst_agreement"]


@dataclass
class Variant:
    """One measured QDQ model: figures per output and its worst slice."""

    outputs: dict[str, OutputFidelity]
    worst_label: str
    worst_db: float  # NaN when no slice carries signal
    # (output, % of its elements equal to the float model's) of the least-agreeing integer output
    worst_agreement: tuple[str, float] | None = None

    @property
    def agreement_label(self) -> str:
        """The least-agreeing integer output ("" where there is none)."""
        return self.worst_agreement[0] if self.worst_agreement is not None else ""

    def rows(self) -> list[dict]:
        """``[{"output", "slice", "sqnr_db", "said"}]``: every measured part (the whole output, then its
        slices); ``said``: the word a part without a number gets ("no signal", "16/16 equal"), else ""."""
        out = []
        for o, f in self.outputs.items():
            for part in [f.whole, *f.slices] if f.slices else [f.whole]:
                out.append({"output": o, "slice": part.label,
                            "sqnr_db": None if part.no_signal or part.sqnr_db is None else _num(part.sqnr_db),
                            "said": part.word})
        return out


def _num(x: float):
    if math.isfinite(x):
        return round(x, 4)
    return None if math.isnan(x) else ("inf" if x > 0 else "-inf")


def worst_of(outputs: dict[str, OutputFidelity]) -> tuple[str, float]:
    best = None
    for f in outputs.values():
        h = f.headline
        if h.measured and h.sqnr_db is not None and (best is None or h.sqnr_db < best[1]):
            best = (h.label, h.sqnr_db)
    return best if best is not None else ("", math.nan)


def worst_agreement(outputs: dict[str, OutputFidelity]) -> tuple[str, float] | None:
    """(label, percent) of the integer output whose elements equal the float model's least often,
    or None where the model has none."""
    found = [(f.whole.label, 100.0 * f.whole.agreement) for f in outputs.values()
             if f.whole.blank is Blank.AGREEMENT and f.whole.agreement is not None]
    return min(found, key=lambda x: x[1]) if found else None


class Bench:
    """Check samples, the float reference, and the export's own float outputs, for one session."""

    def __init__(self, session: SessionState, *, output_mode: OutputMode = OutputMode.AUTO, cancel=None):
        cal = session.calibration
        if cal is None or not cal.holdout:
            raise BadInputError("the accuracy check needs check samples (held-back or in-sample); calibrate first")
        self.feeds = list(cal.holdout)
        self.session = session
        self.graph = session.graph
        self.cancel = cancel
        self.samples = len(self.feeds)
        self.in_sample = cal.in_sample
        self.ranges = cal.ranges
        self.outs = checked_outputs_of(self.graph)
        self.slices = output_slices(self.graph)
        limit = session.options.float_output_max_bits_lost
        # What the default export leaves in float (an output Concat that cannot share a scale):
        # every variant keeps it, so variants differ only by what they are asked to change.
        self.export_float, _ = float_output_tensors(self.graph, session.baseline_domains, output_mode, limit)
        self.runtime = runtime_text()
        self._float_out: list[dict[str, Any]] | None = None
        self.runs = 0  # QDQ variants measured (for the reports' "how estimated")

    @property
    def sample_text(self) -> str:
        return samples_text(self.samples, self.in_sample)

    def float_out(self) -> list[dict[str, Any]]:
        if self._float_out is None:
            self._float_out = run_feeds(with_outputs(self.graph.model, self.outs), self.graph.base_dir, self.outs,
                                        self.feeds, self.cancel, "basic")
        return self._float_out

    @property
    def precision(self):
        """The session's precision map (tensor -> int16 / float; int8 elsewhere)."""
        return self.session.options.precision

    def build(self, dm=None, keep_float=(), int16=(), precision=None):
        """The QDQ model the export writes for ``dm``, with ``keep_float`` tensors set to float (as
        ``--keep-float``: no Q/DQ, the producing node's weights float) and ``int16`` ones to int16 (as
        ``--int16``) on top of ``precision`` (default: the session's map)."""
        from ...export.qdq import build_qdq_model
        from ...base.vocab import Precision

        prec = self.precision if precision is None else precision
        if keep_float:
            prec = prec.with_(keep_float, Precision.FLOAT)
        if int16:
            prec = prec.with_(int16, Precision.INT16)
        return build_qdq_model(self.session, dm, float_tensors=frozenset(self.export_float), precision=prec)

    def measure(self, dm=None, keep_float=(), int16=(), precision=None) -> Variant:
        """The exported model for ``dm`` (default: the session's domains) with ``keep_float``
        tensors in float and ``int16`` ones in int16 (on top of ``precision``, default the session's),
        measured at onnxruntime's default options."""
        dm = self.session.domains if dm is None else dm
        model = self.build(dm, keep_float, int16, precision).model
        res = run_feeds(model, self.graph.base_dir, self.outs, self.feeds, self.cancel, "default")
        self.runtime = runtime_text(model)  # a big graph's check leaves out a layout pass: say so
        self.runs += 1
        figs = output_figures(self.ranges, dm, self.slices, self.float_out(), res, self.outs)
        label, db = worst_of(figs)
        return Variant(figs, label, db, worst_agreement(figs))
