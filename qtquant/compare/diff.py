"""Two quantizations of one model side by side (``qtquant diff``): per tensor the scale ratio,
domain and precision; per Concat the rescales on each side and why; per output slice the SQNR;
latency and rescale cost.  Built from two measured :class:`~qtquant.compare.sides.Side`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..base.tables import text_table
from .match import MatchedBy, TensorMatch, match_tensors
from .sides import Side

__all__ = ["TensorDiff", "ConcatSide", "ConcatDiff", "SliceDiff", "ModelDiff", "diff_sides", "SCALE_EQUAL"]

SCALE_EQUAL = 1e-6  # relative: two scales this close are one scale (float32 rounding of one value)


def _num(x):
    return x if x is not None and math.isfinite(x) else None


@dataclass(frozen=True)
class TensorDiff:
    a: str
    b: str
    by: MatchedBy
    scale_a: float | None
    scale_b: float | None
    domain_a: int | None
    domain_b: int | None
    # the other members of the tensor's domain that both sides have, in A's names: what must
    # carry one scale with it on each side
    shares_a: tuple[str, ...]
    shares_b: tuple[str, ...]
    precision_a: str
    precision_b: str

    @property
    def ratio(self) -> float | None:
        """scale B / scale A (None: a side has no scale, e.g. left in float)."""
        if not self.scale_a or not self.scale_b:
            return None
        return self.scale_b / self.scale_a

    @property
    def scale_changed(self) -> bool:
        r = self.ratio
        return (self.scale_a is None) != (self.scale_b is None) or (r is not None and abs(r - 1.0) > SCALE_EQUAL)

    @property
    def domain_changed(self) -> bool:
        return set(self.shares_a) != set(self.shares_b)

    @property
    def changed(self) -> bool:
        return self.scale_changed or self.domain_changed or self.precision_a != self.precision_b

    def to_dict(self) -> dict:
        return {"tensor_a": self.a, "tensor_b": self.b, "matched_by": str(self.by),
                "scale_a": _num(self.scale_a), "scale_b": _num(self.scale_b), "ratio": _num(self.ratio),
                "domain_a": self.domain_a, "domain_b": self.domain_b,
                "shares_a": list(self.shares_a), "shares_b": list(self.shares_b),
                "domain_changed": self.domain_changed, "precision_a": self.precision_a,
                "precision_b": self.precision_b, "changed": self.changed}


@dataclass(frozen=True)
class ConcatSide:
    node: str
    rescales: int
    rescaled: tuple[str, ...]  # the input tensors (this side's names) requantized to the output scale
    ratio: float
    output_float: bool
    rule_note: str
    notes: tuple[str, ...]
    rescaled_scales: tuple[float | None, ...] = ()  # per rescaled input, its own scale
    out_scale: float | None = None  # the scale they are requantized to (the output's, or its reference input's)

    @classmethod
    def of(cls, c) -> "ConcatSide":
        out = c.output.scale
        if out is None and c.reference_input is not None:
            out = next((m.scale for m in c.inputs if m.index == c.reference_input), None)
        rescaled = [m for m in c.inputs if m.needs_rescale]
        return cls(c.node, c.rescales, tuple(m.tensor for m in rescaled), float(c.ratio),
                   bool(c.output_float or c.export_float), c.rule_note or "", tuple(c.notes),
                   tuple(m.scale for m in rescaled), out)

    @property
    def why(self) -> str:
        """Why this side rescales what it does, one line: each rescaled input's scale against the
        one it is requantized to, then the target rule's note and the Concat's notes."""
        parts = []
        if self.rescaled and self.out_scale:
            parts.append(", ".join(f"{t} {_scale(s)} ≠ {_scale(self.out_scale)}"
                                   for t, s in zip(self.rescaled, self.rescaled_scales)))
        return "; ".join(x for x in (*parts, self.rule_note, *self.notes) if x)

    def to_dict(self) -> dict:
        return {"node": self.node, "rescales": self.rescales, "rescaled_inputs": list(self.rescaled),
                "rescaled_scales": [_num(x) for x in self.rescaled_scales], "rescaled_to": _num(self.out_scale),
                "ratio": _num(self.ratio), "output_float": self.output_float, "rule_note": self.rule_note or None,
                "notes": list(self.notes)}


@dataclass(frozen=True)
class ConcatDiff:
    a: ConcatSide
    b: ConcatSide

    @property
    def change(self) -> int:
        return self.b.rescales - self.a.rescales

    def to_dict(self) -> dict:
        return {"node": self.a.node, "a": self.a.to_dict(), "b": self.b.to_dict(), "rescales_change": self.change}


@dataclass(frozen=True)
class SliceDiff:
    output: str
    label: str
    sqnr_a: float | None
    sqnr_b: float | None

    @property
    def change(self) -> float | None:
        return None if self.sqnr_a is None or self.sqnr_b is None else self.sqnr_b - self.sqnr_a

    def to_dict(self) -> dict:
        return {"output": self.output, "slice": self.label, "sqnr_db_a": _num(self.sqnr_a),
                "sqnr_db_b": _num(self.sqnr_b), "change_db": _num(self.change)}


@dataclass
class ModelDiff:
    a: Side
    b: Side
    match: TensorMatch
    tensors: list[TensorDiff]
    concats: list[ConcatDiff]
    concats_only_a: list[str] = field(default_factory=list)
    concats_only_b: list[str] = field(default_factory=list)
    slices: list[SliceDiff] = field(default_factory=list)

    @property
    def changed_tensors(self) -> list[TensorDiff]:
        return [t for t in self.tensors if t.changed]

    def summary_rows(self) -> list[tuple[str, str, str, str]]:
        """(metric, A, B, change): the perf totals as the perf report gives them, then the Concat
        counts and each output's worst slice."""
        rows = []
        if self.a.perf is not None and self.b.perf is not None:
            from ..perf.report import BOARD_LABEL, STATIC_LABEL, comparison_rows

            rows += [r for r in comparison_rows(self.b.perf, self.a.perf)
                     if r[0] in (STATIC_LABEL, BOARD_LABEL, "FPS (static)", "rescales", "rescale cost",
                                 "DDR per frame")]
        else:
            rows.append(("rescales", str(self.a.rescales), str(self.b.rescales),
                         f"{self.b.rescales - self.a.rescales:+d}"))
        rows.append(("mismatched Concats", str(self.a.mismatched_concats), str(self.b.mismatched_concats),
                     f"{self.b.mismatched_concats - self.a.mismatched_concats:+d}"))
        wa, wb = self.a.worst_slice, self.b.worst_slice
        if wa is not None or wb is not None:
            rows.append(("worst slice SQNR", _db(wa), _db(wb),
                         f"{wb.sqnr_db - wa.sqnr_db:+.2f} dB" if wa is not None and wb is not None
                         and wa.sqnr_db is not None and wb.sqnr_db is not None else ""))
        return rows

    def to_dict(self) -> dict:
        from ..files.report import SCHEMA_VERSION

        def side(s: Side) -> dict:
            w = s.worst_slice
            return {"model": str(s.path), "plan": str(s.plan) if s.plan else None,
                    "model_sha256": s.session.graph.sha256, "quantized_input": s.session.quantized_file,
                    "concats": len(s.concats), "mismatched_concats": s.mismatched_concats, "rescales": s.rescales,
                    "latency_ms": _num(s.latency_ms), "rescale_cost_us": _num(s.rescale_us),
                    "march": s.session.options.march, "basis": s.basis,
                    "sqnr_reference": s.reference or None,
                    "worst_slice": {"slice": w.label, "sqnr_db": _num(w.sqnr_db)} if w is not None else None}

        return {"schema_version": SCHEMA_VERSION, "a": side(self.a), "b": side(self.b),
                "tensors": {"matched": len(self.match.pairs), "matched_by_structure": self.match.by_structure,
                            "changed": len(self.changed_tensors),
                            "only_a": list(self.match.only_a), "only_b": list(self.match.only_b),
                            "items": [t.to_dict() for t in self.tensors]},
                "concats": [c.to_dict() for c in self.concats],
                "concats_only_a": list(self.concats_only_a), "concats_only_b": list(self.concats_only_b),
                "slices": [s.to_dict() for s in self.slices]}

    def text(self, top: int = 25) -> str:
        a, b = self.a, self.b
        lines = [f"A: {a.name} ({a.basis})", f"B: {b.name} ({b.basis})", ""]
        lines.append(text_table(self.summary_rows(), ("", "A", "B", "change"), "lrrr", rule=True))
        if self.slices:
            lines += ["", "SQNR per output slice (dB):"]
            lines.append(text_table([(("  " if "[" in s.label else "") + s.label, _v(s.sqnr_a), _v(s.sqnr_b),
                                      "-" if s.change is None else f"{s.change:+.2f}") for s in self.slices],
                                    ("slice", "A", "B", "change"), "lrrr", rule=True))
            if a.reference != b.reference:
                lines.append(f"note: A is measured against {a.reference or 'nothing'}, B against "
                             f"{b.reference or 'nothing'}")
            elif a.session.quantized_file or b.session.quantized_file:
                lines.append("note: each QDQ file is measured against its own float view (its weights dequantized), "
                             "as `qtquant analyze` measures it alone")
        rows = [(c.a.node, str(c.a.rescales), str(c.b.rescales), f"{c.change:+d}" if c.change else "=",
                 _rescaled(c.a), _rescaled(c.b)) for c in self.concats]
        lines += ["", f"Concats ({len(self.concats)} matched):"]
        lines.append(text_table(rows, ("concat", "A rescales", "B rescales", "change", "A rescales inputs",
                                       "B rescales inputs"), "lrrrll", rule=True, max_width=60))
        for c in self.concats:
            if c.change or c.a.rescaled != c.b.rescaled:
                for label, s in (("A", c.a), ("B", c.b)):
                    if s.why:
                        lines.append(f"why: {label} {s.node}: {s.why}")
        for label, names in (("only in A", self.concats_only_a), ("only in B", self.concats_only_b)):
            if names:
                lines.append(f"Concats {label}: {', '.join(names)}")
        changed = self.changed_tensors
        m = self.match
        lines += ["", f"tensors: {len(m.pairs)} matched ({len(m.pairs) - m.by_structure} by name, {m.by_structure} "
                  f"by producer structure), {len(changed)} changed, {len(m.only_a)} only in A, {len(m.only_b)} only "
                  "in B"]
        for p in m.pairs:
            if p.by is MatchedBy.STRUCTURE:
                lines.append(f"  matched by structure: {p.a} (A) = {p.b} (B)")
        if changed:
            worst = sorted(changed, key=lambda t: -abs(math.log(t.ratio)) if t.ratio else -math.inf)
            rows = [(t.a, _scale(t.scale_a), _scale(t.scale_b), "-" if t.ratio is None else f"{t.ratio:.3f}",
                     "moved" if t.domain_changed else "", f"{t.precision_a}/{t.precision_b}"
                     if t.precision_a != t.precision_b else "") for t in worst[:top]]
            lines.append(text_table(rows, ("tensor", "scale A", "scale B", "B/A", "domain", "precision"), "lrrrll",
                                    rule=True, max_width=60))
            if len(changed) > top:
                lines.append(f"({len(changed) - top} more changed tensors in --json and --report)")
        for label, names in (("only in A", m.only_a), ("only in B", m.only_b)):
            if names:
                lines.append(f"unmatched, {label} ({len(names)}): {', '.join(names)}")
        return "\n".join(lines)


