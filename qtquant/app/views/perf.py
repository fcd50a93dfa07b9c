"""The perf summary: totals against the model as opened (no group, every tensor int8), the price of
each kind of edit, the slowest layers and the fidelity line.

The labels of the Performance dock show rich text; :meth:`Figure.html` and
:func:`fidelity_html` give it, every user-supplied name escaped.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from html import escape
from typing import TYPE_CHECKING

from .fmt import fmt_bytes, fmt_us
from .perfdata import confidences, edit_price_of, num, top_layers
from ...base.tables import clip_left, fmt_num, samples_text
from ...base.vocab import Blank

if TYPE_CHECKING:
    from ...fidelity.report import Fidelity
    from ...perf import PerfResult
    from ..session import Session

__all__ = ["Change", "Figure", "PerfSummaryView", "perf_summary", "fidelity_html", "fidelity_tip",
           "fidelity_basis", "price_html", "OPENED_NOTE"]

GOOD, BAD, MUTED, WARN = "#2e7d32", "#c62828", "#777", "#b26a00"


@dataclass(frozen=True)
class Change:
    """A change against the model as opened, green when it is an improvement."""

    text: str
    good: bool

    @property
    def color(self) -> str:
        return GOOD if self.good else BAD

    def html(self) -> str:
        return f' <span style="color:{self.color}">({self.text.replace("-", "−")})</span>'


def _change(text: str, d: float, lower_better: bool) -> Change:
    return Change(text, (d < 0) == lower_better)


@dataclass(frozen=True)
class Figure:
    text: str = "—"
    change: Change | None = None

    def html(self) -> str:
        return self.text + (self.change.html() if self.change is not None else "")


@dataclass(frozen=True)
class PerfSummaryView:
    latency: Figure = Figure()  # the BPU static estimate (what the compiler prints)
    board: Figure = Figure()  # + the runtime's CPU work for one inference, one thread (perf/board.py)
    latency_tip: str = ""  # how sure: the march fit's leave-one-out error on the nearest figures
    board_tip: str = ""
    fps: Figure = Figure()
    ddr: Figure = Figure()
    rescales: Figure = Figure()
    rescale_us: Figure = Figure()
    sqnr_html: str = "—"  # one entry per model output, rich text
    sqnr_tip: str = ""
    # What the SQNR rests on ("7 in-sample samples, worst slice"): a row of its own, because the
    # SQNR line is elided at the dock's width and the sample count at its end was cut off.
    sqnr_basis: str = "—"
    # What each kind of edit costs against the model as opened ("sharing −6.1 µs · precision +635 µs"),
    # rich text; "—" with nothing edited.
    price: str = "—"
    note: str = ""
    chart: tuple[tuple[str, str, float, bool], ...] = ()  # (name, op type, µs, on the CPU) of the slowest layers
    stale: bool = False  # the perf figures are of an older revision: a new run is on its way


def _metric(perf: PerfResult, base: PerfResult | None, value: Callable[[PerfResult], float],
            fmt: Callable[[float], str], lower_better: bool, dfmt: Callable[[float], str]) -> Figure:
    """``value`` of ``perf``, with its change against ``base`` (the model as opened) when it moved."""
    now = num(value(perf))
    was = num(value(base)) if base is not None else None
    if now is None:
        return Figure()
    if was is not None and abs(now - was) > 1e-9 * max(1.0, abs(was)):
        return Figure(fmt(now), _change(dfmt(now - was), now - was, lower_better))
    return Figure(fmt(now))


def _ms(sure: str) -> Callable[[float], str]:
    """A latency in ms, with how sure it is ("±7%") after it."""
    return lambda x: f"{x:.3f} ms" + (f" <span style=\"color:{MUTED}\">{escape(sure)}</span>" if sure else "")


def _signed(fmt: Callable[[float], str]) -> Callable[[float], str]:
    return lambda d: ("+" if d > 0 else "−") + fmt(abs(d))


def _rescales(session: Session) -> Figure:
    if not session.ready:
        return Figure()
    cs, bcs = session.concats(), session.concats(baseline=True)
    n, m = sum(c.rescales for c in cs), sum(1 for c in cs if c.rescales)
    was, was_m = sum(c.rescales for c in bcs), sum(1 for c in bcs if c.rescales)
    text = f"{n} in {m} Concats"
    if (was, was_m) != (n, m):  # a share can move a rescale to another Concat
        return Figure(text, _change(f"was {was} in {was_m}", (n - was) or (m - was_m), lower_better=True))
    return Figure(text)


def perf_summary(session: Session | None) -> PerfSummaryView:
    """Totals for the current revision, each with its change against the model as opened."""
    if session is None:
        return PerfSummaryView()
    res, base_res = session.perf, session.perf_baseline
    perf = res.value if res is not None else None
    base = base_res.value if base_res is not None else None
    head = PerfSummaryView(rescales=_rescales(session))
    fid = session.fidelity.value if session.fidelity is not None else None
    edited = len(session.groups) > 0 or bool(session.options.precision)
    if fid is not None and fid.after:
        head = replace(head, sqnr_html=fidelity_html(fid, edited), sqnr_tip=fidelity_tip(fid),
                       sqnr_basis=fidelity_basis(fid))
    elif session.quantized_file and session.calibration is None:
        # A QDQ file brings its scales and no float original: nothing to measure against until
        # calibration data gives check samples (its float view is then the reference; the file's scales stand).
        head = replace(head, sqnr_html="<i>not measured</i> (QDQ file)",  # (the why in the tip: the row is narrow)
                       sqnr_tip="A QDQ file has no float original. Calibrate (with representative data) to "
                                "measure the export against the file's "
                                "float view on check samples; the file's own scales stay. The export report "
                                "also measures the written file against this file.",
                       sqnr_basis="Calibrate to measure")
    if perf is None:
        return head
    stale = session.is_stale(res)
    s_short, s_tip, b_short, b_tip = confidences(perf, session.options.march)
    from ...perf.report import board_clock_note

    return replace(
        head,
        latency=_metric(perf, base, lambda p: p.total_ms, _ms(s_short), True, lambda d: f"{d:+.3f} ms"),
        board=_metric(perf, base, lambda p: p.board_ms, _ms(b_short), True, lambda d: f"{d:+.3f} ms"),
        latency_tip=s_tip, board_tip=b_tip + (f"; the runtime's CPU work adds {perf.board_cpu_us:.0f} µs"
                                              if b_tip and num(perf.board_cpu_us) else "")
        + (f"; {board_clock_note(perf, session.options.board_bpu_ghz)}"
           if b_tip and session.options.board_bpu_ghz else ""),
        fps=_metric(perf, base, lambda p: p.fps, lambda x: f"{x:.1f}", False, lambda d: f"{d:+.1f}"),
        ddr=_metric(perf, base, lambda p: float(p.ddr_bytes), fmt_bytes, True, _signed(fmt_bytes)),
        rescale_us=_metric(perf, base, lambda p: p.rescale_us, fmt_us, True, _signed(fmt_us)),
        chart=tuple(top_layers(perf)), stale=stale, price=price_html(perf, base) if edited else "—",
        note="updating…" if stale else OPENED_NOTE if edited else "")


OPENED_NOTE = "(…): change against the model as opened (no group, every tensor int8)"


def price_html(perf: PerfResult, base: PerfResult | None) -> str:
    """Each kind of edit's latency price against the model as opened, coloured: green saves time."""
    price = edit_price_of(base, perf)
    if price is None:
        return "—"
    parts = price.parts or (("no change", 0.0),)

    def one(kind: str, us: float) -> str:
        if not us:
            return kind
        c = GOOD if us < 0 else BAD
        return f'{kind} <span style="color:{c}">{"+" if us > 0 else "−"}{fmt_us(abs(us))}</span>'
    return " · ".join(one(k, v) for k, v in parts)


