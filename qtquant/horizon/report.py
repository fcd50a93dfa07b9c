"""What a session's compile log says, as text (the CLI) and as JSON (``analyze --json``).

``session`` is an :class:`~qtquant.app.Session` (read, never changed): its ``compiler_log`` (a
:class:`~qtquant.horizon.match.LogMatch`), ``compiler_ranges`` and Concat analysis.
"""

from __future__ import annotations

from qtquant.horizon.reconcile import (EstimateComparison, Reconciliation, Verdict, compare_estimate,
                                       reconcile_concats)
from qtquant.base.tables import fmt_num, text_table

__all__ = ["session_reconciliation", "session_estimate", "compiler_log_dict", "compiler_log_text",
           "scales_text", "COSINES_SHOWN"]

COSINES_SHOWN = 10
"""Rows of the lowest-cosine list in the text form (``--json`` has them all)."""


def session_reconciliation(session) -> Reconciliation | None:
    match = session.compiler_log
    return None if match is None else reconcile_concats(match, session.concats())


def session_estimate(session, perf) -> EstimateComparison | None:
    """The log's static estimate beside ``perf`` (the simulation of the session's scales)."""
    if session.compiler_log is None or perf is None:
        return None
    return compare_estimate(session.compiler_log, perf.total_us, perf.ddr_bytes)


def scales_text(session) -> str:
    """Which scales the session runs on, as far as the log is concerned."""
    m = session.compiler_log
    if m is None:
        return ""
    observed = session.graph.observed_tensors
    given = sum(1 for t in observed if t in m.thresholds)
    name = m.log.path.rsplit("/", 1)[-1]
    if session.compiler_ranges is None:
        return f"compile log {name}: shown beside qtquant's own scales (its thresholds not used)"
    return (f"compile log {name}: the compiler's thresholds fix {given} of {len(observed)} observed tensors' "
            f"scales; the other {len(observed) - given} keep qtquant's calibration (the log prints no threshold "
            "for a value read only as a second input or by nobody)")


def _thr(x) -> str:
    return fmt_num(x, 4, missing="-")


def _reconciliation_lines(rec: Reconciliation) -> list[str]:
    rows, details = [], []
    quiet = 0
    for c in rec.concats:
        if not c.compiler_list and not c.predicted_list:
            quiet += 1
            continue
        rows.append((c.node, str(len(c.compiler_list)), str(len(c.predicted_list)), str(c.count(Verdict.AGREE)),
                     str(c.count(Verdict.MISSED)), str(c.count(Verdict.EXTRA))))
        for v in c.inputs:
            if v.verdict is not Verdict.AGREE:
                details.append(f"  {v.verdict.value}: {c.node} input {v.index} {v.tensor}: compiler threshold "
                               f"{_thr(v.compiler_threshold)} -> output {_thr(c.compiler_output_threshold)}; "
                               f"qtquant |max| {_thr(v.qtquant_threshold)} -> output "
                               f"{_thr(c.qtquant_output_threshold)}"
                               + ("" if v.compiler_threshold is not None else
                                  " (the log prints no threshold for it: qtquant's calibration decides)"))
    lines = [f"requantize per Concat: compiler (the log) {rec.compiler_total}, qtquant {rec.predicted_total}; "
             f"agree {rec.total(Verdict.AGREE)}, missed {rec.total(Verdict.MISSED)}, "
             f"extra {rec.total(Verdict.EXTRA)}"
             + (f" ({rec.inferred_inputs} input(s) take the Concat output's threshold: the log prints none for them "
                "and does not requantize them)" if rec.inferred_inputs else "")]
    if rows:
        lines.append(text_table(rows, ("Concat", "compiler", "qtquant", "agree", "missed", "extra"), rule=True))
    if quiet:
        lines.append(f"{quiet} more Concat(s): neither requantizes an input")
    lines += details
    if rec.not_in_log:
        lines.append(f"{len(rec.not_in_log)} Concat(s) not in the log (past its graph's end?): "
                     + ", ".join(rec.not_in_log[:5]) + (", ..." if len(rec.not_in_log) > 5 else ""))
    if rec.elsewhere:
        lines.append("requantized by the compiler, not a reconciled Concat input: " + ", ".join(rec.elsewhere))
    return lines


def _estimate_lines(cmp: EstimateComparison | None) -> list[str]:
    if cmp is None:
        return []
    ddr = "" if cmp.sim_ddr_bytes is None else (
        f"; DDR: log {cmp.log_ddr_bytes / 1e6:.2f} MB, simulator {cmp.sim_ddr_bytes / 1e6:.2f} MB "
        f"({fmt_num(None if cmp.ddr_error is None else 100 * cmp.ddr_error, 1, signed=True)} %)")
    parts = f" ({cmp.log_subgraphs} BPU subgraphs added)" if cmp.log_subgraphs > 1 else ""
    return [f"static estimate: log{parts} {cmp.log_latency_us / 1000:.3f} ms, simulator "
            f"{cmp.sim_latency_us / 1000:.3f} ms ({fmt_num(100 * cmp.latency_error, 1, signed=True)} %){ddr}"]


