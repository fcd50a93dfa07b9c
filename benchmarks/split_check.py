"""The shipped model's segments (qtquant.runs.segments.split_model) against one default session of the whole
exported file: outputs bit for bit, and what each costs to create.

usage: python benchmarks/split_check.py [MODEL ...] [--input-shape NAME=1x3x320x320] [--calib DIR]
                                        [--parts 2,3,4] [--nodes 20000]

Without MODEL it builds benchmarks/synthetic.py's 20,000-node ``block_cnn`` (``--nodes``).  Each model is
calibrated (4 samples: synthetic, or ``--calib`` images), exported in memory as ``qtquant analyze``
measures it, and its check samples run through one default session of the whole file (without the
layout pass above ``LAYOUT_PASS_NODES``, as the check runs it) and through the segments cut into each
of ``--parts`` (forced, whatever the model's size).  Prints, per model and split, whether every output
is bit-identical and the sessions' creation wall and CPU seconds (the segments' created side by side).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from synthetic import block_cnn  # noqa: E402


def _timed(fn):
    t, c = time.perf_counter(), time.process_time()
    r = fn()
    return r, time.perf_counter() - t, time.process_time() - c


def check(path: Path, shape, calib: str, parts: list[int]) -> bool:
    from qtquant.model import runtime
    from qtquant.runs import segments, shipped
    from qtquant.app import open_model
    from qtquant.app.options import Options
    from qtquant.calib import CalibConfig
    from qtquant.export.qdq import build_qdq_model
    from qtquant.fidelity.measure import output_mode_of
    from qtquant.quant.outputs import float_output_tensors

    cfg = CalibConfig(source=calib or "synthetic", count=4)
    s = open_model(path, shape, options=Options(calib=cfg))
    s.run_calibration()
    ft, _ = float_output_tensors(s.graph, s.baseline_domains, output_mode_of(None, None),
                                 s.options.float_output_max_bits_lost)
    model = build_qdq_model(s, s.domains, float_tensors=ft).model
    feeds = s.calibration.holdout
    names = [o.name for o in model.graph.output]
    off = shipped.layout_passes_off(model)
    whole, w, c = _timed(lambda: runtime.make_session(model, s.graph.base_dir, spinning=False, level="default",
                                                      disabled=off))
    ref = [whole.run(names, f) for f in feeds]
    print(f"{path.name}: export of {len(model.graph.node)} nodes, {len(feeds)} check samples; one default session"
          f"{' without ' + ', '.join(off) if off else ''}: created in {w:.2f} s wall, {c:.2f} s CPU")

    def shape_of(name):
        t = s.graph.tensors.get(name)
        return t.shape if t is not None else None

    ok = True
    for k in parts:
        segs = segments.split_model(model, k, shape_of)
        if segs is None:
            print(f"  {k} parts: no cut found")
            continue

        def make():
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(2) as pool:
                sess = list(pool.map(lambda m: runtime.make_session(m, s.graph.base_dir, spinning=False,
                                                                    level="default", disabled=off), segs))
            return segments.ChainedSession([([i.name for i in m.graph.input], [o.name for o in m.graph.output])
                                           for m in segs], sess)

        chained, w, c = _timed(make)
        got = [chained.run(names, f) for f in feeds]
        same = all(a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=True)
                   for r, g in zip(ref, got) for a, b in zip(r, g))
        ok &= same
        sizes = "+".join(str(len(m.graph.node)) for m in segs)
        cross = sum(len(m.graph.input) for m in segs[1:])
        print(f"  {len(segs)} segments ({sizes} nodes, {cross} segment inputs): created in {w:.2f} s wall, "
              f"{c:.2f} s CPU; outputs {'bit-identical' if same else 'DIFFER'} on all {len(feeds)} samples")
    return ok


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="*")
    ap.add_argument("--input-shape", action="append", default=None)
    ap.add_argument("--calib", default="")
    ap.add_argument("--parts", default="2,3,4")
    ap.add_argument("--nodes", type=int, default=20_000)
    args = ap.parse_args()
    parts = [int(p) for p in args.parts.split(",")]
    ok = True
    with tempfile.TemporaryDirectory(prefix="qtquant-split-") as d:
        paths = [Path(m) for m in args.models]
        if not paths:
            paths = [Path(d) / f"block_cnn_{args.nodes}.onnx"]
            onnx.save(block_cnn(args.nodes, channels=8, size=8), str(paths[0]))
        for p in paths:
            ok &= check(p, args.input_shape, args.calib if args.models else "", parts)
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
