"""The HTML reports of ``qtquant diff`` and ``qtquant check``: view data for the shared report
templates (qtquant/templates; the style sheet, sort script and totals table are the perf report's)."""

from __future__ import annotations

import base64
import math

from ..perf.report import report_template
from .diff import ConcatSide, ModelDiff
from .match import MatchedBy

__all__ = ["diff_html", "check_html"]


def _f(x, fmt="{:.2f}"):
    return "-" if x is None else fmt.format(x)


def _cls(change, better_high: bool = True) -> str:
    if not change:
        return ""
    return "better" if (change > 0) == better_high else "worse"


def _inputs(c: ConcatSide) -> str:
    return "(float output)" if c.output_float else ", ".join(c.rescaled) or "-"


def _slice_view(d: ModelDiff) -> list[dict]:
    return [{"label": s.label, "a": _f(s.sqnr_a), "b": _f(s.sqnr_b),
             "change": "-" if s.change is None else f"{s.change:+.2f}", "cls": _cls(s.change)} for s in d.slices]


def _slice_notes(d: ModelDiff) -> list[str]:
    a, b = d.a, d.b
    if not d.slices:
        return []
    if a.reference != b.reference:
        return [f"A is measured against {a.reference or 'nothing'}, B against {b.reference or 'nothing'}."]
    return [f"Each side against {a.reference}, on the same samples."]


def _concat_view(d: ModelDiff) -> list[dict]:
    return [{"node": c.a.node, "a": c.a.rescales, "b": c.b.rescales, "change": c.change,
             "change_text": f"{c.change:+d}" if c.change else "=", "cls": _cls(c.change, better_high=False),
             "changed": bool(c.change) or c.a.rescaled != c.b.rescaled,
             "a_inputs": _inputs(c.a), "b_inputs": _inputs(c.b), "a_why": c.a.why, "b_why": c.b.why}
            for c in d.concats]


def _tensor_view(d: ModelDiff) -> list[dict]:
    def dom(i, shares):
        if i is None:
            return "-"
        return f"#{i}" + (f" with {', '.join(shares)}" if shares else "")

    rows = []
    # changed first, the largest scale change on top
    order = sorted(d.tensors, key=lambda t: (not t.changed, -abs(math.log(t.ratio)) if t.ratio else 0.0))
    for t in order:
        rows.append({"a": t.a, "b": t.b if t.b != t.a else "", "changed": t.changed,
                     "scale_a": _f(t.scale_a, "{:.5g}"), "scale_b": _f(t.scale_b, "{:.5g}"),
                     "scale_a_v": t.scale_a or 0, "scale_b_v": t.scale_b or 0,
                     "ratio": _f(t.ratio, "{:.4f}"), "ratio_v": t.ratio or 0,
                     "domain_a": dom(t.domain_a, t.shares_a), "domain_b": dom(t.domain_b, t.shares_b),
                     "precision": t.precision_a if t.precision_a == t.precision_b
                     else f"{t.precision_a} → {t.precision_b}"})
    return rows


def _side(s) -> dict:
    return {"name": s.name, "basis": s.basis}


def diff_view(d: ModelDiff) -> dict:
    """What the diff template shows (the check report embeds the same for its baseline)."""
    m = d.match
    return dict(
        a=_side(d.a), b=_side(d.b), summary=d.summary_rows(), slices=_slice_view(d), slice_notes=_slice_notes(d),
        concats=_concat_view(d),
        concats_unmatched=[(lbl, n) for lbl, n in (("only in A", d.concats_only_a), ("only in B", d.concats_only_b))
                           if n],
        tensor_line=(f"{len(m.pairs)} quantized tensors matched ({len(m.pairs) - m.by_structure} by name, "
                     f"{m.by_structure} by producer structure), {len(d.changed_tensors)} changed (scale, domain "
                     f"or precision), {len(m.only_a)} only in A, {len(m.only_b)} only in B."),
        structure=[(p.a, p.b) for p in m.pairs if p.by is MatchedBy.STRUCTURE],
        tensors=_tensor_view(d),
        tensors_unmatched=[(lbl, n) for lbl, n in (("only in A", m.only_a), ("only in B", m.only_b)) if n],
        march=d.a.session.options.march)


def diff_html(d: ModelDiff) -> str:
    return report_template("diff_report.html.j2").render(
        title=f"qtquant diff — {d.a.name} vs {d.b.name}", data=d.to_dict(), **diff_view(d))


def png_data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def check_html(result, *, canvas_png: bytes | None, canvas_note: str, concat_table: str, fidelity_text: str,
               baseline_diff: ModelDiff | None = None) -> str:
    """``result``: a :class:`~qtquant.compare.budget.CheckResult`."""
    side = result.side
    return report_template("check_report.html.j2").render(
        title=f"qtquant check — {side.name}", model=_side(side), passed=result.passed,
        limits=[{"name": r.limit, "value": r.value_text, "bound": r.bound_text, "ok": r.ok, "line": r.line()}
                for r in result.results],
        broken=[r.line() for r in result.results if not r.ok],
        canvas=png_data_uri(canvas_png) if canvas_png else None, canvas_note=canvas_note,
        concat_table=concat_table, fidelity_text=fidelity_text,
        baseline=diff_view(baseline_diff) if baseline_diff is not None else None,
        data=result.to_dict())
