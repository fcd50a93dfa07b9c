"""The app's comparison: a second file of the open model, opened with the window's settings, and
what the canvas, the Concat list and the inspector show of it (Qt-free; the GUI applies it).

The second side is opened as ``qtquant diff`` opens a side (the window's input shapes,
calibration settings and march; a QDQ file keeps its scales, a float model is calibrated) and
simulated; its fidelity check is not run (the window's own check measures the open model)."""

from __future__ import annotations

import math
from pathlib import Path

from ..app.views.looks import Badge, EdgeLook, Legend, Looks, NodeLook
from ..app.views.palette import heat_hex
from ..base.vocab import SYNTHETIC
from .diff import ModelDiff, diff_sides
from .sides import Side

__all__ = ["open_comparison", "compare_looks", "concat_text", "node_text", "RATIO_SATURATES"]

RATIO_SATURATES = 4.0  # the scale-ratio colour ramp is full at B/A = 4x (or 1/4x)
ADDED = "#c62828"  # rescales B adds (edges, badges)
REMOVED = "#2e7d32"  # rescales B removes
SAME = "#90a4ae"


def open_comparison(path, session, perf=None, fidelity=None, *, progress=None) -> ModelDiff:
    """Open ``path`` (a model file, or a ``.qtquant`` project) as side B against the open
    ``session`` (side A, with its latest ``perf`` and ``fidelity``) and compare them."""
    from ..app.opening import OpenRequest, open_session
    from ..perf import simulate_session

    p = Path(path)
    if p.suffix.lower() == ".qtquant":
        from ..app.projects import open_project

        other, _ = open_project(p, remap=True)
    else:
        other = open_session(OpenRequest(p, dict(session.graph.input_shapes), session.options, cut=session.graph.cut))
    # A float B is calibrated; a QDQ B only when the open model was (its data then gives B's check
    # samples and ranges to what B left unquantized, as for A), so both sides rest on the same footing.
    a_calibrated = session.calibration is not None and session.options.calib.source != SYNTHETIC
    if other.calibration is None and (not other.quantized_file or a_calibrated):
        other.run_calibration(progress=progress)
    try:
        other_perf = simulate_session(other)
    except Exception:  # a model the simulator cannot price still compares by scales
        other_perf = None
    a = Side(label="A", path=Path(session.graph.path or "model"), session=session, perf=perf, fidelity=fidelity)
    b = Side(label="B", path=p, session=other, perf=other_perf)
    return diff_sides(a, b)


def _ratio_fill(r: float) -> str:
    return heat_hex(min(abs(math.log(r)) / math.log(RATIO_SATURATES), 1.0), "bits")


def compare_looks(graph, d: ModelDiff) -> Looks:
    """Side A's canvas coloured by what B changes: each node by the scale ratio B/A of its output
    (unchanged nodes faded), each Concat by the rescales B adds (red) or removes (green), with a
    badge saying both counts; the edges into an input B rescales and A does not red, the reverse green."""
    looks = Looks()
    by_tensor = {t.a: t for t in d.tensors}
    for name, node in graph.nodes.items():
        t = next((by_tensor[o] for o in node.outputs if o in by_tensor), None)
        if t is None or not t.changed:
            looks.nodes[name] = NodeLook(faded=True)
            continue
        badges: tuple[Badge, ...] = ()
        if t.ratio is not None and t.scale_changed:
            badges = (Badge(f"×{t.ratio:.2f}", "#4a148c"),)
        if t.domain_changed:
            badges += (Badge("domain", "#00695c"),)
        if t.precision_a != t.precision_b:
            badges += (Badge(f"{t.precision_a}→{t.precision_b}", "#e65100"),)
        looks.nodes[name] = NodeLook(fill=_ratio_fill(t.ratio) if t.ratio else None, badges=badges, border_width=2.0)
    a_of = d.match.a_of()
    for c in d.concats:
        change = c.change
        fill = ADDED if change > 0 else REMOVED if change < 0 else SAME
        text = f"A {c.a.rescales} → B {c.b.rescales}" if change else f"{c.a.rescales} rescale(s), both"
        looks.nodes[c.a.node] = NodeLook(fill=fill, badges=(Badge(text, fill if change else "#546e7a"),),
                                         border_width=2.0)
        in_b = {a_of.get(t, t) for t in c.b.rescaled}
        for x in in_b - set(c.a.rescaled):
            looks.edges[(x, c.a.node)] = EdgeLook(ADDED, 3.2)
        for x in set(c.a.rescaled) - in_b:
            looks.edges[(x, c.a.node)] = EdgeLook(REMOVED, 3.2, dashed=True)
    looks.edge_default = EdgeLook("#d5dbe1", 1.0)
    looks.legend = Legend("compare", "Compare: red/green Concat = B adds/removes rescales")
    return looks


def concat_text(d: ModelDiff, node: str) -> str:
    """One Concat on both sides, for the inspector ("" when B has no such Concat)."""
    c = next((c for c in d.concats if c.a.node == node), None)
    if c is None:
        return f"Comparison ({d.b.name}): no matching Concat" if d.b is not None else ""
    lines = [f"Comparison with {d.b.name}: rescales A {c.a.rescales} → B {c.b.rescales}"
             + (f" ({c.change:+d})" if c.change else "")]
    for label, s in (("A", c.a), ("B", c.b)):
        if s.why:
            lines.append(f"  {label}: {s.why}")
    return "\n".join(lines)


def node_text(d: ModelDiff, outputs) -> str:
    """A node's output tensors on both sides, for the inspector."""
    by = {t.a: t for t in d.tensors}
    lines = []
    for o in outputs:
        t = by.get(o)
        if t is None:
            if o in d.match.only_a:
                lines.append(f"{o}: not in {d.b.name} (unmatched)")
            continue
        ratio = f", B/A {t.ratio:.3f}" if t.ratio is not None else ""
        name = f" (B: {t.b})" if t.b != t.a else ""
        line = f"{o}{name}: scale A {_s(t.scale_a)} → B {_s(t.scale_b)}{ratio}"
        if t.domain_changed:
            line += (f"; shares its scale with {', '.join(t.shares_a) or 'nothing'} in A, "
                     f"{', '.join(t.shares_b) or 'nothing'} in B")
        if t.precision_a != t.precision_b:
            line += f"; {t.precision_a} in A, {t.precision_b} in B"
        lines.append(line)
    return ("Comparison with " + d.b.name + ":\n" + "\n".join(lines)) if lines else ""


def _s(x):
    return "float" if x is None else f"{x:.4g}"
