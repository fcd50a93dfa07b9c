"""What a fidelity check reports (:func:`qtquant.fidelity.measure.measure_session`): per output and per
slice, before and after the session's groups, the group members' own SQNR, and the report's
text and JSON."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from . import metrics
from .metrics import FLOAT_MODEL, Figure
from ..base.tables import fmt_num, samples_text

__all__ = ["Fidelity", "OutputFidelity", "MemberFidelity"]


@dataclass
class MemberFidelity:
    tensor: str
    group: int | None
    bits_lost: float
    before_sqnr_db: float
    sqnr_db: float


QDQ_VIEW = "the QDQ file's float view (its weights dequantized: a QDQ file has no float original; its scales stand)"


@dataclass
class OutputFidelity:
    """One model output: the whole tensor and, when it is a Concat, each slice."""

    output: str
    whole: Figure
    slices: list[Figure] = field(default_factory=list)

    @property
    def headline(self) -> Figure:
        """The worst measured slice (the whole output when it has no slices)."""
        measured = [s for s in self.slices if s.measured]
        if measured:
            return min(measured, key=lambda s: s.sqnr_db if s.sqnr_db is not None else math.inf)  # (measured: set)
        return self.whole

    def to_dict(self) -> dict:
        """The headline's figures at the top (what a reader of ``sqnr_db`` must see: the worst
        slice), the whole tensor and each slice below."""
        return {**self.headline.to_dict(), "headline": self.headline.label, "whole": self.whole.to_dict(),
                "slices": [s.to_dict() for s in self.slices]}


@dataclass
class Fidelity:
    outputs: list[str]
    after: dict[str, OutputFidelity]
    before: dict[str, OutputFidelity]
    members: list[MemberFidelity] = field(default_factory=list)
    samples: int = 0
    in_sample: bool = False
    revision: int = 0  # the session revision it was measured at (the GUI drops stale results)
    runtime: str = ""
    findings: list[str] = field(default_factory=list)
    float_outputs: list[str] = field(default_factory=list)  # why outputs stayed float (auto mode)
    reference: str = FLOAT_MODEL  # what the figures are measured against (QDQ_VIEW for a QDQ file)
    # Where this CPU's default onnxruntime int8 kernels would give other headlines: one line, both figures.
    host_default: str = ""
    # output -> (elements where the float reference fires, elements in all) for an output that fires on
    # under SPARSE_SHARE of them: a detector that finds nothing on the check samples (PP-OCR on photos
    # without text), whose figure then rests on a few false positives.
    sparse: dict = field(default_factory=dict)
    # Where the check's time went, ms per step (benchmarks/gui_refresh.py prints it): not a figure,
    # never in the report, and left out of equality.
    trace: dict = field(default_factory=dict, compare=False, repr=False)

    # Headline figures per output: the worst slice's.  NaN where there is no signal.
    def _headlines(self, side: dict, attr: str) -> dict[str, float]:
        return {o: _val(getattr(side[o].headline, attr)) for o in self.outputs}

    sqnr_db = property(lambda self: self._headlines(self.after, "sqnr_db"))
    cosine = property(lambda self: self._headlines(self.after, "cosine"))
    before_sqnr_db = property(lambda self: self._headlines(self.before, "sqnr_db"))
    before_cosine = property(lambda self: self._headlines(self.before, "cosine"))

    @property
    def sample_text(self) -> str:
        return samples_text(self.samples, self.in_sample)

    def headline_text(self, output: str, before: bool = False) -> str:
        """'output0[4:22] 0.0 dB', or the no-signal sentence."""
        h = (self.before if before else self.after)[output].headline
        return f"{h.label}: {h.word}" if h.no_signal else f"{h.label} {_f(h.sqnr_db)} dB"

    def exported_text(self) -> str:
        """The exported model's accuracy in one line, per output and slice, with the sample count: the
        number a user pastes to the team ("accuracy of the exported model on 7 samples in-sample
        (SQNR vs the float model): y1 31.20 dB; y2 12.70 dB, worst slice y2[0:4] (y2[0:4] 12.70, y2[4:8] 30.10)")."""
        parts = []
        for o in self.outputs:
            a = self.after[o]
            h = a.headline
            t = f"{o} {a.whole.word}" if a.whole.no_signal else f"{o} {_f(a.whole.sqnr_db)} dB"
            if a.slices:
                t += f", worst slice {self.headline_text(o)} (" + ", ".join(
                    f"{x.label} {x.word if x.no_signal else _f(x.sqnr_db)}" for x in a.slices) + ")"
            elif h.no_signal:
                t = f"{o}: {h.word}"
            parts.append(t)
        return (f"accuracy of the exported model on {self.sample_text} (SQNR vs {self.reference}): "
                + "; ".join(parts))

    def sparse_notes(self) -> list[str]:
        """A sentence per output whose float reference fires on almost none of its elements."""
        out = []
        for o, (hit, n) in self.sparse.items():
            out.append(f"{o}: the float model fires on only {hit} of its {n} elements ({100 * hit / max(n, 1):.3f}%) "
                       f"on the check samples, so its figure rests on those few (for a detector: the samples show "
                       "little of what it detects, e.g. no text for an OCR detector); calibrate and check on "
                       "representative data")
        return out

    def low_outputs(self) -> list[str]:
        """A sentence per output whose headline is lost (:attr:`~qtquant.fidelity.metrics.Figure.lost`) after the
        groups: a figure such as "1.3 dB" reads as a number among others, where it says the output
        is lost."""
        out = []
        for o in self.outputs:
            h = self.after[o].headline
            if h.lost:
                out.append(f"{h.label} at {_f(h.sqnr_db)} dB is under {metrics.LOW_SQNR_DB:g} dB: its error is "
                           "more than a tenth of its signal, so the quantized output barely follows the float one; "
                           "`qtquant accuracy` (the app's Sensitivity dock) shows where the cumulative SQNR falls "
                           "and which nodes to keep in higher precision")
        return out

    def to_dict(self) -> dict:
        def num(x):
            return x if x is not None and math.isfinite(x) else None

        return {
            "samples": self.samples, "in_sample": self.in_sample, "held_out": not self.in_sample,
            "runtime": self.runtime, "reference": self.reference,
            "outputs": {o: {**self.after[o].to_dict(), "before": self.before[o].to_dict()}
                        for o in self.outputs},
            "findings": list(self.findings),
            "host_default": self.host_default or None,
            "float_outputs": list(self.float_outputs),
            "sparse_outputs": {o: {"firing": hit, "elements": n} for o, (hit, n) in self.sparse.items()},
            "members": [{"tensor": m.tensor, "group": m.group, "bits_lost": num(m.bits_lost),
                         "before_sqnr_db": num(m.before_sqnr_db), "sqnr_db": num(m.sqnr_db)}
                        for m in self.members],
        }

    def text(self) -> str:
        rows, notes = [], []
        for o in self.outputs:
            a, b = self.after[o], self.before[o]
            for k, (fa, fb) in enumerate([(a.whole, b.whole)] + list(zip(a.slices, b.slices))):
                rows.append((("  " if k else "") + fa.label, _cell(fb), _cell(fa), _change(fb, fa)))
                if fa.no_signal:
                    notes.append(f"{fa.label}: {fa.no_signal}")
        from ..base.tables import text_table

        lines = [f"fidelity of the exported model ({self.runtime}) on {self.sample_text}: "
                 f"SQNR dB / cosine vs {self.reference}; an output's headline is its worst slice",
                 text_table(rows, ("output", "before", "after", "change"), max_width=48)]
        for o in self.outputs:
            if self.after[o].slices:
                lines.append(f"headline {o}: {self.headline_text(o, True)} -> {self.headline_text(o)}")
        lines += notes
        lines += [f"low: {t}" for t in self.low_outputs()]
        lines += [f"sparse: {t}" for t in self.sparse_notes()]
        lines += [f"finding: {f}" for f in self.findings]
        lines += [self.host_default] if self.host_default else []
        lines += [f"float output: {f}" for f in self.float_outputs]
        if self.members:
            lines.append("group members: quantization SQNR dB, own scale -> shared scale")
            for m in self.members:
                lines.append(f"  g{m.group} {m.tensor}: {_f(m.before_sqnr_db)} -> {_f(m.sqnr_db)} "
                             f"({m.bits_lost:.2f} bits lost)")
        return "\n".join(lines)


def _val(x):
    return float("nan") if x is None else x


def _cell(f: Figure) -> str:
    return f.word if f.no_signal else f"{_f(f.sqnr_db)} / {f.cosine:.5f}"


def _change(b: Figure, a: Figure) -> str:
    if b.no_signal or a.no_signal:
        return ""
    after, before = a.sqnr_db, b.sqnr_db
    return _f(after - before if after is not None and before is not None and math.isfinite(after)
              and math.isfinite(before) else math.nan, signed=True)


def _f(x: float | None, signed: bool = False) -> str:
    return fmt_num(x, signed=signed)
