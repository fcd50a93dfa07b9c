"""Blind reproduction of the RDK X5 compiler's requantize lists (issue 49).

For each reference compile log (``../shared/horizon-logs``, hb_mapper 1.24.3 / hbdk 3.49.15,
bayes-e): a copy of the log with every ``HzRequantize`` row removed is opened with its model
(the Ultralytics graph at the log's input size, random weights, cut where the log's graph
ends: ``benchmarks/perf_fit_models.py``), its thresholds as the scales of the tensors they give
(``Session.set_compiler_log``, as a QDQ file's scales are applied; the tensors the log gives no
threshold keep a synthetic calibration's range), and qtquant's predicted requantize set -- the
Concat inputs that need a rescale under the march's Concat rule -- is compared with the full
log's.  Per model: requantized in the log, predicted, agree, missed, extra; then precision and
recall over all eight.  ``--rule`` prices another :class:`~qtquant.vocab.ConcatScaleRule` on the
same scales instead of the march's.

    /tmp/ulvenv/bin/python benchmarks/perf_fit_models.py /tmp/hzmodels yolov8n yolov9t yolov8n-seg \\
        yolov5nu yolo11n yolov8n-cls yolov10n yolo12n        # a venv with ultralytics + onnx
    python benchmarks/hz_requantize_blind.py --models /tmp/hzmodels [--logs DIR] [--rule RULE]

A requantize row whose cut name ends more than one tensor's is placed by the row printed after
it (its consumer reads exactly one of them), so the log's set is the whole list.  The compiler
prints each Softmax it decomposes as six rows (ReduceMax, Sub, Exp, ReduceSum, Div_reciprocal,
Div_mul) that are no graph node: YOLO12n's eight make 48 of its 383 rows, under the matcher's
floor for a log of this model (:data:`~qtquant.horizon.match.MIN_MATCHED_FRACTION`); that floor
is lowered by what those rows account for, and the line says so.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's qtquant
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import SHARED  # noqa: E402

from qtquant.app import open_model  # noqa: E402
from qtquant.app.session import Options  # noqa: E402
from qtquant.concat import analyze_concats  # noqa: E402
from qtquant.domains import build_domains  # noqa: E402
from qtquant.horizon.log import REQUANTIZE_TYPE, read_compile_log  # noqa: E402
from qtquant.horizon import match as log_match  # noqa: E402
from qtquant.horizon.match import match_compile_log  # noqa: E402
from qtquant.vocab import ConcatScaleRule  # noqa: E402

# log name -> the model file perf_fit_models.py builds
MODELS = {
    "yolov8n": "yolov8n_640_cut.onnx",
    "yolov9t": "yolov9t_640_cut.onnx",
    "yolov8n_seg": "yolov8n-seg_640_cut.onnx",
    "yolov5nu": "yolov5nu_640_cut.onnx",
    "yolo11n": "yolo11n_640_cut.onnx",
    "yolov8n_cls": "yolov8n-cls_224_cut.onnx",
    "yolov10n": "yolov10n_640_cut.onnx",
    "yolo12n": "yolo12n_640_cut.onnx",
}


def strip_requantize_rows(src: Path, dst: Path) -> int:
    """``src`` without its HzRequantize rows, written to ``dst``; how many were removed."""
    kept, removed = [], 0
    for line in src.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True):
        cols = line.split()
        if len(cols) >= 4 and cols[3] == REQUANTIZE_TYPE:
            removed += 1
            continue
        kept.append(line)
    dst.write_text("".join(kept), encoding="utf-8")
    return removed


def log_requantized(graph, match) -> set[str]:
    """The full log's requantized tensors; a cut name that ends several tensors' is placed by its
    consumer (the node row printed after it), which reads one of them."""
    found = set(match.requantized)
    for miss in match.unmatched:
        if miss.what != "requantize" or not miss.candidates:
            continue
        row = next(r for r in match.log.requantized if r.line == miss.line)
        consumer = next((n for n, lr in match.nodes.items() if lr.name == row.consumer), None)
        reads = [t for t in miss.candidates if consumer and t in graph.nodes[consumer].inputs]
        if len(reads) == 1:
            found.add(reads[0])
    return found


SOFTMAX_ROWS = ("/ReduceMax", "/Sub", "/Exp", "/ReduceSum", "/Div_reciprocal", "/Div_mul")


def softmax_rows(graph, log) -> int:
    """The log's rows of Softmax decompositions: ``<prefix>/ReduceMax`` ... where ``<prefix>/Softmax``
    is a graph node and the row's own name is not."""
    n = 0
    for row in log.nodes:
        end = next((e for e in SOFTMAX_ROWS if row.name.endswith(e)), None)
        if end and row.name not in graph.nodes and row.name[: -len(end)] + "/Softmax" in graph.nodes:
            n += 1
    return n