LABEL_CHARS = 20  # an output's name in the dock's row, at most


def fidelity_html(fid: Fidelity, edited: bool = False) -> str:
    """Each output's headline (its worst slice, named), the change, and the sample count.  ``edited``:
    the session differs from the model as opened, so a change under 0.005 dB still shows, muted
    ("(±0.00 dB)"): the figure was measured again and did not move."""
    parts: list[str] = []
    for o in fid.outputs:
        a, w = fid.after[o].headline, fid.before[o].headline
        # A long name (a file's output named by a JSON string) would push the figure out of the dock's
        # row; the whole name is in the tooltip's report.
        name = escape(clip_left(a.label, LABEL_CHARS), quote=False)
        if a.blank is Blank.AGREEMENT:  # an integer output: a class wrong on some sample is a finding
            wrong = a.equal_samples is not None and a.equal_samples < a.samples
            parts.append(f'{name}: <span style="color:{BAD}">{a.word}</span>' if wrong else f"{name}: {a.word}")
            continue
        now, was = a.sqnr_db, w.sqnr_db  # (None exactly where no_signal says why)
        if a.no_signal or now is None:
            parts.append(f"{name}: <i>{a.word}</i>")
            continue
        t = f"{name}: {fmt_num(now, 1)} dB"
        if a.lost:  # said in red (the tooltip says why)
            t = f'{name}: <span style="color:{BAD}">{fmt_num(now, 1)} dB</span>'
        if not w.no_signal and was is not None and math.isfinite(now) and math.isfinite(was):
            d = now - was
            if abs(d) >= 0.005:
                t += _change(f"{fmt_num(d, signed=True)} dB", d, lower_better=False).html()
            elif edited:
                t += f' <span style="color:{MUTED}">(±0.00 dB)</span>'
        parts.append(t)
    text = "; ".join(parts)
    if any(fid.after[o].headline.blank is Blank.NO_SIGNAL for o in fid.outputs) or fid.sparse:
        # "no signal", or an output that fires on almost nothing (the tooltip's report says which)
        text += f' <span style="color:{WARN}">(use representative data)</span>'
    if fid.findings:
        text += f' <span style="color:{BAD}">{len(fid.findings)} finding(s), see tooltip</span>'
    if fid.host_default:
        text += f' <span style="color:{WARN}">(this CPU\'s default int8 kernels differ, see tooltip)</span>'
    return text


def fidelity_basis(fid: Fidelity) -> str:
    """What the SQNR figures rest on: '7 in-sample samples, worst slice'."""
    text = samples_text(fid.samples, fid.in_sample, short=True)
    if any(fid.after[o].slices for o in fid.outputs):
        text += ", worst slice"
    return text


def fidelity_tip(fid: Fidelity) -> str:
    """The whole fidelity report as rich text for a tooltip."""
    return fid.text().replace("&", "&amp;").replace("<", "&lt;").replace("\n", "<br>")
