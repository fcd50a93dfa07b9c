"""Check that `qtquant analyze` on a QDQ model reports the scales its DequantizeLinear initializers hold.

Makes a QDQ copy of a float model with onnxruntime's quantize_static (int8 symmetric activations, per-channel
weights, MinMax), runs `qtquant analyze --json` on it, and compares every Concat input's scale with an
independent read of the DequantizeLinear that feeds it.

usage: python benchmarks/qdq_scales_check.py [MODEL] [--input-shape images=1x3x320x320] [--calib DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper
from bench_common import SHARED  # noqa: E402


def photo_reader(calib_dir: Path, name: str, shape, count: int):
    from PIL import Image

    files = sorted(p for p in calib_dir.iterdir() if p.suffix.lower() in (".jpg", ".jpeg", ".png"))
    feeds = []
    for k in range(count):
        img = Image.open(files[k % len(files)]).convert("RGB").resize((shape[3], shape[2]))
        a = np.asarray(img, np.float32).transpose(2, 0, 1)[None] / 255.0
        feeds.append({name: a})

    class R:
        it = iter(feeds)

        def get_next(self):
            return next(self.it, None)

    return R()


def dq_scales(model: onnx.ModelProto) -> dict[str, list[float]]:
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    prod = {o: n for n in model.graph.node for o in n.output}
    out = {}
    for n in model.graph.node:
        if n.op_type != "Concat":
            continue
        scales = []
        for i in n.input:
            p = prod.get(i)
            scales.append(float(inits[p.input[1]].reshape(-1)[0]) if p is not None and p.op_type == "DequantizeLinear"
                          else None)
        if any(s is not None for s in scales):
            out[n.name] = scales
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default=str(SHARED / "models" / "yolov8n_320.onnx"))
    ap.add_argument("--input-shape", default="images=1x3x320x320")
    ap.add_argument("--calib", default=str(SHARED / "calib"))
    ap.add_argument("--count", type=int, default=7)
    ap.add_argument("--keep", default=None, help="also save the QDQ model here")
    args = ap.parse_args()
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    name, dims = args.input_shape.split("=")
    shape = [int(d) for d in dims.split("x")]
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "float.onnx"
        m = onnx.load(args.model)
        for dim, v in zip(m.graph.input[0].type.tensor_type.shape.dim, shape):
            dim.Clear()
            dim.dim_value = v
        onnx.save(m, str(src))
        q = Path(args.keep) if args.keep else Path(d) / "qdq.onnx"
        quantize_static(str(src), str(q), photo_reader(Path(args.calib), name, shape, args.count),
                        quant_format=QuantFormat.QDQ, activation_type=QuantType.QInt8,
                        weight_type=QuantType.QInt8, per_channel=True,
                        extra_options={"ActivationSymmetric": True})
        r = subprocess.run([sys.executable, "-m", "qtquant", "analyze", str(q), "--json", "--no-perf"],
                           capture_output=True, text=True)
        if r.returncode:
            print(r.stderr)
            sys.exit(1)
        doc = json.loads(r.stdout)
        ref = dq_scales(onnx.load(str(q)))
        from qtquant.app import open_model

        g = open_model(q).graph
        const = {n.name for n in g.nodes.values() if n.op_type == "Concat" and n.outputs
                 and g.tensors[n.outputs[0]].kind in ("weight", "shape")}
    ours = {c["node"]: [m["scale"] for m in c["inputs"]] for c in doc["concats"]}
    worst, n, bad = 0.0, 0, []
    for node, scales in ref.items():
        got = ours.get(node)
        if got is None:
            if node in const:
                print(f"  {node}: constant-foldable (computed from shapes only), not an activation Concat")
            else:
                bad.append(f"{node}: not reported")
            continue
        for a, b in zip(scales, got):
            if a is None:
                continue
            n += 1
            rel = abs(a - b) / a
            worst = max(worst, rel)
            if rel > 1e-6:
                bad.append(f"{node}: {a} vs {b}")
    s = doc["summary"]
    print(f"QDQ model: {len(ref)} Concats with DequantizeLinear inputs; qtquant reports {s['concats']} Concats, "
          f"{s['mismatched_concats']} mismatched, {s['rescales']} rescales")
    print(f"compared {n} Concat input scales: worst relative difference {worst:.2e}; mismatches: {len(bad)}")
    for b in bad[:10]:
        print("  ", b)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
