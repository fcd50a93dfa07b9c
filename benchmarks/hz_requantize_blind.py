"""Blind reproduction of the RDK X5 compiler's requantize lists (issue 49).

For each reference compile log (``../shared/horizon-logs``, hb_mapper 1.24.3 / hbdk 3.49.15,
bayes-e): a copy of the log with every ``HzRequantize`` row removed is opened with its model
(the Ultralytics graph at the log's input size, random weights, cut where the log's graph
ends: ``benchmarks/hz_log_models.py``), its thresholds as the scales of the tensors they give
(``Session.set_compiler_log``, as a QDQ file's scales are applied; the tensors the log gives no
threshold keep a synthetic calibration's range), and qtquant's predicted requantize set -- the
Concat inputs that need a rescale under the march's Concat rule -- is compared with the full
log's.  Per model: requantized in the log, predicted, agree, missed, extra; then precision and
recall over all eight.  ``--rule`` prices another :class:`~qtquant.base.vocab.ConcatScaleRule` on the
same scales instead of the march's.

    /tmp/ulvenv/bin/python benchmarks/hz_log_models.py /tmp/hzmodels yolov8n yolov9t yolov8n-seg \\
        yolov5nu yolo11n yolov8n-cls yolov10n yolo12n        # a venv with ultralytics + onnx
    python benchmarks/hz_requantize_blind.py --models /tmp/hzmodels [--logs DIR] [--rule RULE]

The blind log is placed with ``infer=False``: the matcher would otherwise give a Concat input
that no row prints a threshold for, and that the log does not requantize, the output's threshold
-- in a log with no requantize row left, the answer itself.  Only printed thresholds count.
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
from qtquant.quant.concat import analyze_concats  # noqa: E402
from qtquant.quant.domains import build_domains  # noqa: E402
from qtquant.horizon.log import REQUANTIZE_TYPE, read_compile_log  # noqa: E402
from qtquant.horizon.match import match_compile_log  # noqa: E402
from qtquant.base.vocab import ConcatScaleRule  # noqa: E402

# log name -> the model file hz_log_models.py builds
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


def predicted(session, rule: ConcatScaleRule | None) -> set[str]:
    """The Concat inputs qtquant rescales: the session's analysis, or ``rule``'s on its scales."""
    if rule is None:
        concats = session.concats()
    else:
        g, cal = session.graph, session.calibration
        dm = build_domains(g, cal.ranges, fixed=session.compiler_ranges, scheme=session.options.scheme,
                           concat_rule=rule)
        concats = analyze_concats(g, dm)
    return {m.tensor for c in concats for m in c.inputs if m.needs_rescale}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", type=Path, default=Path("/tmp/hzmodels"), help="hz_log_models.py's OUT_DIR")
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
            blind_match = match_compile_log(session.graph, read_compile_log(blind), infer=False)
            assert not blind_match.requantized  # nothing of the answer is left in the blind log
            session.set_compiler_log(blind_match, scales=not args.own_scales)
            full = match_compile_log(session.graph, read_compile_log(log_path))
            want, got = set(full.requantized), predicted(session, rule)
            agree, missed, extra = want & got, want - got, got - want
            tot_log, tot_pred, tot_agree = tot_log + len(want), tot_pred + len(got), tot_agree + len(agree)
            worst = max(worst, len(missed) + len(extra))
            notes = "; ".join([*(f"missed {t}" for t in sorted(missed)), *(f"extra {t}" for t in sorted(extra))])
            print(f"{name:12s} {len(want):6d} {len(got):9d} {len(agree):5d} {len(missed):6d} {len(extra):5d}  {notes}")
    precision = tot_agree / tot_pred if tot_pred else float("nan")
    recall = tot_agree / tot_log if tot_log else float("nan")
    print(f"{'all':12s} {tot_log:6d} {tot_pred:9d} {tot_agree:5d} {tot_log - tot_agree:6d} {tot_pred - tot_agree:5d}")
    print(f"precision {precision:.3f}, recall {recall:.3f}; most off in one model: {worst}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
