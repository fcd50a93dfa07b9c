"""Perf model accuracy: the simulator's estimates against the public RDK X5 figures (DESIGN §4).

Builds ResNet18, MobileNetV1/V2 and GoogLeNet with ``tests/builders.py`` (random weights,
calibrated on seeded synthetic data so Concat scales differ as they would after PTQ),
simulates them on ``bayes-e`` and prints a Markdown table with the error of each row.
The YOLOv8n rows use the real model (``--yolo``, default ../shared/models/yolov8n_320.onnx,
at 640x640) and the 80-class architecture from the zoo.  Nothing is fitted per model.

    python3 benchmarks/perf_accuracy.py [--yolo PATH] [--calib DIR] [--march bayes-e]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the model builders live with the tests

from builders import yolov8n, zoo_model  # noqa: E402
from qtquant.calib import CalibConfig  # noqa: E402
from qtquant.model.graph import graph_from_model  # noqa: E402
from qtquant.app import open_model  # noqa: E402
from qtquant.perf import model_macs, simulate_session  # noqa: E402
from qtquant.app import Options, Session  # noqa: E402
from bench_common import SHARED  # noqa: E402


# RDK X5 board latency at 224x224, one thread (hrt_model_exec perf: the BPU plus the runtime's CPU work on
# the inputs and outputs, not application pre/post-processing): compared with the board estimate.
PUBLIC_X5_MS = {"resnet18": 2.95, "mobilenet_v2": 1.42, "mobilenet_v1": 1.27, "googlenet": 2.19}
# The X5 compiler's static estimate for YOLOv8n at 640x640.
YOLO_X5 = {"ms": 3.96, "ddr_mb": 12.7, "requantize": 22}


def _row(label, session, public_ms, note, board=False):
    """``board``: the public figure is a board latency (compared with the board estimate), else the
    compiler's static estimate (compared with the static estimate)."""
    t = time.perf_counter()
    res = simulate_session(session)
    sim_s = time.perf_counter() - t
    sim_ms = res.board_ms if board else res.total_ms
    err = (sim_ms - public_ms) / public_ms * 100 if public_ms else None
    compute_share = sum(lc.total_us for lc in res.layers if lc.bound == "compute") / res.total_us * 100
    return {"model": label, "gmacs": model_macs(session.graph) / 1e9, "sim_ms": sim_ms,
            "public_ms": public_ms, "err": err, "ddr_mb": res.ddr_bytes / 1e6, "rescales": res.rescale_count,
            "rescale_us": res.rescale_us, "compute_share": compute_share, "note": note, "sim_s": sim_s, "res": res}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--yolo", type=Path, default=SHARED / "models" / "yolov8n_320.onnx")
    ap.add_argument("--calib", default=str(SHARED / "calib"), help="image folder for YOLOv8n (else synthetic)")
    ap.add_argument("--march", default="bayes-e")
    ap.add_argument("--count", type=int, default=8, help="calibration samples")
    args = ap.parse_args(argv)
    opts = Options(march=args.march, calib=CalibConfig(count=args.count))
    rows = []
    for name, public in PUBLIC_X5_MS.items():
        g = graph_from_model(zoo_model(name, size=224, seed=0), ort_fallback=False)
        s = Session(g, opts)
        s.run_calibration()
        rows.append(_row(name, s, public, "board latency, 1 thread: against the board estimate", board=True))
    if args.yolo.is_file():
        calib = args.calib if Path(args.calib).is_dir() else "synthetic"
        s = open_model(args.yolo, {"images": (1, 3, 640, 640)},
                       Options(march=args.march, calib=CalibConfig(source=calib, count=args.count)))
        s.run_calibration()
        r = _row("yolov8n (real, 18 classes) @640", s, YOLO_X5["ms"], f"compiler estimate; calib: {Path(calib).name}")
        rows.append(r)
    else:
        print(f"({args.yolo} not found: real YOLOv8n row skipped)")
    g = graph_from_model(yolov8n(640, nc=80, seed=0), ort_fallback=False)
    s = Session(g, opts)
    s.run_calibration()
    rows.append(_row("yolov8n (zoo, 80 classes) @640", s, YOLO_X5["ms"], "compiler estimate; synthetic calib"))

    print(f"march {args.march}; estimates vs public figures (error = (sim - public) / public)\n")
    print("| model | GMACs | simulated ms | public ms | error | DDR MB/frame | rescales (µs) "
          "| compute-bound share | note |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r['model']} | {r['gmacs']:.3f} | {r['sim_ms']:.3f} | {r['public_ms']:.2f} | {r['err']:+.0f}% | "
              f"{r['ddr_mb']:.2f} | {r['rescales']} ({r['rescale_us']:.0f}) | {r['compute_share']:.0f}% "
              f"| {r['note']} |")
    cls = [r for r in rows if r["model"] in PUBLIC_X5_MS]
    mean_abs = sum(abs(r["err"]) for r in cls) / len(cls)
    print(f"\nclassification rows: mean |error| {mean_abs:.0f}%; every estimate is "
          f"{'below' if all(r['err'] < 0 for r in cls) else 'not uniformly below'} the public figure.")
    for r in rows:
        if r["model"].startswith("yolov8n"):
            print(f"{r['model']}: DDR {r['ddr_mb']:.2f} MB vs {YOLO_X5['ddr_mb']} MB public "
                  f"({(r['ddr_mb'] - YOLO_X5['ddr_mb']) / YOLO_X5['ddr_mb'] * 100:+.0f}%); "
                  f"{r['rescales']} rescales vs {YOLO_X5['requantize']} requantize nodes public")
    # Ranking check: does the model order the classification networks as the hardware does?
    by_sim = [r["model"] for r in sorted(cls, key=lambda r: r["sim_ms"])]
    by_pub = [r["model"] for r in sorted(cls, key=lambda r: r["public_ms"])]
    print(f"order by simulated latency: {', '.join(by_sim)}")
    print(f"order by public latency:    {', '.join(by_pub)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