def _v(x):
    return "-" if x is None else f"{x:.2f}"


def _db(s):
    return "-" if s is None else f"{s.sqnr_db:.2f} dB ({s.label})"


def _scale(s):
    return "float" if s is None else f"{s:.4g}"


def _rescaled(c: ConcatSide) -> str:
    if c.output_float:
        return "(float output)"
    return ", ".join(c.rescaled) or "-"


def _domain(side: Side, tensor: str):
    d = side.session.domains.domain_of(tensor)
    return (d.id, d.scale, d.members) if d is not None else (None, None, ())


def diff_sides(a: Side, b: Side) -> ModelDiff:
    ga, gb = a.session.graph, b.session.graph
    match = match_tensors(ga, gb, ga.observed_tensors, gb.observed_tensors)
    a_of, b_of = match.a_of(), match.b_of()

    # Domain members in A's names.  A pass-through member (not observed, so not paired) stands for
    # itself when the other side has a tensor of that name that no pairing gave another meaning.
    def in_a_names_from_b(t):
        return a_of.get(t) or (t if t in ga.tensors and t not in b_of else None)

    def in_a_names_from_a(t):
        return t if t in b_of or (t in gb.tensors and t not in a_of) else None

    prec_a, prec_b = a.session.options.precision, b.session.options.precision
    tensors = []
    for p in match.pairs:
        ida, sa, ma = _domain(a, p.a)
        idb, sb, mb = _domain(b, p.b)
        shares_a = {in_a_names_from_a(t) for t in ma if t != p.a} - {None}
        shares_b = {in_a_names_from_b(t) for t in mb if t != p.b} - {None}
        tensors.append(TensorDiff(p.a, p.b, p.by, sa, sb, ida, idb, tuple(sorted(shares_a)), tuple(sorted(shares_b)),
                                  str(prec_a.of(p.a)), str(prec_b.of(p.b))))
    # Concats: by node name, else by their matched output tensor
    b_cat = {c.node: c for c in b.concats}
    b_by_out = {c.output.tensor: c for c in b.concats}
    pairs, seen_b, only_a = [], set(), []
    for c in a.concats:
        other = b_cat.get(c.node) or b_by_out.get(b_of.get(c.output.tensor, "\0"))
        if other is None or other.node in seen_b:
            only_a.append(c.node)
            continue
        seen_b.add(other.node)
        pairs.append(ConcatDiff(ConcatSide.of(c), ConcatSide.of(other)))
    only_b = [c.node for c in b.concats if c.node not in seen_b]
    fb = {(s.output, s.label): s for s in b.slices}
    slices = [SliceDiff(s.output, s.label, s.sqnr_db, fb[(s.output, s.label)].sqnr_db if (s.output, s.label) in fb
                        else None) for s in a.slices]
    got = {(s.output, s.label) for s in a.slices}
    slices += [SliceDiff(s.output, s.label, None, s.sqnr_db) for s in b.slices if (s.output, s.label) not in got]
    return ModelDiff(a, b, match, tensors, pairs, only_a, only_b, slices)
