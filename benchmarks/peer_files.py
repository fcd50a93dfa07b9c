"""`qtquant analyze` on QDQ files written by other tools: onnxruntime, NNCF and NVIDIA ModelOpt.

Quantizes one float model three ways, runs `qtquant analyze FILE --json` on each file and checks
that it exits 0, then compares qtquant's Concat figures with an independent read of the file made
here (walk the ONNX graph: for each Concat, the DequantizeLinear scale behind each input through
pass-through ops, and the QuantizeLinear scale after the output).

- onnxruntime `quantize_static` runs in this interpreter (QDQ, int8 symmetric, per-channel weights).
- NNCF and ModelOpt run in venvs of their own under --peer-venv (one per tool: ModelOpt brings
  onnxruntime-gpu, which cannot share a venv with NNCF's onnxruntime).  The script creates them and
  pip-installs the tools when missing; a tool that cannot be installed or fails is reported and skipped.
  Both run on the CPU.

Independent rule for a Concat (DESIGN §3): an input needs a rescale when its scale (every channel of a
per-channel scale) or zero point differs from the output's.  When the file leaves the output in float,
the output is taken to get the widest input's scale (the Horizon compiler's rule) and the inputs that
differ from it need a rescale.  Constant inputs are requantized offline and never count.

usage: python benchmarks/peer_files.py [--model M.onnx] [--calib DIR] [--input-shape images=1x3x320x320]
                                       [--peer-venv DIR] [--peers ort,nncf,modelopt] [--out-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper
from bench_common import SHARED  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

PEER_PACKAGES = {
    "nncf": ["nncf", "onnx", "onnxruntime", "pillow"],
    "modelopt": ["nvidia-modelopt[onnx]", "pillow"],
}
PEER_IMPORT = {"nncf": "nncf", "modelopt": "modelopt.onnx.quantization"}

# Ops that move or select values: the scale behind them is the scale before them (DESIGN §3).
PASS_OPS = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Slice", "Split", "Gather", "Identity",
            "DepthToSpace", "SpaceToDepth", "Expand", "Tile", "MaxPool", "Resize", "Upsample", "Pad"}

NNCF_SCRIPT = textwrap.dedent("""
    import sys, numpy as np, onnx, nncf
    src, dst, calib, name = sys.argv[1:5]
    data = np.load(calib)
    model = onnx.load(src)
    ds = nncf.Dataset(list(data), lambda x: {name: x[None]})
    q = nncf.quantize(model, ds, subset_size=len(data))
    onnx.save(q, dst)
""")

MODELOPT_SCRIPT = textwrap.dedent("""
    import sys, numpy as np
    from modelopt.onnx.quantization import quantize
    src, dst, calib, name = sys.argv[1:5]
    data = np.load(calib)
    quantize(onnx_path=src, quantize_mode="int8", calibration_data={name: data}, calibration_method="max",
             calibration_eps=["cpu"], output_path=dst)