def compiler_log_text(session, perf=None, cosines: int = COSINES_SHOWN) -> str:
    m = session.compiler_log
    if m is None:
        return ""
    lines = [scales_text(session)]
    lines += [f"log row not placed: {u.describe()}" for u in m.unmatched]
    lines += [f"thresholds differ for {c.tensor}: {c.kept.threshold:g} ({c.kept.node}) kept, {c.other:g} "
              f"({c.other_node})" for c in m.conflicts]
    made = [r for r in m.compiler_rows if not r.startswith("HZ_PREPROCESS_FOR_")]
    if made:
        lines.append(f"{len(made)} row(s) the compiler made from the graph's nodes (a Softmax rewritten, a reshape "
                     f"added): {', '.join(made[:4])}" + (", ..." if len(made) > 4 else ""))
    if m.reordered:
        lines.append(f"{len(m.reordered)} node(s) printed out of the graph's order (the compiler moved them), their "
                     f"thresholds not used: {', '.join(m.reordered[:4])}" + (", ..." if len(m.reordered) > 4 else ""))
    if m.shape_differs:
        lines.append("the log's input shape is not this model's: its thresholds are applied by name "
                     "(--compiler-log-any-shape)")
    lines += _reconciliation_lines(reconcile_concats(m, session.concats()))
    lines += _estimate_lines(session_estimate(session, perf))
    ranked = m.cosine_ranking()
    if ranked and cosines > 0:
        lines.append(f"lowest cosine similarity (the compiler's, quantized against float; {len(ranked)} nodes):")
        lines.append(text_table([(name, r.op_type, f"{r.cosine:.6f}") for name, r in ranked[:cosines]],
                                ("node", "type", "cosine"), rule=True))
    return "\n".join(lines)


def compiler_log_dict(session, perf=None) -> dict | None:
    """The ``compiler_log`` part of ``analyze --json`` (null without a log)."""
    m = session.compiler_log
    if m is None:
        return None
    rec = reconcile_concats(m, session.concats())
    cmp = session_estimate(session, perf)
    d = m.log.deps
    return {
        "path": m.log.path,
        "scales_used": session.compiler_ranges is not None,
        "march": d.march, "hb_mapper_version": d.hb_mapper_version, "hbdk_version": d.hbdk_version,
        "input_names": list(d.input_names), "input_shapes": [list(s) for s in d.input_shapes],
        "calibration_type": d.calibration_type, "optimization": list(d.optimization),
        "optimize_level": d.optimize_level, "shape_differs": m.shape_differs,
        "thresholds": {t: {"threshold": th.threshold, "bits": th.bits, "scale": th.scale, "node": th.node,
                           "inferred": th.inferred}
                       for t, th in m.thresholds.items()},
        "unmatched": [{"printed": u.printed, "what": u.what, "kind": u.kind.value, "candidates": list(u.candidates),
                       "line": u.line} for u in m.unmatched],
        "conflicts": [{"tensor": c.tensor, "kept": c.kept.threshold, "kept_node": c.kept.node, "other": c.other,
                       "other_node": c.other_node} for c in m.conflicts],
        "requantized": list(m.requantized),
        "compiler_rows": list(m.compiler_rows),
        "reordered": list(m.reordered),
        "concats": [{"node": c.node, "compiler": list(c.compiler_list), "qtquant": list(c.predicted_list),
                     "agree": c.count(Verdict.AGREE), "missed": c.count(Verdict.MISSED),
                     "extra": c.count(Verdict.EXTRA),
                     "output": c.output, "compiler_output_threshold": c.compiler_output_threshold,
                     "qtquant_output_threshold": c.qtquant_output_threshold,
                     "inputs": [{"index": v.index, "tensor": v.tensor, "compiler": v.compiler,
                                 "qtquant": v.predicted, "verdict": v.verdict.value,
                                 "compiler_threshold": v.compiler_threshold, "inferred": v.inferred,
                                 "qtquant_threshold": v.qtquant_threshold} for v in c.inputs]}
                    for c in rec.concats],
        "totals": {"compiler": rec.compiler_total, "qtquant": rec.predicted_total,
                   "agree": rec.total(Verdict.AGREE), "missed": rec.total(Verdict.MISSED),
                   "extra": rec.total(Verdict.EXTRA), "inferred_inputs": rec.inferred_inputs},
        "concats_not_in_log": list(rec.not_in_log),
        "requantized_elsewhere": list(rec.elsewhere),
        "cosine": [{"node": n, "type": r.op_type, "cosine": r.cosine} for n, r in m.cosine_ranking()],
        "estimate": {"log_fps": m.log.estimate.fps, "log_latency_us": m.log.estimate.latency_us,
                     "log_ddr_bytes": m.log.estimate.ddr_bytes, "log_subgraphs": m.log.estimate.subgraphs,
                     "sim_latency_us": None if cmp is None else cmp.sim_latency_us,
                     "sim_ddr_bytes": None if cmp is None else cmp.sim_ddr_bytes,
                     "latency_error": None if cmp is None else cmp.latency_error,
                     "ddr_error": None if cmp is None else cmp.ddr_error},
    }
