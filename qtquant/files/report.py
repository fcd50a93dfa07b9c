"""The analysis report shared by ``analyze``, ``fix`` and the GUI: a stable JSON form and a text table."""

from __future__ import annotations

from typing import TYPE_CHECKING

import math

from ..model.qdqcheck import breaches_note
from ..model.shapes import format_shape
from ..base.tables import text_table
from ..base.vocab import ConcatScaleRule

if TYPE_CHECKING:
    from ..calib.state import SessionState
    from ..model.graphmodel import Graph

__all__ = ["SCHEMA_VERSION", "analysis_dict", "concat_table_text", "member_dict", "cut_text", "calibration_dict",
           "calibration_text"]

SCHEMA_VERSION = 1


def _num(x):
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def member_dict(m, graph) -> dict:
    t = graph.tensors[m.tensor]
    return {
        "tensor": m.tensor,
        "index": m.index,
        "producer": m.producer,
        "shape": list(t.shape) if t.shape else None,
        "scale": _num(m.scale),
        "zero_point": m.zero_point,
        "min": _num(m.lo),
        "max": _num(m.hi),
        "absmax": _num(m.absmax),
        "domain": m.domain,
        "bits_lost": _num(m.bits_lost_now),
        "bits_lost_if_shared": _num(m.bits_lost_if_shared),
        "needs_rescale": m.needs_rescale,
        "constant": m.constant,
        "other_consumers": m.other_consumers,
        # Per-channel activation scales read from a QDQ file, and the worst channel against the reference.
        "channel_scales": list(m.channel_scales) if m.channel_scales is not None else None,
        "worst_channel_ratio": _num(m.worst_channel_ratio),
    }


def analysis_dict(session, concats=None, perf=None, fidelity=None, extra=None) -> dict:
    """The stable ``--json`` document (DESIGN §6)."""
    g = session.graph
    concats = session.concats() if concats is None else concats
    rescale_us = perf.rescale_cost_by_concat() if perf is not None else {}
    items = []
    for c in concats:
        items.append({
            "node": c.node,
            "axis": c.axis,
            "inputs": [member_dict(m, g) for m in c.inputs],
            "output": member_dict(c.output, g),
            "ratio": _num(c.ratio),
            "rescales": c.rescales,
            "rescale_cost_us": _num(rescale_us.get(c.node, 0.0)) if perf is not None else None,
            "feeds_output": c.feeds_output,
            "worst_channel_ratio": _num(c.worst_channel_ratio),
            "output_float": c.output_float,
            "export_float": c.export_float,  # the export leaves the output in float: no rescale
            "reference_input": c.reference_input,
            "written_inputs": list(c.written),  # written at the output's scale by their producers
            # The requantize nodes a compiler inserts, under its own names (X5 hb_mapper, perf_model).
            "rescale_nodes": [{"input": m.index, "tensor": m.tensor, "x5": x5, "perf_model": pm}
                              for m, (x5, pm) in zip((m for m in c.inputs if m.needs_rescale), c.rescale_nodes())],
            "rule_note": c.rule_note or None,
            "notes": list(c.notes),
        })
    summary = {
        "concats": len(concats),
        "mismatched_concats": sum(1 for c in concats if c.rescales),
        "rescales": sum(c.rescales for c in concats),
        "latency_ms": _num(perf.total_ms) if perf is not None else None,  # the static estimate (BPU)
        "board_latency_ms": _num(perf.board_ms) if perf is not None else None,  # the board estimate, 1 thread
        "fps": _num(perf.fps) if perf is not None and perf.total_us > 0 else None,  # none: nothing priced
        "ddr_bytes": perf.ddr_bytes if perf is not None else None,
        "rescale_cost_us": _num(perf.rescale_us) if perf is not None else None,
        "march": session.options.march if perf is not None else None,
        "concat_rule": str(_rule(session)),
        "sqnr_db": None,
    }
    if fidelity is not None:
        summary["sqnr_db"] = {k: _num(v) for k, v in fidelity.sqnr_db.items()}
        summary["cosine"] = {k: _num(v) for k, v in fidelity.cosine.items()}
        # Per output and slice, with the sample count and no-signal reasons (DESIGN §6).
        summary["fidelity"] = fidelity.to_dict()
    doc = {
        "schema_version": SCHEMA_VERSION,
        "model": str(g.path) if g.path else None,
        "model_sha256": g.sha256,
        "input_shapes": {k: list(v) for k, v in g.input_shapes.items()},
        "cut": list(g.cut),  # --cut: the graph ends at these tensors ([] = the whole file)
        "opset": g.opset,
        "source_opset": g.source_opset,  # the file's, where it was older and raised on open (else null)
        "source_dtype": g.source_dtype,  # "float16" where the file computed in it and was widened on open
        "quantized_input": session.quantized_file,
        # why the QDQ file opened is not valid ONNX as it is (per-channel Q/DQ before opset 13), else null
        "quantized_input_invalid": qdq_file_note(g) or None,
        "scheme": session.options.scheme.value,
        "policy": session.options.policy.value,
        "calibration": calibration_dict(session),
        "groups": [list(gr) for gr in session.groups.as_lists()],
        # tensor -> int16 / float (every other tensor is int8), and what that costs on the target
        "precision": {"tensors": session.options.precision.to_dict(),
                      "cost": perf.precision.to_dict() if perf is not None and perf.precision is not None else None},
        "concats": items,
        "summary": summary,
    }
    if extra:
        doc.update(extra)
    return doc


