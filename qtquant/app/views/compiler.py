"""A compile log on the canvas and in the docks: the compiler's requantized Concat inputs marked
apart from qtquant's prediction, the cosine-similarity overlay, and the texts the Concat list and
inspector show (docs/compiler-log.md)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from ...horizon.reconcile import ConcatReconciliation, Reconciliation, Verdict, reconcile_concats
from ...base.vocab import Overlay
from .palette import heat_hex

if TYPE_CHECKING:
    from ...calib.state import SessionState
    from ...horizon.match import LogMatch
    from ...quant.concat import ConcatInfo
    from .lookitems import Looks

__all__ = ["COMPILER_EDGE", "COMPILER_AGREE_EDGE", "COMPILER_BADGE", "compiler_reconciliation", "mark_compiler",
           "cosine_looks", "log_cell", "log_tooltip", "log_inspector_lines", "COSINE_BADGES"]

COMPILER_EDGE = "#1565c0"  # the compiler requantizes it, qtquant does not predict it (missed)
COMPILER_AGREE_EDGE = "#6a1b9a"  # both requantize it
COMPILER_BADGE = "#1565c0"
COSINE_BADGE = "#4a148c"
COSINE_BADGES = 12
"""The lowest cosines get a badge with the figure; the rest only their colour."""


def compiler_reconciliation(session: SessionState | None,
                            concats: Sequence[ConcatInfo] | None = None) -> Reconciliation | None:
    """The log's requantize lists beside ``concats`` (default: the session's analysis), or None."""
    if session is None or session.compiler_log is None:
        return None
    match = session.compiler_log
    if concats is None:
        if not session.ready:
            return None
        concats = session.concats()
    return reconcile_concats(match, concats)


def mark_compiler(looks: Looks, rec: Reconciliation) -> None:
    """In every overlay: the compiler's requantized Concat inputs as dashed edges (purple where
    qtquant predicts the rescale too, blue where it does not) and a "log N" badge on each Concat
    the compiler requantizes inputs of.  qtquant's own prediction keeps its solid edges."""
    from .lookitems import PLAIN, Badge, EdgeLook, Legend, NodeLook

    lg = looks.legend
    if lg.mode == Overlay.MISMATCH:
        looks.legend = Legend(lg.mode, "Red: qtquant's rescales; dashed: the compile log's", lg.lo, lg.hi)
    elif not lg.title:
        looks.legend = Legend(lg.mode, "Dashed edges: inputs the compile log requantizes", lg.lo, lg.hi)
    agree, missed = EdgeLook(COMPILER_AGREE_EDGE, 3.0, True), EdgeLook(COMPILER_EDGE, 3.0, True)
    for c in rec.concats:
        for v in c.inputs:
            if v.compiler:
                looks.edges[(v.tensor, c.node)] = agree if v.predicted else missed
        n = len(c.compiler_list)
        if n:
            base = looks.nodes.get(c.node, PLAIN)
            looks.nodes[c.node] = NodeLook(base.fill, (*base.badges, Badge(f"log {n}", COMPILER_BADGE)), base.faded,
                                           base.border_width)


def cosine_looks(looks: Looks, parts: Sequence[Sequence[str]], match: LogMatch | None) -> Iterator[None]:
    """The Compiler-cosine overlay (a generator, as :func:`~.looks.fill_looks`): each node the log
    names coloured by how far its cosine similarity falls below 1 (the lowest in the log darkest),
    the lowest few badged with the figure."""
    from .lookitems import FADED_LOOK, PLAIN, Badge, Legend, NodeLook

    if match is None:
        looks.legend = Legend(Overlay.COSINE, "Compiler cosine: no compile log (File › Open Compile Log)")
        return
    ranked = match.cosine_ranking()
    if not ranked:
        looks.legend = Legend(Overlay.COSINE, "Compiler cosine: the log has no cosine figures")
        return
    yield
    cos = {n: r.cosine for n, r in ranked if r.cosine is not None}  # (every ranked row has one)
    badged = {n for n, _ in ranked[:COSINE_BADGES]}
    worst = min(cos.values())
    span = max(1.0 - worst, 1e-6)
    nodes = looks.nodes
    for part in parts:
        for name in part:
            c = cos.get(name)
            base = nodes.get(name, PLAIN)
            if c is None:
                if base is PLAIN:
                    nodes[name] = FADED_LOOK
                continue
            badges = ((Badge(f"cos {c:.3f}", COSINE_BADGE),) if name in badged else ()) + base.badges
            nodes[name] = NodeLook(heat_hex((1.0 - c) / span, "cosine"), badges, base.faded, base.border_width)
        yield
    looks.legend = Legend(Overlay.COSINE, "Compiler cosine similarity (the log's, quantized vs float)", "1.000",
                          f"{worst:.3f}")


def log_cell(c: ConcatReconciliation | None) -> str:
    """The Concat list's Log column: the compiler's requantize count, and where qtquant differs."""
    if c is None:
        return ""
    n = len(c.compiler_list)
    missed, extra = c.count(Verdict.MISSED), c.count(Verdict.EXTRA)
    if not missed and not extra:
        return f"{n} ="
    return f"{n} " + " ".join(p for p in (f"−{missed}" if missed else "", f"+{extra}" if extra else "") if p)


def log_tooltip(c: ConcatReconciliation | None) -> list[str]:
    if c is None:
        return []
    lines = [f"compile log: requantizes {', '.join(c.compiler_list) or 'no input'}; "
             f"output threshold {_thr(c.compiler_output_threshold)}"]
    for v in c.inputs:
        if v.verdict is not Verdict.AGREE:
            lines.append(f"  {v.verdict.value}: in {v.index} {v.tensor} (compiler threshold "
                         f"{_thr(v.compiler_threshold)}, qtquant |max| {_thr(v.qtquant_threshold)})")
    return lines


def log_inspector_lines(c: ConcatReconciliation | None) -> list[tuple[str, str]]:
    """(label, text) rows for the inspector of a Concat: both lists and each disagreement."""
    if c is None:
        return []
    rows = [("Compiler requantizes", ", ".join(c.compiler_list) or "none"),
            ("qtquant predicts", ", ".join(c.predicted_list) or "none")]
    for v in c.inputs:
        rows.append((f"in {v.index}", f"{v.verdict.value}: compiler {'yes' if v.compiler else 'no'} "
                                      f"(threshold {_thr(v.compiler_threshold)}), qtquant "
                                      f"{'yes' if v.predicted else 'no'} (|max| {_thr(v.qtquant_threshold)})"))
    rows.append(("Output threshold", f"compiler {_thr(c.compiler_output_threshold)}, qtquant "
                                     f"{_thr(c.qtquant_output_threshold)}"))
    return rows


def _thr(x: float | None) -> str:
    return "—" if x is None else f"{x:.4g}"