""")


# -- inputs --------------------------------------------------------------------------------------------


def load_photos(calib_dir: Path, shape, mean=None, std=None) -> np.ndarray:
    """RGB in [0, 1], stretched to the input size, NCHW; then (x - mean) / std when given."""
    from PIL import Image

    files = sorted(p for p in calib_dir.iterdir() if p.suffix.lower() in (".jpg", ".jpeg", ".png"))
    if not files:
        raise SystemExit(f"no photos in {calib_dir}")
    out = []
    for f in files:
        img = Image.open(f).convert("RGB").resize((shape[3], shape[2]), Image.BILINEAR)
        out.append(np.asarray(img, np.float32).transpose(2, 0, 1) / 255.0)
    x = np.stack(out)
    if mean is not None:
        x = x - np.asarray(mean, np.float32).reshape(1, -1, 1, 1)
    if std is not None:
        x = x / np.asarray(std, np.float32).reshape(1, -1, 1, 1)
    return x.astype(np.float32)


def static_copy(src: Path, dst: Path, name: str, shape) -> None:
    """The float model with its dynamic input fixed: every tool calibrates the same graph."""
    m = onnx.load(str(src))
    for i in m.graph.input:
        if i.name == name:
            for d, v in zip(i.type.tensor_type.shape.dim, shape):
                d.Clear()
                d.dim_value = v
    del m.graph.value_info[:]
    m = onnx.shape_inference.infer_shapes(m)
    onnx.save(m, str(dst))


# -- quantizers ----------------------------------------------------------------------------------------


class Reader:
    def __init__(self, name, data):
        self.it = iter([{name: x[None]} for x in data])

    def get_next(self):
        return next(self.it, None)


def quantize_ort(src: Path, dst: Path, name: str, data: np.ndarray) -> None:
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    quantize_static(str(src), str(dst), Reader(name, data), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8, per_channel=True,
                    extra_options={"ActivationSymmetric": True})


def peer_python(root: Path, peer: str, install: bool, log) -> Path | None:
    """The python of the peer's own venv, created and filled on first use; None when it cannot be had."""
    venv = root / peer
    py = venv / "bin" / "python"
    if not py.exists():
        if not install:
            log(f"{peer}: no venv at {venv} (and --no-install)")
            return None
        log(f"{peer}: creating {venv}")
        r = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True)
        if r.returncode:
            log(f"{peer}: cannot create a venv: {r.stderr.strip()[-300:]}")
            return None
    have = subprocess.run([str(py), "-c", f"import {PEER_IMPORT[peer]}"], capture_output=True, text=True)
    if have.returncode == 0:
        return py
    if not install:
        log(f"{peer}: not installed in {venv} (and --no-install)")
        return None
    log(f"{peer}: pip install {' '.join(PEER_PACKAGES[peer])} (this can take minutes)")
    r = subprocess.run([str(py), "-m", "pip", "install", "-q", *PEER_PACKAGES[peer]], capture_output=True, text=True)
    if r.returncode:
        why = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode
        log(f"{peer}: pip install failed, skipped: {why}")
        return None
    have = subprocess.run([str(py), "-c", f"import {PEER_IMPORT[peer]}"], capture_output=True, text=True)
    if have.returncode:
        log(f"{peer}: installed but does not import, skipped: {have.stderr.strip().splitlines()[-1]}")
        return None
    return py


def quantize_peer(py: Path, script: str, src: Path, dst: Path, calib: Path, name: str, log, timeout: int):
    r = subprocess.run([str(py), "-c", script, str(src), str(dst), str(calib), name], capture_output=True,
                       text=True, timeout=timeout, cwd=str(dst.parent))
    if r.returncode or not dst.exists():
        tail = (r.stderr or r.stdout).strip().splitlines()[-3:]
        log(f"quantization failed (exit {r.returncode}): {' | '.join(tail)}")
        return False
    return True


# -- the independent read ------------------------------------------------------------------------------