def cut_text(graph: Graph) -> str:
    """``, cut at N tensors`` for a graph opened with --cut (empty for the whole file)."""
    cut = graph.cut
    return f", cut at {len(cut)} tensor{'s' if len(cut) != 1 else ''} (--cut)" if cut else ""


def opset_note(graph) -> str:
    """What opening an old model did to it (``graph.source_opset`` set)."""
    return (f"the file is opset {graph.source_opset}; it was raised to {graph.opset} on open (onnx's version "
            "converter): the analysis, the fidelity check and the export use the converted model")


def qdq_file_note(graph: Graph) -> str:
    """What is wrong with the QDQ file ``graph`` was read from, as ONNX ("" where nothing is)."""
    info = graph.qdq_info
    return breaches_note(info.opset, info.breaches) if info is not None else ""


def dtype_note(graph) -> str:
    """What opening a float16 model did to it (``graph.source_dtype`` set)."""
    return (f"the file computes in {graph.source_dtype}; it was widened to float32 on open (its weights exactly), as "
            "int8 compilers quantize it: the analysis, the fidelity check (its float reference too) and the export "
            "use the float32 model")


def _rule(session):
    """The Concat output-scale rule the analysis was made under (the march's)."""
    return session.domains.concat_rule


def points_note(session) -> str | None:
    """When the chosen march's fusion rule would place the quantization points differently from
    the default march's, which the graph, calibration and export follow: say so (the march then
    prices the latency only)."""
    from ..model.ops import default_fusion_rule, fused_into_producer
    from ..perf import load_march
    from ..base.vocab import DEFAULT_MARCH

    march = session.options.march
    if session.quantized_file or not march or march == DEFAULT_MARCH:
        return None
    try:
        rule = load_march(march).fusion
    except Exception:  # a bad profile is reported where it is loaded, not here
        return None
    g = session.graph
    mine, default = fused_into_producer(g, rule), fused_into_producer(g)
    folds, observes = mine & set(g.observed_tensors), default - mine
    if not folds and not observes:
        return None
    parts = []
    if folds:
        extra = ", ".join(sorted(rule.write_back - default_fusion_rule().write_back))
        parts.append(f"fold {len(folds)} of them into their layers" + (f" (its write-back also applies {extra})"
                                                                        if extra else ""))
    if observes:
        parts.append(f"observe {len(observes)} tensors that {DEFAULT_MARCH}'s leaves inside a layer")
    return (f"quantization points follow {DEFAULT_MARCH}'s fusion rule (read from an X5 compile log): "
            f"{len(g.observed_tensors)} observed tensors. {march}'s own rule would {' and '.join(parts)}; "
            f"on {march} it prices the latency only")


def _rule_text(rule) -> str:
    if rule == ConcatScaleRule.WIDEST_INPUT:
        return "the widest input's (rule widest-input); only the other inputs are rescaled"
    if rule == ConcatScaleRule.PRODUCERS_WRITE:
        return ("its own calibrated scale (rule producers-write); an input computed for the Concat alone is written "
                "at it by its producer (=), every other input whose scale differs is rescaled")
    return "its own calibrated scale (rule own); every input whose scale differs is rescaled"


def _fmt_scale(s):
    return "-" if s is None else f"{s:.4g}"