def matched(graph, log, note: list[str]):
    """``match_compile_log``, its floor lowered by the log's Softmax-decomposition rows (said in ``note``)."""
    extra = softmax_rows(graph, log)
    if not extra:
        return match_compile_log(graph, log)
    floor = log_match.MIN_MATCHED_FRACTION
    placeable = sum(1 for r in log.nodes if not r.name.startswith(log_match.PREPROCESS_PREFIX))
    log_match.MIN_MATCHED_FRACTION = floor * (placeable - extra) / placeable
    try:
        m = match_compile_log(graph, log)
    finally:
        log_match.MIN_MATCHED_FRACTION = floor
    if log_match.MIN_MATCHED_FRACTION * placeable > len(m.nodes) and not note:
        note.append(f"{extra} Softmax-decomposition rows are no graph node (matcher floor lowered for them)")
    return m


def predicted(session, rule: ConcatScaleRule | None) -> set[str]:
    """The Concat inputs qtquant rescales: the session's analysis, or ``rule``'s on its scales."""
    if rule is None:
        concats = session.concats()
    else:
        g, cal = session.graph, session.calibration
        fixed = session.compiler_log.ranges() if session.compiler_scales else None
        dm = build_domains(g, cal.ranges, fixed=fixed, scheme=session.options.scheme, concat_rule=rule)
        concats = analyze_concats(g, dm)
    return {m.tensor for c in concats for m in c.inputs if m.needs_rescale}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", type=Path, default=Path("/tmp/hzmodels"), help="perf_fit_models.py's OUT_DIR")
    ap.add_argument("--logs", type=Path, default=SHARED / "horizon-logs")
    ap.add_argument("--rule", choices=[r.value for r in ConcatScaleRule], default=None,
                    help="price this Concat rule instead of the march's (bayes-e)")
    ap.add_argument("--calib-count", type=int, default=1,
                    help="synthetic samples for the tensors the log gives no threshold (default 1)")
    ap.add_argument("--own-scales", action="store_true",
                    help="qtquant's own (synthetic) calibration instead of the log's thresholds: "
                         "the rule from the graph alone")
    ap.add_argument("--observer", default=None, help="the calibration observer (default: qtquant's, minmax)")
    ap.add_argument("--only", nargs="*", default=None, help="these logs only (names as in MODELS)")
    args = ap.parse_args(argv)
    rule = ConcatScaleRule(args.rule) if args.rule else None
    opts = Options(march="bayes-e")
    opts = replace(opts, calib=replace(opts.calib, count=args.calib_count,
                                       **({"observer": args.observer} if args.observer else {})))
    print(f"Concat rule: {rule.value if rule else 'the march profile (bayes-e)'}; "
          + (f"qtquant's own calibration ({opts.calib.observer}, {args.calib_count} synthetic samples), "
              "no threshold from the logs"
             if args.own_scales else "thresholds from the logs with every HzRequantize row removed"))
    print(f"{'model':12s} {'in log':>6s} {'predicted':>9s} {'agree':>5s} {'missed':>6s} {'extra':>5s}  notes")
    tot_log = tot_pred = tot_agree = 0
    worst = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, model in MODELS.items():
            if args.only and name not in args.only:
                continue
            log_path = args.logs / f"hb_mapper_log_{name}.txt"
            mpath = args.models / model
            if not mpath.is_file() or not log_path.is_file():
                print(f"{name:12s} skipped: {mpath if not mpath.is_file() else log_path} not found")
                continue
            blind = Path(tmp) / log_path.name
            strip_requantize_rows(log_path, blind)
            session = open_model(mpath, options=opts)
            session.run_calibration()
            note: list[str] = []
            blind_match = matched(session.graph, read_compile_log(blind), note)
            assert not blind_match.requantized  # nothing of the answer is left in the blind log
            session.set_compiler_log(blind_match, scales=not args.own_scales)
            full = matched(session.graph, read_compile_log(log_path), note)
            want, got = log_requantized(session.graph, full), predicted(session, rule)
            agree, missed, extra = want & got, want - got, got - want
            tot_log, tot_pred, tot_agree = tot_log + len(want), tot_pred + len(got), tot_agree + len(agree)
            worst = max(worst, len(missed) + len(extra))
            notes = "; ".join([*note, *(f"missed {t}" for t in sorted(missed)), *(f"extra {t}" for t in sorted(extra))])
            print(f"{name:12s} {len(want):6d} {len(got):9d} {len(agree):5d} {len(missed):6d} {len(extra):5d}  {notes}")
    precision = tot_agree / tot_pred if tot_pred else float("nan")
    recall = tot_agree / tot_log if tot_log else float("nan")
    print(f"{'all':12s} {tot_log:6d} {tot_pred:9d} {tot_agree:5d} {tot_log - tot_agree:6d} {tot_pred - tot_agree:5d}")
    print(f"precision {precision:.3f}, recall {recall:.3f}; most off in one model: {worst}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
