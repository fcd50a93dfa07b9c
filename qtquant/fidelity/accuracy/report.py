"""The accuracy report: outputs, per-tensor error and the sensitivity ranking, as ``qtquant
accuracy`` prints it (text or the stable JSON) and the GUI shows it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import math
from dataclasses import dataclass, field

from ..measure import samples_blamed
from ..metrics import LOW_SQNR_DB
from ...quant.outputs import OutputMode
from ...base.tables import fmt_num as _f, samples_text
from ...base.vocab import Blank, RankedBy
from .check import Bench, Variant
from .sensitivity import DEFAULT_TOP, ESTIMATE_TEXT, NO_GAIN_DB, Sensitivity, rank, ranked_by, units_of
from .tensors import TensorError, tensor_errors

if TYPE_CHECKING:
    from ...calib.state import SessionState

__all__ = ["AccuracyReport", "analyze_accuracy", "LATENCY_TEXT", "NO_GAIN_DB", "LOW_SQNR_DB", "per_us_text",
           "latency_text"]

LATENCY_TEXT = ("latency µs: the simulator's price of the node in int16 (on the BPU) or kept in float (on the "
                "CPU; qtquant/perf/precision.py, docs/mixed-precision.md), an estimate for {march}; per µs: the "
                "gain over that price (at least 1 µs), the order of the ranking")


@dataclass
class AccuracyReport:
    samples: int
    in_sample: bool
    runtime: str
    base: Variant
    tensors: list[TensorError]
    sensitivity: list[Sensitivity]
    revision: int = 0
    notes: list[str] = field(default_factory=list)
    _index: dict[str, TensorError] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def sample_text(self) -> str:
        return samples_text(self.samples, self.in_sample)

    @property
    def no_single_fix(self) -> str:
        """A sentence when no measured node moves the worst slice (the gains carry no
        information, so the ranking says so in words), else ""."""
        measured = [x for x in self.sensitivity if not x.estimate]
        if self.ranked_by is RankedBy.AGREEMENT:
            if not measured or any(math.isfinite(x.gain) and x.gain != 0 for x in measured):
                return ""
            label = self.base.agreement_label
            return (f"no node in int16 or float alone changes how often {label} equals the float model's "
                    f"({len(measured)} measured): the loss is not one node's")
        if not measured or not self.base.worst_label \
                or any(math.isfinite(x.gain) and abs(x.gain) >= NO_GAIN_DB for x in measured):
            return ""
        return (f"no node in int16 or float alone moves the worst slice by {NO_GAIN_DB} dB or more "
                f"({len(measured)} measured): the loss is not one node's")

    @property
    def ranked_by(self) -> RankedBy:
        return ranked_by(self.base)

    @property
    def collapse_text(self) -> str:
        """Where the cumulative SQNR first falls under LOW_SQNR_DB in graph order, when the worst
        slice is under it too, else ""."""
        if not (math.isfinite(self.base.worst_db) and self.base.worst_db < LOW_SQNR_DB):
            return ""
        for i, t in enumerate(self.tensors):
            if math.isfinite(t.sqnr_db) and t.sqnr_db < LOW_SQNR_DB:
                local = "" if t.local_sqnr_db is None else f", {_f(t.local_sqnr_db)} dB local"
                return (f"cumulative SQNR first falls under {LOW_SQNR_DB:g} dB at {t.tensor} "
                        f"({_f(t.sqnr_db)} dB{local}; tensor {i + 1} of {len(self.tensors)} in graph order)")
        return ""

    def _worst_text(self) -> str:
        if self.base.worst_label:
            return f"worst slice: {self.base.worst_label} {_f(self.base.worst_db)} dB"
        agreed = [f.whole for f in self.base.outputs.values() if f.whole.blank is Blank.AGREEMENT]
        if agreed and self.base.worst_agreement is not None:
            label, share = self.base.worst_agreement
            return ("worst slice: none: " + ", ".join(f"{f.label} {f.word}" for f in agreed) + " (integer outputs "
                    f"have no SQNR; the sensitivity below ranks nodes by how many of {label}'s elements equal the "
                    f"float model's, {share:.2f}% now, in percentage points)")
        return "worst slice: none measured"

    def tensor(self, name: str) -> TensorError | None:
        return self._by_tensor().get(name)

    def _by_tensor(self) -> dict:
        if self._index is None:
            self._index = {t.tensor: t for t in self.tensors}
        return self._index

    def node_figures(self) -> dict[str, TensorError]:
        """Per node: the error of its first measured output (what the Error overlay colours)."""
        out = {}
        for t in self.tensors:
            if t.node is not None and t.node not in out:
                out[t.node] = t
        return out

    def to_dict(self) -> dict:
        return {"samples": self.samples, "held_out": not self.in_sample, "runtime": self.runtime,
                "worst_slice": self.base.worst_label or None,
                "worst_sqnr_db": None if not math.isfinite(self.base.worst_db) else round(self.base.worst_db, 4),
                # the least-agreeing integer output, and what the sensitivity gains are counted in
                "worst_agreement": None if self.base.worst_agreement is None else {
                    "output": self.base.worst_agreement[0],
                    "percent_equal": round(self.base.worst_agreement[1], 4)},
                "ranked_by": self.ranked_by.value,
                "outputs": self.base.rows(),
                "tensors": [t.to_dict() for t in self.tensors],
                "sensitivity": [s.to_dict() for s in self.sensitivity],
                "estimate": ESTIMATE_TEXT, "notes": list(self.notes)}

    def text(self, tensors: int = 15) -> str:
        from ...base.tables import text_table

        lines = [f"accuracy of the exported model ({self.runtime}) on {self.sample_text}",
                 text_table([(r["output"] if r["slice"] == r["output"] else "  " + r["slice"],
                              r["said"] if r["sqnr_db"] is None and r["said"] else _f(r["sqnr_db"]))
                             for r in self.base.rows()], ("output / slice", "SQNR dB"), rule=True),
                 self._worst_text(), ""]
        worst = sorted((t for t in self.tensors if math.isfinite(t.sqnr_db)), key=lambda t: t.sqnr_db)[:tensors]
        lines.append(f"per-tensor error, the {len(worst)} lowest cumulative SQNR of {len(self.tensors)} "
                     "(cumulative: quantized model vs float; local: that tensor alone quantized)")
        lines.append(text_table([(t.tensor, t.node or "-", t.precision.value, _f(t.sqnr_db), _f(t.local_sqnr_db))
                                 for t in worst], ("tensor", "node", "precision", "cumul. dB", "local dB"),
                                "lllrr", rule=True, max_width=48))
        lines.append("")
        shown = self.sensitivity[:max(tensors, sum(1 for s in self.sensitivity if not s.estimate))]
        by = self.ranked_by
        what = "worst-slice gain" if by is RankedBy.SQNR else \
            f"gain in {self.base.agreement_label}'s elements equal to the float model's"
        nodes = len({s.node for s in self.sensitivity})
        lines.append(f"sensitivity: {what} with one node in int16 or kept in float, by gain per µs of latency "
                     f"({nodes} nodes, {len(self.sensitivity)} candidates, "
                     f"{sum(1 for s in self.sensitivity if not s.estimate)} measured)")
        lines.append(text_table([(s.node, s.precision.value,
                                  _f(s.gain if math.isfinite(s.gain) else None, signed=True),
                                  "estimate" if s.estimate else "measured",
                                  s.after_text(),
                                  latency_text(s.latency_delta_us),
                                  per_us_text(s))
                                 for s in shown],
                                ("node", "precision", f"gain {by.gain_unit}", "how", "worst slice after", "latency µs",
                                 f"{by.gain_unit}/µs"),
                                "llrlllr", rule=True, max_width=48))
        if self.no_single_fix:
            lines.append(self.no_single_fix)
        lines.append(ESTIMATE_TEXT)
        lines += [f"note: {n}" for n in self.notes if n != self.no_single_fix]
        return "\n".join(lines)


def latency_text(us: float | None) -> str:
    """A candidate's latency price: "+629.0", "+4.2", "+0.37" (an int16 one can be under a µs)."""
    if us is None:
        return "n/a"
    return f"{us:+.1f}" if abs(us) >= 10 else f"{us:+.2f}"


