"""Make the pair ``qtquant diff`` compares in docs/compare-and-gate.md: one float model quantized by
qtquant (``qtquant fix --auto-share``) and by onnxruntime's ``quantize_static`` (benchmarks/make_qdq.py,
on the very samples qtquant calibrates on), then run ``qtquant diff`` on them and check that each
side's per-slice SQNR equals what ``qtquant analyze`` prints for that file alone.

    python3 benchmarks/diff_pair.py [--model PATH] [--input-shape images=1x3x320x320] [--calib DIR]
                                    [--out DIR] [--report OUT.html]

Defaults: YOLOv8n at 320x320 on the shared photos, files written to /tmp/cmp (y_qt.onnx, y_ort.onnx).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_common import SHARED  # noqa: E402
from make_qdq import make_qdq  # noqa: E402
from qtquant.cli import build_parser, main as qtquant  # noqa: E402
from qtquant.cli.common import calib_config_from_args  # noqa: E402


def _json(argv) -> dict:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = qtquant(argv)
    if rc != 0:
        raise SystemExit(f"qtquant {' '.join(argv)}: exit {rc}")
    return json.loads(buf.getvalue())


def _slices(doc) -> dict:
    out = {}
    for o, v in doc["summary"]["fidelity"]["outputs"].items():
        out[o] = v["whole"]["sqnr_db"]
        out.update({s["label"]: s["sqnr_db"] for s in v["slices"]})
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=str(SHARED / "models" / "yolov8n_320.onnx"))
    p.add_argument("--input-shape", default="images=1x3x320x320")
    p.add_argument("--calib", default=str(SHARED / "calib"))
    p.add_argument("--out", default="/tmp/cmp")
    p.add_argument("--report", default=None, help="also write the diff's HTML report here")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    qt, ort = out / "y_qt.onnx", out / "y_ort.onnx"
    common = ["--input-shape", args.input_shape, "--calib", args.calib]

    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        rc = qtquant(["fix", args.model, "--auto-share", "-o", str(qt), "--no-fidelity", *common])
    if rc != 0:
        raise SystemExit(f"qtquant fix: exit {rc}")
    print(f"wrote {qt}: qtquant fix --auto-share ({time.perf_counter() - t0:.1f} s)")
    # make_qdq takes the samples from qtquant's own calibration options (same source, seed, count, holdout)
    cfg = calib_config_from_args(build_parser().parse_args(["analyze", args.model, *common]))
    shapes = [args.input_shape]
    info = make_qdq(args.model, str(ort), shapes, cfg)
    print(f"wrote {ort}: onnxruntime quantize_static on {info['calibration_samples']} samples "
          f"({info['seconds']:.1f} s)")

    diff = _json(["diff", str(qt), str(ort), *common, "--json", *(["--report", args.report] if args.report else [])])
    alone = {"a": _slices(_json(["analyze", str(qt), *common, "--json"])),
             "b": _slices(_json(["analyze", str(ort), *common, "--json"]))}
    t = diff["tensors"]
    print(f"diff: {t['matched']} tensors matched ({t['matched_by_structure']} by structure), {t['changed']} "
          f"changed, {len(t['only_a'])} only in A, {len(t['only_b'])} only in B; rescales "
          f"{diff['a']['rescales']} (qtquant) vs {diff['b']['rescales']} (onnxruntime)")
    worst = 0.0
    print(f"{'slice':<16} {'A diff':>8} {'A alone':>8} {'B diff':>8} {'B alone':>8}")
    for s in diff["slices"]:
        da, db = s["sqnr_db_a"], s["sqnr_db_b"]
        ra, rb = alone["a"][s["slice"]], alone["b"][s["slice"]]
        worst = max(worst, abs(da - ra), abs(db - rb))
        print(f"{s['slice']:<16} {da:8.2f} {ra:8.2f} {db:8.2f} {rb:8.2f}")
    print(f"largest difference between diff and analyze alone: {worst:.4f} dB")
    return 0 if worst <= 0.05 else 1


if __name__ == "__main__":
    sys.exit(main())