class FileRead:
    """Concat scales read straight from a QDQ file, without qtquant."""

    def __init__(self, path: Path):
        m = onnx.load(str(path))
        try:
            m = onnx.shape_inference.infer_shapes(m)
        except Exception:
            pass
        g = m.graph
        self.inits = {t.name: t for t in g.initializer}
        self.consts = {}
        for n in g.node:
            if n.op_type == "Constant":
                for a in n.attribute:
                    if a.name == "value":
                        self.consts[n.output[0]] = numpy_helper.to_array(a.t)
        self.prod = {o: n for n in g.node for o in n.output}
        self.cons: dict[str, list] = {}
        for n in g.node:
            for i in n.input:
                self.cons.setdefault(i, []).append(n)
        self.types = {v.name: v.type.tensor_type.elem_type for v in list(g.value_info) + list(g.input) + list(g.output)}
        self.types.update({t.name: t.data_type for t in g.initializer})
        self.nodes = list(g.node)
        self.static: dict[str, bool] = {}
        self.qdq_pairs = sum(1 for n in g.node if n.op_type == "QuantizeLinear")
        self.dq_nodes = sum(1 for n in g.node if n.op_type == "DequantizeLinear")

    def value(self, name):
        if name in self.inits:
            return numpy_helper.to_array(self.inits[name])
        return self.consts.get(name)

    def is_const(self, name) -> bool:
        """A constant, or a value computed from constants and shapes only: with the input shape fixed,
        a compiler folds it (YOLOv8's anchor grid is built from Shape → Range at run time)."""
        if name in self.static:
            return self.static[name]
        todo, opened = [name], set()
        while todo:
            t = todo[-1]
            if t in self.static:
                todo.pop()
                continue
            p = self.prod.get(t)
            if t in self.inits or t in self.consts or (p is not None and p.op_type in ("Shape", "Size", "Constant")):
                self.static[t] = True
            elif p is None or not [i for i in p.input if i]:
                self.static[t] = False
            else:
                pending = [i for i in p.input if i and i not in self.static]
                if pending and t not in opened:
                    opened.add(t)
                    todo.extend(pending)
                    continue
                for i in pending:  # a cycle
                    self.static[i] = False
                self.static[t] = all(self.static[i] for i in p.input if i)
            todo.pop()
        return self.static[name]

    def _qparams(self, node):
        s = np.asarray(self.value(node.input[1]), np.float64).reshape(-1)
        z = self.value(node.input[2]) if len(node.input) > 2 and node.input[2] else None
        z = np.zeros(s.size, np.int64) if z is None else np.asarray(z).reshape(-1).astype(np.int64)
        return s, z

    def input_scale(self, tensor):
        """('const', None) | ('float', None) | ('q', (scales, zps)) for a Concat input."""
        seen = 0
        while seen < 100:
            seen += 1
            if self.is_const(tensor):
                return "const", None
            p = self.prod.get(tensor)
            if p is None:
                return "float", None
            if p.op_type == "DequantizeLinear":
                src = p.input[0]
                if self.is_const(src):
                    return "const", None
                q = self.prod.get(src)
                if q is not None and q.op_type == "QuantizeLinear" and self.is_const(q.input[0]):
                    return "const", None
                return "q", self._qparams(p)
            if p.op_type in PASS_OPS and p.input and p.input[0]:
                tensor = p.input[0]
                continue
            return "float", None
        return "float", None

    def output_scale(self, tensor):
        """The scale of the first QuantizeLinear after the Concat output (through pass-through ops)."""
        todo, seen = [tensor], set()
        while todo:
            t = todo.pop(0)
            if t in seen:
                continue
            seen.add(t)
            for c in self.cons.get(t, ()):
                if c.op_type == "QuantizeLinear" and c.input[0] == t:
                    return self._qparams(c)
                if c.op_type in PASS_OPS and c.input and c.input[0] == t:
                    todo.extend(o for o in c.output if o)
        return None

    def concats(self):
        """Per float Concat: inputs' qparams and the rescale count by the rule in the module docstring."""
        out = {}
        float_types = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16,
                       onnx.TensorProto.DOUBLE}
        for n in self.nodes:
            if n.op_type != "Concat" or self.types.get(n.output[0]) not in float_types or self.is_const(n.output[0]):
                continue
            ins = [self.input_scale(i) for i in n.input]
            quant = [(k, qp) for k, (kind, qp) in enumerate(ins) if kind == "q"]
            outq = self.output_scale(n.output[0])
            rescales = 0
            worst_ch = None
            if quant:
                if outq is not None and outq[0].size == 1:
                    ref_s, ref_z = float(outq[0][0]), int(outq[1][0])
                elif outq is None:
                    k, (s, z) = max(quant, key=lambda kq: kq[1][0].max())
                    ref_s, ref_z = float(s.max()), int(z[int(np.argmax(s))])
                else:
                    ref_s = ref_z = None  # a per-channel output: not in these files
                for _, (s, z) in quant:
                    if ref_s is None:
                        continue
                    if s.size > 1:
                        r = float(np.max(np.maximum(s, ref_s) / np.minimum(s, ref_s)))
                        worst_ch = r if worst_ch is None else max(worst_ch, r)
                    if np.any(np.abs(s - ref_s) > 1e-6 * np.maximum(np.abs(s), abs(ref_s))) or np.any(z != ref_z):
                        rescales += 1
            all_s = [v for _, (s, _) in quant for v in s]
            if outq is not None:
                all_s.extend(outq[0])
            out[n.name] = {"quantized_inputs": len(quant), "output_float": outq is None and bool(quant),
                           "rescales": rescales, "worst_channel_ratio": worst_ch,
                           "ratio": (max(all_s) / min(all_s)) if all_s else 1.0}
        return out

    def per_channel_activations(self) -> int:
        n = 0
        for node in self.nodes:
            if node.op_type == "QuantizeLinear" and not self.is_const(node.input[0]):
                s = self.value(node.input[1])
                if s is not None and np.asarray(s).size > 1:
                    n += 1
        return n

    def float_weight_chains(self) -> int:
        return sum(1 for node in self.nodes if node.op_type == "QuantizeLinear"
                   and (node.input[0] in self.inits or node.input[0] in self.consts))