def per_us_text(s: Sensitivity) -> str:
    """A candidate's gain per µs ("1.1", "0.0098"), "-" when not worth its price, "n/a" unpriced."""
    per = s.gain_per_us
    if per is None:
        return "n/a"
    if not s.worth:
        return "-"
    return f"{per:.3g}"


@samples_blamed
def analyze_accuracy(session: SessionState, *, top: int = DEFAULT_TOP, output_mode: OutputMode = OutputMode.AUTO,
                     cancel=None, progress=None, march_file=None) -> AccuracyReport:
    """Per-output and per-tensor error and the sensitivity ranking of the session's export.

    ``progress(stage, done, total)`` is told about the per-tensor chunks and the measured units.
    """
    bench = Bench(session, output_mode=output_mode, cancel=cancel)
    dm = session.domains

    def tell(stage):
        return None if progress is None else (lambda d, n: progress(stage, d, n))

    base = bench.measure(dm)
    errors = tensor_errors(bench, dm, progress=tell("tensors"))
    units = units_of(bench.graph, dm, errors, bench.export_float)
    sens = rank(bench, units, base, top=top, dm=dm, progress=progress, march_file=march_file)
    notes = [LATENCY_TEXT.format(march=march_file or session.options.march)]
    if bench.export_float:
        notes.append(f"{len(bench.export_float)} tensor(s) the default export keeps in float "
                     "(an output Concat that cannot share one scale) stay float in every variant")
    rep = AccuracyReport(bench.samples, bench.in_sample, bench.runtime, base, errors, sens,
                         revision=session.revision, notes=notes)
    rep.notes += [t for t in (rep.no_single_fix, rep.collapse_text) if t]
    return rep