def concat_table_text(session, concats=None, perf=None) -> str:
    g = session.graph
    concats = session.concats() if concats is None else concats
    rescale_us = perf.rescale_cost_by_concat() if perf is not None else {}
    rows = []
    for c in sorted(concats, key=lambda c: -c.ratio):
        scales = ", ".join(_fmt_scale(m.scale) + ("*" if m.needs_rescale else "")
                           + ("^" if m.index == c.reference_input and not c.output_float else "")
                           + ("=" if m.index in c.written else "") for m in c.inputs)
        worst = max((m.bits_lost_if_shared for m in c.inputs), default=0.0)
        wch = c.worst_channel_ratio
        rows.append((c.node, str(len(c.inputs)), f"{c.ratio:.2f}", str(c.rescales),
                     "-" if wch is None else f"{wch:.2f}", f"{worst:.2f}",
                     f"{rescale_us.get(c.node, 0.0):.1f}" if perf is not None else "-",
                     f"{scales} → {'float' if c.output_float or c.export_float else _fmt_scale(c.output.scale)}"))
    lines = [text_table(rows, ("concat", "inputs", "ratio", "rescales", "worst channel", "worst bits if shared",
                               "rescale µs", "scales (in → out)"), "lrrrrrrl", rule=True)]
    # Only the notes that explain a rescale count; the rest are in --json and the inspector.
    for c in sorted(concats, key=lambda c: -c.ratio):
        if c.rescales:
            lines.extend(f"note: {c.node}: {n}" for n in c.notes)
    names = [(c.node, n) for c in concats for n in c.rescale_nodes()]
    if names:
        lines.append("")
        lines.append(f"rescale nodes ({len(names)}), as the compilers name them (X5 hb_mapper / perf_model):")
        lines.extend(f"  {x5} / {pm}" for _, (x5, pm) in names)
    kept = [c.node for c in concats if c.export_float]
    if kept:
        lines.append(f"note: the export leaves the output of {', '.join(kept)} in float: its inputs keep their own "
                     "scales, so it has no rescale; the simulator prices it as a copy into the float output")
    n_float = sum(1 for c in concats if c.output_float)
    if n_float:
        lines.append(f"note: {n_float} Concats have a float output in the file; their inputs were compared with "
                     "the widest input, whose scale a compiler would give the output")
    n_mis = sum(1 for c in concats if c.rescales)
    lines.append("")
    lines.append(f"{len(concats)} Concats, {n_mis} mismatched, {sum(c.rescales for c in concats)} rescales "
                 f"(* = input needs a rescale" + ("; ^ = the input whose scale the output takes"
                                                  if any(c.reference_input is not None and not c.output_float
                                                         for c in concats) else "")
                 + ("; = = written at the output's scale by its producer" if any(c.written for c in concats) else "")
                 + ")")
    in_float = [c for c in concats if c.output_float and c.rescales]
    if in_float:  # fix counted these as none: its export dequantizes their inputs into the float output
        k = sum(c.rescales for c in in_float)
        it = "it" if k == 1 else "them"
        lines.append(f"  {k} of these rescales {'is' if k == 1 else 'are'} at {', '.join(c.node for c in in_float)}, "
                     f"whose output the file leaves in float: qtquant fix and the app count {it} "
                     f"as none (their export dequantizes the inputs at their own scales), so this file's count is "
                     f"{sum(c.rescales for c in concats) - k} by theirs")
    lines.append(f"Concat output scale on {session.options.march}: {_rule_text(_rule(session))}")
    points = points_note(session)
    if points:
        lines.append(f"note: {points}")
    if perf is not None and perf.total_us <= 0:
        lines.append(f"latency: nothing for the simulator to price on {session.options.march} (no layer of the "
                     "main graph runs on the BPU)")
    elif perf is not None:
        lines.append(f"static estimate {perf.total_ms:.3f} ms (BPU, {perf.fps:.1f} FPS), board estimate "
                     f"{perf.board_ms:.3f} ms (1 thread) on {session.options.march}, "
                     f"rescales cost {perf.rescale_us:.1f} µs, DDR {perf.ddr_bytes / 1e6:.2f} MB/frame")
    shapes = ", ".join(f"{k}={format_shape(v) or 'scalar'}" for k, v in g.input_shapes.items())
    lines.append(f"model {g.path.name if g.path else '?'} ({len(g.nodes)} nodes, {shapes}{cut_text(g)}); "
                 + calibration_text(session))
    if g.source_opset is not None:
        lines.append(f"note: {opset_note(g)}")
    if invalid := qdq_file_note(g):
        lines.append(f"note: {invalid}")
    if g.source_dtype is not None:
        lines.append(f"note: {dtype_note(g)}")
    for note in session.calibration.notes if session.calibration is not None else ():
        lines.append(f"note: {note}")
    return "\n".join(lines)


def calibration_dict(session: SessionState) -> dict | None:
    """What the scales rest on, for the JSON of analyze and perf (null: not calibrated)."""
    cal = session.calibration
    if cal is None:
        return None
    return {
        "source": cal.config.source,
        # every source of a merged statistics file (qtquant calibrate --merge), else [source]
        "sources": list(cal.sources or (cal.config.source,)),
        "observer": cal.config.observer,
        "samples": cal.batches,
        "check_samples": len(cal.holdout),
        "check_in_sample": cal.in_sample,
        # --observer search / search-per-node: each method's figure and the choice (else null)
        "search": cal.search.to_dict() if cal.search is not None else None,
    }


def calibration_text(session: SessionState) -> str:
    """What the scales (and so the rescale count) rest on: 'calibrated with minmax on 7 samples of
    DATA', the QDQ file's own scales, or nothing yet."""
    if session.quantized_file:
        return "scales read from the QDQ file"
    cal = session.calibration
    if cal is None:
        return "not calibrated"
    data = "synthetic data (no --calib given)" if cal.config.synthetic and not cal.sources else cal.data_label()
    text = f"calibrated with {cal.method_text} on {cal.batches} samples of {data}"
    if session.compiler_ranges is not None and session.compiler_log is not None:
        given = sum(1 for t in session.graph.observed_tensors if t in session.compiler_log.thresholds)
        text += f", {given} tensors' scales the compile log's thresholds"
    return text