# -- qtquant -------------------------------------------------------------------------------------------


def qtquant_cmd() -> list[str]:
    exe = Path(sys.executable).parent / "qtquant"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "qtquant"]


def run_qtquant(path: Path, shape_arg: str, timeout: int):
    t0 = time.perf_counter()
    r = subprocess.run([*qtquant_cmd(), "analyze", str(path), "--json", "--input-shape", shape_arg],
                       capture_output=True, text=True, timeout=timeout)
    dt = time.perf_counter() - t0
    doc = None
    if r.returncode == 0:
        try:
            doc = json.loads(r.stdout)
        except ValueError:
            doc = None
    return r.returncode, doc, r.stderr.strip(), dt


def qtquant_figures(doc) -> dict:
    cats = doc["concats"]
    quant = [c for c in cats if any(m["scale"] is not None and not m["constant"] for m in c["inputs"])]
    wch = [c.get("worst_channel_ratio") for c in cats if c.get("worst_channel_ratio") is not None]
    return {"concats": len(cats), "quantized": len(quant),
            "mismatched": sum(1 for c in cats if c["rescales"]), "rescales": sum(c["rescales"] for c in cats),
            "output_float": sum(1 for c in cats if c.get("output_float")),
            "worst_channel": max(wch) if wch else None,
            "max_ratio": max((c["ratio"] for c in cats if c["ratio"] is not None), default=1.0),
            "per_concat": {c["node"]: c["rescales"] for c in cats}}


def file_figures(read: FileRead) -> dict:
    cats = read.concats()
    wch = [c["worst_channel_ratio"] for c in cats.values() if c["worst_channel_ratio"] is not None]
    return {"concats": len(cats), "quantized": sum(1 for c in cats.values() if c["quantized_inputs"]),
            "mismatched": sum(1 for c in cats.values() if c["rescales"]),
            "rescales": sum(c["rescales"] for c in cats.values()),
            "output_float": sum(1 for c in cats.values() if c["output_float"]),
            "worst_channel": max(wch) if wch else None,
            "max_ratio": max((c["ratio"] for c in cats.values()), default=1.0),
            "per_concat": {k: c["rescales"] for k, c in cats.items()}}


