"""Accuracy-aware against bits-based auto-share on torchvision DenseNet-121 and Inception-v3.

Both are exported with random weights (no download) by a Python that has torch and torchvision
(``--torch-python``; keep them out of qtquant's venv), then qtquant runs on the files as a user
does: ``qtquant fix MODEL --auto-share`` (bits, ``--auto-share-max-bits-lost``) and ``qtquant fix MODEL
--max-sqnr-drop DB`` (measured).  Printed per model and method: rescales left, the worst output
slice's SQNR of the exported model (onnxruntime default options, with the check sample count and
whether held out), the simulated latency, and the wall time of the run.

    python3 -m venv /tmp/tv; /tmp/tv/bin/pip install torch torchvision onnx \\
        --index-url https://download.pytorch.org/whl/cpu
    python benchmarks/accuracy_autoshare.py --torch-python /tmp/tv/bin/python --calib PHOTOS
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's qtquant
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import default_qtquant, rel  # noqa: E402
from qtquant.base.vocab import DEFAULT_AUTO_SHARE_MAX_BITS_LOST  # noqa: E402

MODELS = {"densenet121": 224, "inception_v3": 299}

EXPORT = r"""
import sys, types
try:
    import torchvision  # noqa: F401
except RuntimeError:  # a CUDA torchvision wheel next to a CPU torch: its C++ ops cannot load, and
    # the two models need none of them (nms, roi_align); skip their fake-kernel registration
    sys.modules.pop("torchvision", None)
    sys.modules["torchvision._meta_registrations"] = types.ModuleType("torchvision._meta_registrations")
import torch, torchvision
name, size, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
torch.manual_seed(0)
kw = {"aux_logits": False, "init_weights": True} if name == "inception_v3" else {}
m = getattr(torchvision.models, name)(weights=None, **kw).eval()
x = torch.randn(1, 3, size, size)
try:
    torch.onnx.export(m, x, out, opset_version=17, input_names=["input"], output_names=["logits"], dynamo=False)
except TypeError:  # older torch: no dynamo switch
    torch.onnx.export(m, x, out, opset_version=17, input_names=["input"], output_names=["logits"])
print(out)
"""


def export(torch_python: str, name: str, size: int, out: Path) -> None:
    if out.exists():
        return
    subprocess.run([torch_python, "-c", EXPORT, name, str(size), str(out)], check=True)


def run_fix(qtquant, model: Path, size: int, extra, out: Path, common) -> dict:
    cmd = [*qtquant, "fix", str(model), "--input-shape", f"input=1x3x{size}x{size}", *common, *extra,
           "-o", str(out), "--json"]
    t = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True)
    secs = time.perf_counter() - t
    if res.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({res.returncode}): {res.stderr.strip()[-500:]}")
    doc = json.loads(res.stdout)
    rows = {r["what"]: r for r in doc["table"]}
    fid = doc["fidelity"] or {}
    worst = [o["sqnr_db"] for o in (fid.get("outputs") or {}).values() if o.get("sqnr_db") is not None]
    lat = next((r for w, r in rows.items() if w.startswith("latency ms")), None)
    return {"rescales_before": int(rows["rescales"]["before"]), "rescales": int(rows["rescales"]["after"]),
            "worst_db": min(worst) if worst else None, "samples": fid.get("samples"),
            "held_out": fid.get("held_out"), "latency_ms": float(lat["after"]) if lat else None,
            "latency_before_ms": float(lat["before"]) if lat else None, "seconds": secs,
            "sqnr_share": doc.get("sqnr_share")}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--torch-python", required=True, help="a Python with torch and torchvision, to export")
    p.add_argument("--workdir", default=None, help="where the ONNX files go (default: a temp folder)")
    p.add_argument("--models", default=",".join(MODELS), help=f"comma list of {', '.join(MODELS)}")
    p.add_argument("--calib", default="synthetic", help="calibration images (or synthetic)")
    p.add_argument("--calib-count", type=int, default=16)
    p.add_argument("--auto-share-max-bits-lost", type=float, default=DEFAULT_AUTO_SHARE_MAX_BITS_LOST)
    p.add_argument("--max-sqnr-drop", type=float, default=0.2)
    p.add_argument("--qtquant", default=None, help="how to run qtquant (default: the one beside this Python)")
    a = p.parse_args(argv)
    qtquant = a.qtquant.split() if a.qtquant else default_qtquant()
    work = Path(a.workdir) if a.workdir else Path(tempfile.mkdtemp(prefix="qtquant-acc-share-"))
    work.mkdir(parents=True, exist_ok=True)
    common = ["--calib", a.calib, "--calib-count", str(a.calib_count)]
    from qtquant.base.tables import text_table

    rows = []
    for name in a.models.split(","):
        size = MODELS[name]
        model = work / f"{name}.onnx"
        export(a.torch_python, name, size, model)
        base = run_fix(qtquant, model, size, [], work / f"{name}_base.onnx", common)
        bits = run_fix(qtquant, model, size, ["--auto-share", "--auto-share-max-bits-lost",
                                                str(a.auto_share_max_bits_lost)],
                       work / f"{name}_bits.onnx", common)
        meas = run_fix(qtquant, model, size, ["--max-sqnr-drop", str(a.max_sqnr_drop)],
                       work / f"{name}_sqnr.onnx", common)
        for label, r in (("no sharing", base), (f"bits ≤ {a.auto_share_max_bits_lost:g}", bits),
                         (f"measured ≤ {a.max_sqnr_drop:g} dB", meas)):
            rows.append((name, label, r["rescales"], f"{r['worst_db']:.2f}" if r["worst_db"] is not None else "n/a",
                         f"{r['latency_ms']:.3f}" if r["latency_ms"] is not None else "n/a",
                         f"{r['samples']} {'held out' if r['held_out'] else 'in-sample'}", f"{r['seconds']:.0f}"))
        if meas["sqnr_share"]:
            c = meas["sqnr_share"]["curve"]
            print(f"{name}: measured auto-share curve (rescales removed, worst dB): "
                  + ", ".join(f"{s['rescales_removed']}:{s['worst_sqnr_db']}{'' if s['accepted'] else ' (undone)'}"
                              for s in c), flush=True)
    print(f"models in {rel(work)}; calibration {a.calib} (--calib-count {a.calib_count}; the check sample count "
          "is in the table); worst output slice SQNR of the exported model in onnxruntime at default options; "
          "latency is qtquant's simulator estimate")
    print(text_table(rows, ("model", "auto-share", "rescales left", "worst slice dB", "latency ms", "check samples",
                            "run s"), "llrrrlr", rule=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
