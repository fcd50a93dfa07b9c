"""Rescale count and per-output SQNR: qtquant auto-share against plain onnxruntime quantize_static.

All variants calibrate on the same samples (qtquant's data source and split) and are scored on the
same held-back samples against the float model.  Every rescale count is read back from the QDQ
file itself (qtquant's QDQ import), not from qtquant's in-memory state.

  ort            onnxruntime quantize_static: QDQ, MinMax, int8 symmetric, per-channel weights
  qtquant        qtquant's own QDQ export without groups (the 'before')
  qtquant+auto   qtquant fix --auto-share (max 1 bit lost)
  ort+overrides  quantize_static again, fed qtquant's TensorQuantOverrides JSON

usage: python benchmarks/fix_quality.py [--model ../shared/models/yolov8n_320.onnx]
           [--input-shape images=1x3x320x320] [--calib ../shared/calib] [--mean .. --std ..]
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from make_qdq import make_qdq  # noqa: E402

from qtquant.quant.autoshare import auto_share  # noqa: E402
from qtquant.base.vocab import DEFAULT_AUTO_SHARE_MAX_BITS_LOST  # noqa: E402
from qtquant.calib import CalibConfig  # noqa: E402
from qtquant.export.overrides import load_overrides, write_overrides  # noqa: E402
from qtquant.export.qdq import export_qdq  # noqa: E402
from qtquant.fidelity.measure import sqnr_db  # noqa: E402
from qtquant.app import open_model  # noqa: E402
from qtquant.model.runtime import make_session  # noqa: E402
from qtquant.app import Options  # noqa: E402
from bench_common import SHARED  # noqa: E402


def rescales_in_file(path, shapes):
    s = open_model(path, shapes)
    cats = s.concats()
    return sum(c.rescales for c in cats), sum(1 for c in cats if c.rescales)


def outputs_of(path_or_model, feeds, names, base_dir=None):
    import onnx
    import onnxruntime as ort

    if isinstance(path_or_model, onnx.ModelProto):
        sess = make_session(path_or_model, base_dir)
    else:  # a file as a deployment would load it: default (full) graph optimizations
        sess = ort.InferenceSession(str(path_or_model), providers=["CPUExecutionProvider"])
    return [dict(zip(names, sess.run(names, f))) for f in feeds]


def sqnr_per_output(ref, test, names):
    out = {}
    for n in names:
        a = np.concatenate([r[n].ravel() for r in ref])
        b = np.concatenate([t[n].ravel() for t in test])
        out[n] = sqnr_db(a, b)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(SHARED / "models" / "yolov8n_320.onnx"))
    ap.add_argument("--input-shape", action="append", default=None)
    ap.add_argument("--calib", default=str(SHARED / "calib"))
    ap.add_argument("--calib-count", type=int, default=64)
    ap.add_argument("--holdout", type=int, default=2)
    ap.add_argument("--mean", default=None)
    ap.add_argument("--std", default=None)
    ap.add_argument("--auto-share-max-bits-lost", type=float, default=DEFAULT_AUTO_SHARE_MAX_BITS_LOST)
    args = ap.parse_args(argv)
    shapes = args.input_shape if args.input_shape is not None else ["images=1x3x320x320"]
    kw = {k: v for k, v in dict(mean=args.mean, std=args.std).items()
          if v is not None and k in CalibConfig.__dataclass_fields__}
    cfg = CalibConfig(source=args.calib, count=args.calib_count, holdout=args.holdout, **kw)

    rows = []
    with tempfile.TemporaryDirectory(prefix="qtquant-fixq-") as tmp:
        tmp = Path(tmp)
        t0 = time.perf_counter()
        s = open_model(args.model, shapes, Options(calib=cfg))
        s.run_calibration()
        t_cal = time.perf_counter() - t0
        feeds = s.calibration.holdout
        names = list(s.graph.outputs)
        ref = outputs_of(s.graph.model, feeds, names, s.graph.base_dir)
        print(f"model {Path(args.model).name} {' '.join(shapes)}: calibrated on {s.calibration.batches} samples "
              f"of {args.calib} in {t_cal:.1f} s, scoring on {len(feeds)} held-back samples")

        t0 = time.perf_counter()
        ort_path = tmp / "ort.onnx"
        make_qdq(args.model, ort_path, shapes, cfg)
        rows.append(("ort", ort_path, time.perf_counter() - t0))

        t0 = time.perf_counter()
        plain = tmp / "qtquant.onnx"
        export_qdq(s, plain)
        rows.append(("qtquant", plain, time.perf_counter() - t0))

        t0 = time.perf_counter()
        rep = auto_share(s, args.auto_share_max_bits_lost)
        fixed = tmp / "qtquant_auto.onnx"
        export_qdq(s, fixed)
        rows.append(("qtquant+auto", fixed, time.perf_counter() - t0))
        ov = write_overrides(s, tmp / "ov.json")

        t0 = time.perf_counter()
        ort_ov = tmp / "ort_overrides.onnx"
        make_qdq(args.model, ort_ov, shapes, cfg, load_overrides(ov))
        rows.append(("ort+overrides", ort_ov, time.perf_counter() - t0))

        print(f"auto-share: {len(rep.grouped)} Concats shared, {len(rep.skipped)} flagged: "
              + "; ".join(f"{c} ({r.split(': ')[-1]})" for c, r in rep.skipped))
        results = {}
        for label, path, secs in rows:
            r, m = rescales_in_file(path, shapes)
            q = sqnr_per_output(ref, outputs_of(path, feeds, names), names)
            results[label] = (r, m, q, secs)

    w = max(len(n) for n in names) + 10
    head = (f"{'variant':<14} {'rescales':>8} {'mismatched':>10} "
            + " ".join(f"{'SQNR ' + n + ' dB':>{w}}" for n in names))
    print()
    print(head + f" {'time s':>7}")
    print("-" * (len(head) + 8))
    for label, (r, m, q, secs) in results.items():
        print(f"{label:<14} {r:>8} {m:>10} " + " ".join(f"{q[n]:>{w}.2f}" for n in names) + f" {secs:>7.1f}")
    base_r = results["ort"][0]
    auto_r = results["qtquant+auto"][0]
    print()
    print(f"rescales: qtquant auto-share {auto_r} vs onnxruntime {base_r} "
          f"({auto_r / base_r:.2f}x)" if base_r else f"rescales: qtquant auto-share {auto_r} vs onnxruntime 0")
    for n in names:
        d = results["qtquant+auto"][2][n] - results["ort"][2][n]
        print(f"SQNR {n}: qtquant auto-share {results['qtquant+auto'][2][n]:.2f} dB vs onnxruntime "
              f"{results['ort'][2][n]:.2f} dB ({d:+.2f} dB)" if math.isfinite(d) else f"SQNR {n}: n/a")
    return 0


if __name__ == "__main__":
    sys.exit(main())
