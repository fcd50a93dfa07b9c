"""The calibration method search (``--observer search`` / ``search-per-node``) on the shared models.

For each case (yolov8n_320 on the photos; PP-OCRv4 det on rendered text images, as
``benchmarks/ppocr_text.py`` makes them, and on the photos) it runs qtquant as a user does:

  ``qtquant analyze MODEL ... --observer minmax --json``            the default, timed
  ``qtquant analyze MODEL ... --observer search --json``            every single method and the choice, timed
  ``qtquant analyze MODEL ... --observer search-per-node --search-budget B --json``   (unless --no-per-node)

and prints, per case: each single method's worst output slice (the search measures each on the
exported model exactly as the fidelity check does: onnxruntime default options, the check
samples, in-sample or held out as said), what the search chose, the fidelity check's rows of the
chosen export (for yolov8n: box rows and class rows), and the wall time of each run against
MinMax's in the same run.  Peers' figures on the photos are quoted from the project's issue tracker
(the same 7 photos, exact integer arithmetic), labelled as quoted.  With ``--nncf-python PY`` (a venv
with ``pip install nncf onnx onnxruntime``) NNCF's PTQ of PP-OCRv4 det is measured on the same
rendered text images, preprocessed as qtquant preprocesses them, in-sample as the search is, with
Q/DQ evaluated in float; without it the script says NNCF was not measured.

usage (from the repo root):
  python benchmarks/calib_search.py [--models DIR] [--calib PHOTOS] [--text-count 8] [--ppocr-size 640]
      [--budget 120] [--no-per-node] [--only yolo|ppocr-text|ppocr-photos] [--nncf-python PY]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import SHARED, machine, rel  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
MEAN, STD = "0.485,0.456,0.406", "0.229,0.224,0.225"  # PP-OCRv4 det's ImageNet normalisation, in [0, 1]

# Issue 54's table: the same 7 photos, exact integer arithmetic, SQNR against the float model.
QUOTED = {
    "yolo": {"class rows": {"onnxruntime quantize_static": 0.0, "NNCF 3.4": 9.5, "ModelOpt 0.47": 16.3},
             "box rows": {"onnxruntime quantize_static": 27.2, "NNCF 3.4": 30.1, "ModelOpt 0.47": 31.0}},
    "ppocr-photos": {"worst": {"onnxruntime quantize_static": 0.5, "NNCF 3.4": 5.9, "ModelOpt 0.47": 3.8}},
}


def qtquant_json(args: list[str]) -> tuple[dict, float]:
    """``python -m qtquant ARGS --json`` from the repo root (this checkout's qtquant): (doc, wall s)."""
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "qtquant", *args, "--json"], cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if p.returncode != 0:
        raise SystemExit(f"qtquant {' '.join(args)} failed ({p.returncode}): {p.stderr.strip()[-2000:]}")
    return json.loads(p.stdout), wall


def fidelity_rows(doc: dict) -> dict[str, float]:
    """slice label -> SQNR dB of the export's fidelity check ("after")."""
    fid = (doc.get("summary") or {}).get("fidelity") or {}
    rows = {}
    for after in (fid.get("outputs") or {}).values():
        for part in [after.get("whole") or {}, *(after.get("slices") or [])]:
            if part.get("label") and part.get("sqnr_db") is not None:
                rows[part["label"]] = part["sqnr_db"]
    return rows


def named_rows(case: str, rows: dict[str, float]) -> dict[str, float]:
    if case == "yolo":
        return {"box rows": rows.get("output0[0:4]"), "class rows": rows.get("output0[4:22]")}
    return {"worst": min(rows.values()) if rows else None}


def fmt(x) -> str:
    return "-" if x is None else f"{x:.2f}"


def run_case(case: str, model: Path, shape: str, calib: Path, extra: list[str], budget: float, per_node: bool):
    base = [str(model), "--input-shape", shape, "--calib", str(calib), "--calib-count", "16", *extra]
    print(f"\n== {case}: {rel(model)} {shape}, calibration data {rel(calib)}", flush=True)
    runs = {}
    for label, obs in (("minmax", ["--observer", "minmax"]), ("search", ["--observer", "search"])) + (
            (("search-per-node", ["--observer", "search-per-node", "--search-budget", f"{budget:g}"]),)
            if per_node else ()):
        doc, wall = qtquant_json(["analyze", *base, *obs])
        runs[label] = (doc, wall)
    mm_doc, mm_wall = runs["minmax"]
    cal = mm_doc["calibration"]
    samples = f"{cal['check_samples']} {'in-sample' if cal['check_in_sample'] else 'held-out'} check samples"
    print(f"check: {samples} ({cal['samples']} calibrated on); figures: worst output slice SQNR of the export, dB")
    s_doc, s_wall = runs["search"]
    search = s_doc["calibration"]["search"]
    print(f"{'method':<20} {'worst slice':<18} {'SQNR dB':>8}")
    for m in sorted(search["methods"], key=lambda m: -(m["worst_sqnr_db"] if m["worst_sqnr_db"] is not None
                                                       else -1e9)):
        mark = "  <- chosen" if m["method"] == search["chosen"] else ""
        print(f"{m['method']:<20} {m['worst_slice'] or '-':<18} {fmt(m['worst_sqnr_db']):>8}{mark}")
    print(f"search chose {search['chosen']} ({fmt(search['chosen_sqnr_db'])} dB); runner-up {search['runner_up']} "
          f"({fmt(search['runner_up_sqnr_db'])} dB); {search['runs']} export runs, {search['seconds']:.1f} s")
    print(f"\n{'run':<18} {'wall s':>7} {'vs minmax':>9} {'search s':>8}  " + "  ".join(
        f"{k:>11}" for k in named_rows(case, {}).keys()))
    for label, (doc, wall) in runs.items():
        rows = named_rows(case, fidelity_rows(doc))
        sr = doc["calibration"].get("search") or {}
        print(f"{label:<18} {wall:7.1f} {wall / mm_wall:8.2f}x {sr.get('seconds', 0.0):8.1f}  "
              + "  ".join(f"{fmt(v):>11}" for v in rows.values()))
        if label == "search-per-node":
            print(f"  per node: {len(sr['per_tensor'])} tensors changed of {sr['tensors_tried']} tried "
                  f"({sr['tensors_open']} open), budget {sr['budget_s']:g} s; final {fmt(sr['final_sqnr_db'])} dB")
    for part, peers in QUOTED.get(case, {}).items():
        print(f"quoted (issue 54, not measured here) {part}: "
              + ", ".join(f"{k} {v:.1f} dB" for k, v in peers.items()))


