"""The cost of exact int8 accumulation: where this CPU's default int8 kernels saturate, qtquant's
sessions carry ``session.x64quantprecision=1`` (qtquant.model.int8path); this times the exported file of a
real model with and without the entry, in one run.

For each model: session creation and the run over N samples, default options against qtquant's
(median of --repeat), their ratio, and the worst output SQNR of each against the float model (the
figures differ only where this CPU's default kernels saturate).  On any AVX2 or AVX-512 CPU the entry
swaps onnxruntime's u8s8 kernels for its u8u8 ones (on a VNNI CPU for nothing: the default is exact
there, so qtquant leaves it out).  Run it under ``qemu-x86_64 -cpu Haswell`` to see the AVX2 path
(emulated: the ratio there is of emulated instructions, not of a real AVX2 CPU's time).

    python3 benchmarks/int8_exact.py [--model PATH --input-shape NAME=1x3x320x320] [--samples 8] [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from bench_common import SHARED, sqnr_db  # noqa: E402
from qtquant.app import open_model  # noqa: E402
from qtquant.app.session import Options  # noqa: E402
from qtquant.calib.engine import CalibConfig  # noqa: E402
from qtquant.export.qdq import build_qdq_model  # noqa: E402
from qtquant.model.int8path import EXACT_INT8_ENTRY, host_int8_path  # noqa: E402
from qtquant.model.runtime import make_session, ort_session, quiet_options  # noqa: E402


def _with_entry(model):
    """A default session of ``model`` with the entry, whatever this CPU (qtquant adds it only where the
    default kernels saturate)."""
    so = quiet_options(exact_int8=False)
    so.add_session_config_entry(*EXACT_INT8_ENTRY)
    return ort_session(model, so)


def _timed(model, base_dir, feeds, entry: bool, repeat: int):
    create, run, outs = [], [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        sess = _with_entry(model) if entry else make_session(model, base_dir, level="default", exact_int8=False)
        t1 = time.perf_counter()
        outs = [sess.run(None, f) for f in feeds]
        t2 = time.perf_counter()
        create.append(t1 - t0)
        run.append(t2 - t1)
    return statistics.median(create), statistics.median(run), outs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=str(SHARED / "models" / "yolov8n_320.onnx"))
    ap.add_argument("--input-shape", default="images=1x3x320x320")
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    p = host_int8_path()
    print(f"host: {p.kernels_text}")
    name, dims = args.input_shape.split("=")
    opts = Options(calib=CalibConfig(source=str(SHARED / "calib"), count=args.samples, holdout=0))
    s = open_model(args.model, {name: tuple(int(d) for d in dims.split("x"))}, opts)
    s.run_calibration()
    model = build_qdq_model(s).model
    feeds = list(s.calibration.holdout)[: args.samples]
    ref_sess = make_session(s.graph.model, s.graph.base_dir, level="default")
    ref = [ref_sess.run(None, f) for f in feeds]
    print(f"{Path(args.model).name}: {len(model.graph.node)} nodes in the export, {len(feeds)} samples, "
          f"median of {args.repeat}")
    rows = {}
    for label, entry in (("default options", False), ("with the entry", True)):
        c, r, outs = _timed(model, s.graph.base_dir, feeds, entry, args.repeat)
        worst = min(sqnr_db(np.concatenate([o[k] for o in ref]), np.concatenate([o[k] for o in outs]))
                    for k in range(len(ref[0])))
        rows[label] = (c, r)
        print(f"  {label:22s} session {c * 1e3:8.1f} ms   run {r * 1e3:8.1f} ms   worst output {worst:6.2f} dB")
    (c0, r0), (c1, r1) = rows.values()
    print(f"  ratio entry/default: session {c1 / c0:.2f}x, run {r1 / r0:.2f}x")
    print(f"  qtquant's sessions here: {'with the entry' if not p.default_exact else 'default options (exact here)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