# -- main ----------------------------------------------------------------------------------------------


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, default=SHARED / "models" / "yolov8n_320.onnx")
    ap.add_argument("--calib", type=Path, default=SHARED / "calib")
    ap.add_argument("--input-shape", default="images=1x3x320x320")
    ap.add_argument("--mean", default=None, metavar="R,G,B", help="per-channel mean in [0, 1] units (default none)")
    ap.add_argument("--std", default=None, metavar="R,G,B", help="per-channel std in [0, 1] units (default none)")
    ap.add_argument("--peer-venv", type=Path, default=Path(tempfile.gettempdir()) / "peers-venv",
                    help="folder holding one venv per tool (nncf/, modelopt/), created when missing")
    ap.add_argument("--peers", default="ort,nncf,modelopt")
    ap.add_argument("--out-dir", type=Path, default=None, help="keep the QDQ files here (default: a temp folder)")
    ap.add_argument("--no-install", action="store_true", help="never pip-install a tool; skip it if missing")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per quantization or analysis")
    args = ap.parse_args(argv)

    name, _, dims = args.input_shape.partition("=")
    shape = tuple(int(d) for d in dims.lower().split("x"))
    out_dir = args.out_dir or Path(tempfile.mkdtemp(prefix="qtquant-peers-"))
    out_dir.mkdir(parents=True, exist_ok=True)

    def log(msg):
        print(msg, flush=True)

    def floats(text):
        return [float(v) for v in text.split(",")] if text else None

    data = load_photos(args.calib, shape, floats(args.mean), floats(args.std))
    calib_npy = out_dir / "calib.npy"
    np.save(calib_npy, data)
    src = out_dir / f"{args.model.stem}_static.onnx"
    static_copy(args.model, src, name, shape)
    log(f"model {args.model.name} at {name}={dims}, {len(data)} photos from {args.calib}, files in {out_dir}")

    files: dict[str, tuple[Path, float]] = {}
    for peer in [p.strip() for p in args.peers.split(",") if p.strip()]:
        dst = out_dir / f"{args.model.stem}_{peer}.onnx"
        t0 = time.perf_counter()
        if peer == "ort":
            log("ort: quantize_static (QDQ, int8 symmetric, per-channel weights, MinMax)")
            quantize_ort(src, dst, name, data)
        elif peer in PEER_PACKAGES:
            py = peer_python(args.peer_venv, peer, not args.no_install, log)
            if py is None:
                continue
            ver = subprocess.run([str(py), "-m", "pip", "show", PEER_PACKAGES[peer][0].split("[")[0]],
                                 capture_output=True, text=True).stdout
            ver = next((ln.split(":", 1)[1].strip() for ln in ver.splitlines() if ln.startswith("Version:")), "?")
            log(f"{peer}: {PEER_PACKAGES[peer][0]} {ver}, quantizing on the CPU")
            script = NNCF_SCRIPT if peer == "nncf" else MODELOPT_SCRIPT
            try:
                ok = quantize_peer(py, script, src, dst, calib_npy, name, lambda m: log(f"{peer}: {m}"), args.timeout)
            except subprocess.TimeoutExpired:
                log(f"{peer}: quantization timed out after {args.timeout} s, skipped")
                ok = False
            if not ok:
                continue
        else:
            log(f"unknown peer {peer!r}, skipped")
            continue
        files[peer] = (dst, time.perf_counter() - t0)

    rows, diffs, failed = [], [], []
    for peer, (path, qt) in files.items():
        read = FileRead(path)
        mine = file_figures(read)
        rc, doc, err, at = run_qtquant(path, args.input_shape, args.timeout)
        if rc != 0 or doc is None:
            failed.append(f"{peer}: qtquant analyze exit {rc}: {err.splitlines()[-1] if err else ''}")
            rows.append((peer, rc, read, None, mine, qt, at))
            continue
        theirs = qtquant_figures(doc)
        rows.append((peer, rc, read, theirs, mine, qt, at))
        for k in ("concats", "quantized", "mismatched", "rescales", "output_float"):
            if theirs[k] != mine[k]:
                diffs.append(f"{peer}: {k}: qtquant {theirs[k]}, file {mine[k]}")
        for node in sorted(set(theirs["per_concat"]) | set(mine["per_concat"])):
            a, b = theirs["per_concat"].get(node), mine["per_concat"].get(node)
            if a != b:
                diffs.append(f"{peer}: {node}: rescales qtquant {a}, file {b}")

    print()
    hdr = ("file", "exit", "Q nodes", "W Q→DQ", "per-ch act", "Concats", "quant in", "float out",
           "mismatched", "rescales", "max ratio", "worst ch", "quant s", "analyze s")
    table = [hdr]

    def f(x, fmt="{}"):
        return "-" if x is None else fmt.format(x)

    for peer, rc, read, theirs, mine, qt, at in rows:
        def pair(k, fmt="{}"):
            a = theirs[k] if theirs else None
            b = mine[k]
            return f(a, fmt) if theirs and f(a, fmt) == f(b, fmt) else f"{f(a, fmt)} / {f(b, fmt)}"
        table.append((peer, str(rc), str(read.qdq_pairs), str(read.float_weight_chains()),
                      str(read.per_channel_activations()), pair("concats"), pair("quantized"), pair("output_float"),
                      pair("mismatched"), pair("rescales"), pair("max_ratio", "{:.2f}"),
                      pair("worst_channel", "{:.2f}"), f"{qt:.1f}", f"{at:.1f}"))
    widths = [max(len(r[i]) for r in table) for i in range(len(hdr))]
    for k, r in enumerate(table):
        print("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))))
        if k == 0:
            print("-" * (sum(widths) + 2 * (len(widths) - 1)))
    print("(a cell 'A / B' is qtquant's figure / the independent read of the file where they differ; "
          "'W Q→DQ' = float weights quantized by a Q→DQ chain, ModelOpt's layout)")
    for line in failed:
        print("FAIL", line)
    for line in diffs:
        print("DIFF", line)
    if not failed and not diffs:
        print(f"all {len(rows)} files: qtquant analyze exit 0, Concat figures agree with the file")
    return 1 if failed or diffs else 0


if __name__ == "__main__":
    sys.exit(main())