def nncf_version(py: str) -> str:
    r = subprocess.run([py, "-c", "import nncf; print(nncf.__version__)"], capture_output=True, text=True)
    return r.stdout.strip() or "(version unknown)"


def nncf_sqnr(py: str, model: Path, folder: Path, size: int) -> tuple[float | None, str]:
    """NNCF's PTQ of ``model`` (defaults: MinMax-type ranges, its own quantization points) on the images of
    ``folder``, preprocessed as qtquant preprocesses them, measured on those same images (in-sample, as the
    search is) against the float model with Q/DQ evaluated in float: (SQNR dB of the whole output, why not)."""
    import numpy as np
    import onnxruntime as ort

    from bench_common import list_images, load_image, sqnr_db
    from peer_files import NNCF_SCRIPT

    mean, std = ([float(v) for v in t.split(",")] for t in (MEAN, STD))
    x = np.concatenate([load_image(f, size, size, mean, std) for f in list_images(folder)])
    with tempfile.TemporaryDirectory() as d:
        calib, dst = Path(d) / "calib.npy", Path(d) / "nncf.onnx"
        np.save(calib, x)
        r = subprocess.run([py, "-c", NNCF_SCRIPT, str(model), str(dst), str(calib), "x"], capture_output=True,
                           text=True, timeout=1800)
        if r.returncode or not dst.exists():
            return None, "NNCF failed: " + " | ".join((r.stderr or r.stdout).strip().splitlines()[-2:])
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # Q/DQ in float: exact
        ref = ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])
        got = ort.InferenceSession(str(dst), so, providers=["CPUExecutionProvider"])
        a = np.concatenate([ref.run(None, {"x": x[i:i + 1]})[0] for i in range(len(x))])
        b = np.concatenate([got.run(None, {"x": x[i:i + 1]})[0] for i in range(len(x))])
    return sqnr_db(a, b), f"{len(x)} images, in-sample"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", type=Path, default=SHARED / "models")
    ap.add_argument("--calib", type=Path, default=SHARED / "calib")
    ap.add_argument("--text-count", type=int, default=8)
    ap.add_argument("--ppocr-size", type=int, default=640)
    ap.add_argument("--budget", type=float, default=120.0, help="search-per-node's --search-budget (s)")
    ap.add_argument("--no-per-node", action="store_true")
    ap.add_argument("--only", choices=("yolo", "ppocr-text", "ppocr-photos"), action="append")
    ap.add_argument("--nncf-python", default=None, metavar="PY",
                    help="python of a venv with nncf (pip install nncf onnx onnxruntime): NNCF is then measured on "
                         "PP-OCR's images beside the search")
    args = ap.parse_args(argv)
    print(f"machine: {machine()}")
    import importlib.util

    if args.nncf_python:
        print(f"NNCF: measured with {args.nncf_python} on PP-OCR's images (the issue's other figures are quoted)")
    else:
        have = importlib.util.find_spec("nncf") is not None
        print("NNCF: not measured (" + ("nncf is importable here; give --nncf-python to run it" if have else
                                        "no --nncf-python given") + "); the issue's figures are quoted")
    want = set(args.only or ("yolo", "ppocr-text", "ppocr-photos"))
    per_node = not args.no_per_node
    if "yolo" in want:
        run_case("yolo", args.models / "yolov8n_320.onnx", "images=1x3x320x320", args.calib, [], args.budget,
                 per_node)
    size = args.ppocr_size
    ppocr = args.models / "ppocrv4_det.onnx"
    norm = ["--mean", MEAN, "--std", STD]
    if "ppocr-text" in want:
        from ppocr_text import render_text_images

        with tempfile.TemporaryDirectory() as d:
            font = render_text_images(Path(d), args.text_count, size, size, 0)
            print(f"\n{args.text_count} text images rendered at {size}x{size} (seed 0, {font})")
            run_case("ppocr-text", ppocr, f"x=1x3x{size}x{size}", Path(d), norm, args.budget, per_node)
            if args.nncf_python:
                db, how = nncf_sqnr(args.nncf_python, ppocr, Path(d), size)
                print(f"  NNCF {nncf_version(args.nncf_python)} on the same text images: "
                      + (f"{db:.2f} dB ({how}; Q/DQ evaluated in float)" if db is not None else how))
    if "ppocr-photos" in want:
        run_case("ppocr-photos", ppocr, f"x=1x3x{size}x{size}", args.calib, norm, args.budget, per_node)
    return 0


if __name__ == "__main__":
    sys.exit(main())
