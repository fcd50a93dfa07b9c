"""Fit the global bayes-e (RDK X5) parameters of the perf model to public figures, by least squares.

Inputs (every figure with its source, see FIGURES below):
  - RDK X5 compiler static estimates (hb_mapper compile logs published in the D-Robotics
    rdk_model_zoo, hbdk O3, one BPU core) of graphs that end at the Detect head's per-scale convs:
    YOLOv8n, YOLOv9t, YOLOv8n-seg (fit) and YOLO11n, YOLO12n, YOLO11n-seg, YOLO11n-pose (held out:
    never used by the fit, only predicted afterwards);
  - the RDK X5 board latencies of DESIGN §4 (224x224, single thread, end to end): ResNet18,
    MobileNetV2, MobileNetV1, GoogLeNet, EfficientNet-B2.  They include CPU pre/post-processing and
    the runtime call, so each is predicted as simulated BPU latency + ONE shared CPU-overhead term
    (``board_cpu_overhead_us``), fitted with the rest.  No per-model constant exists.

Models: the YOLOs are Ultralytics model files with random weights exported at 640 and cut at the
head convs (``benchmarks/perf_fit_models.py``, run in a venv with ultralytics; the files are
cached under --models and rebuilt when missing); ResNet18/MobileNets/GoogLeNet come from
tests/builders.py, EfficientNet-B2 from torchvision (same helper).  Concat rescales follow the
march's Concat rule on synthetic calibration data (2 samples).

Fit: Levenberg-Marquardt on r_i = ln(simulated_i / public_i), parameters in log space, with a weak
pull (weight --prior, default 0.1 per e-fold) towards the unfitted profile so that a parameter the
figures barely constrain stays near its estimate.  A parameter is fitted only if at least two
training figures depend on it (no parameter only one model uses); the others keep their estimate.
channel_align is chosen from {8, 16, 32} by the smallest residual.  Leave-one-out: for each fit
figure, refit on the others and predict it.

    python benchmarks/perf_fit.py [--models DIR] [--venv-python /tmp/perffit-venv/bin/python] [--write]

``--write`` stores the fitted numbers in resources/marches/bayes-e.json, each with "fitted": "fitted to ...".
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the model builders live with the tests

from builders import zoo_model  # noqa: E402
from qtquant.app import Options, Session, open_model  # noqa: E402
from qtquant.calib import CalibConfig  # noqa: E402
from qtquant.model.graph import graph_from_model  # noqa: E402
from qtquant.perf import Simulator  # noqa: E402

ZOO = "https://github.com/D-Robotics/rdk_model_zoo/blob/"
Z25 = ZOO + "b05a94cf7ac99145625a0960d8c882b34b422503/demos/"
DESIGN = "DESIGN.md §4 (RDK X5 board, 224x224, single thread, incl. CPU pre/post)"

# name, how it is built, public latency µs, kind, set, source
FIGURES = [
    ("yolov8n", "ultralytics", 3964.1, "compile", "fit",
     Z25 + "detect/YOLOv8/YOLOv8-Detect_YUV420SP/README_cn.md (hbdk 3.49.15 O3 log: latency = 3964.1 us, "
     "DDR = 12651904 bytes, 22 HzRequantize)"),
    ("yolov9t", "ultralytics", 4008.6, "compile", "fit",
     "issue 18 table: rdk_model_zoo YOLOv9t compile log (hbdk 3.49.15 O3), 28 requantize"),
    ("yolov8n-seg", "ultralytics", 5106.1, "compile", "fit",
     "issue 18 table: rdk_model_zoo YOLOv8n-seg compile log (hbdk 3.49.15 O3), 22 requantize"),
    ("resnet18", "builders", 2950.0, "board", "fit", DESIGN),
    ("mobilenet_v2", "builders", 1420.0, "board", "fit", DESIGN),
    ("mobilenet_v1", "builders", 1270.0, "board", "fit", DESIGN),
    ("googlenet", "builders", 2190.0, "board", "fit", DESIGN),
    ("efficientnet_b2", "torchvision", 3310.0, "board", "fit", DESIGN),
    ("yolo11n", "ultralytics", 5511.7, "compile", "held-out",
     Z25 + "detect/YOLO11/YOLO11-Detect_YUV420SP/README_cn.md (log of 2025-02-27: latency = 5511.7 us)"),
    ("yolo12n", "ultralytics", 18423.3, "compile", "held-out",
     Z25 + "detect/YOLO12/YOLO12-Detect_YUV420SP/README.md (log of 2025-02-20: latency = 18423.3 us)"),
    ("yolo11n-seg", "ultralytics", 6154.0, "compile", "held-out",
     Z25 + "Seg/YOLO11-Seg/YOLO11-Seg_YUV420SP/README_cn.md (log of 2025-03-05: latency = 6154.0 us)"),
    ("yolo11n-pose", "ultralytics", 7270.3, "compile", "held-out",
     Z25 + "Pose/YOLO11-Pose/README_cn.md (log of 2024-11-26: latency = 7270.3 us)"),
]
PUBLIC_DDR = {"yolov8n": 12651904}
PUBLIC_REQUANTIZE = {"yolov8n": 22, "yolov9t": 28, "yolov8n-seg": 22}

# name, bounds (the log-space search is clipped to them)
PARAMS = [
    ("utilization", (0.05, 1.0)),
    ("depthwise_efficiency", (0.05, 16.0)),
    ("matmul_efficiency", (0.01, 4.0)),
    ("op_overhead_us", (0.01, 50.0)),
    ("ddr_gbps", (0.5, 60.0)),
    ("eltwise_efficiency", (0.01, 16.0)),
    ("lut_efficiency", (0.01, 16.0)),
    ("resize_efficiency", (0.01, 16.0)),
    ("pool_efficiency", (0.01, 16.0)),
    ("reduce_efficiency", (0.01, 16.0)),
    ("copy_efficiency", (0.01, 16.0)),
    ("board_cpu_overhead_us", (1.0, 5000.0)),
]
CPU_PRIOR_US = 300.0  # the unfitted guess of the board's CPU share (an estimate; the fit replaces it)


class Figure:
    def __init__(self, name, build, public_us, kind, subset, source):
        self.name, self.build, self.public_us, self.kind, self.subset, self.source = \
            name, build, public_us, kind, subset, source
        self.graph = self.concats = None

    def load(self, models: Path, venv_python: str, march) -> bool:
        opts = Options(march=march.name, calib=CalibConfig(source="synthetic", count=2, seed=0))
        if self.build == "builders":
            s = Session(graph_from_model(zoo_model(self.name, size=224, seed=0), ort_fallback=False), opts)
        else:
            f = models / (f"{self.name}_640_cut.onnx" if self.build == "ultralytics" else f"{self.name}_224.onnx")
            if not f.is_file():
                _build(self.name, models, venv_python)
            if not f.is_file():
                print(f"  {self.name}: {f} missing and could not be built: skipped")
                return False
            s = open_model(f, None, opts)
        s.run_calibration()
        self.graph, self.concats = s.graph, s.concats()
        return True

    def predict(self, march) -> float:
        res = Simulator(self.graph, march).full(self.concats)
        self.last = res
        return res.total_us + (march.board_cpu_overhead_us if self.kind == "board" else 0.0)


def _build(name, models, venv_python):
    cmd = [venv_python, str(ROOT / "benchmarks" / "perf_fit_models.py"), str(models), name]
    print("  building:", " ".join(cmd))
    subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL)


def _march(base, names, z):
    kw = {n: float(math.exp(v)) for n, v in zip(names, z)}
    return dataclasses.replace(base, **kw)


def _residuals(figs, base, names, z):
    m = _march(base, names, z)
    return np.array([math.log(f.predict(m) / f.public_us) for f in figs])


def _bounds(names):
    b = dict(PARAMS)
    return np.array([math.log(b[n][0]) for n in names]), np.array([math.log(b[n][1]) for n in names])


def used_by(figs, base, names, z0, eps=1e-4):
    """For each parameter, the figures whose prediction moves when it does."""
    r0 = _residuals(figs, base, names, z0)
    out = {}
    for j, n in enumerate(names):
        z = z0.copy()
        z[j] += 0.05
        d = np.abs(_residuals(figs, base, names, z) - r0)
        out[n] = [f.name for f, x in zip(figs, d) if x > eps]
    return out


def fit(figs, base, prior_w, iters=40):
    """Levenberg-Marquardt in log space; returns (march, names fitted, residuals)."""
    all_names = [n for n, _ in PARAMS if not (n == "board_cpu_overhead_us" and
                                             not any(f.kind == "board" for f in figs))]
    z_all = np.array([math.log(getattr(base, n) or CPU_PRIOR_US) for n in all_names])
    use = used_by(figs, base, all_names, z_all)
    names = [n for n in all_names if len(use[n]) >= 2]
    z0 = np.array([z_all[all_names.index(n)] for n in names])
    lo, hi = _bounds(names)
    z, lam = z0.copy(), 1e-2

    def cost_vec(z):
        return np.concatenate([_residuals(figs, base, names, z), prior_w * (z - z0)])

    r = cost_vec(z)
    for _ in range(iters):
        J = np.empty((len(r), len(z)))
        for j in range(len(z)):
            zz = z.copy()
            zz[j] += 1e-3
            J[:, j] = (cost_vec(zz) - r) / 1e-3
        g = J.T @ r
        H = J.T @ J
        improved = False
        for _ in range(8):
            step = np.linalg.solve(H + lam * np.diag(np.diag(H) + 1e-9), -g)
            zn = np.clip(z + step, lo, hi)
            rn = cost_vec(zn)
            if rn @ rn < r @ r:
                z, r, lam, improved = zn, rn, max(lam / 3, 1e-6), True
                break
            lam *= 4
        if not improved or np.max(np.abs(step)) < 1e-4:
            break
    return _march(base, names, z), names, use


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=Path, default=Path("/tmp/perffit/models"), help="cache of built .onnx files")
    ap.add_argument("--venv-python", default="/tmp/perffit-venv/bin/python",
                    help="python of a venv with ultralytics and onnx (to build missing models)")
    ap.add_argument("--prior", type=float, default=0.1, help="weight of the pull towards the unfitted estimates")
    ap.add_argument("--write", action="store_true", help="store the fit in resources/marches/bayes-e.json")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    prior = _prior_march()
    figs = [Figure(*f) for f in FIGURES]
    print("loading and calibrating (synthetic, 2 samples) ...")
    figs = [f for f in figs if f.load(args.models, args.venv_python, prior)]
    train = [f for f in figs if f.subset == "fit"]
    held = [f for f in figs if f.subset == "held-out"]

    before = {f.name: f.predict(prior) for f in figs}
    best = None
    for align in (8, 16, 32):
        base = dataclasses.replace(prior, channel_align=align)
        m, names, use = fit(train, base, args.prior)
        sse = sum(math.log(f.predict(m) / f.public_us) ** 2 for f in train)
        print(f"channel_align {align}: in-sample RMS log error {math.sqrt(sse / len(train)):.3f}")
        if best is None or sse < best[0]:
            best = (sse, m, names, use, base)
    _, march, names, use, base = best

    print(f"\nfitted parameters (bayes-e, channel_align {march.channel_align} chosen by the smallest residual):")
    for n, _ in PARAMS:
        v0 = getattr(prior, n) or (CPU_PRIOR_US if n == "board_cpu_overhead_us" else 0)
        status = "fitted" if n in names else f"kept (used by {len(use.get(n, []))} fit figure(s))"
        print(f"  {n:24s} {getattr(march, n):10.4g}   (unfitted {v0:g}; {status}; "
              f"used by: {', '.join(use.get(n, [])) or '-'})")

    print("\nin-sample (fit set):")
    _table(train, march, before)
    print("\nleave-one-out (fit on the other figures, predict this one):")
    loo = []
    for f in train:
        rest = [g for g in train if g is not f]
        m, _, _ = fit(rest, base, args.prior)
        p = f.predict(m)
        loo.append((f, p, (p - f.public_us) / f.public_us))
    _rows([(f, p) for f, p, _ in loo], before)
    errs = sorted(abs(e) for _, _, e in loo)
    med = float(np.median(errs)) * 100
    print(f"median |LOO error| {med:.1f}% over {len(loo)} figures (max {errs[-1] * 100:.1f}%)")
    print("\nheld out (never seen by the fit):")
    _table(held, march, before)
    y8 = next((f for f in figs if f.name == "yolov8n"), None)
    if y8 is not None:
        y8.predict(march)
        print(f"\nYOLOv8n DDR per frame: simulated {y8.last.ddr_bytes / 1e6:.2f} MB, public "
              f"{PUBLIC_DDR['yolov8n'] / 1e6:.2f} MB")
    for f in train:
        if f.name in PUBLIC_REQUANTIZE:
            print(f"{f.name} rescales: simulated {f.last.rescale_count if f.predict(march) else 0}, "
                  f"compile log {PUBLIC_REQUANTIZE[f.name]} requantize")
    print(f"\n({time.perf_counter() - t0:.0f} s)")
    if args.write:
        _write(march, names, train, med)
    return 0


def _rows(pairs, before):
    print("| figure | kind | public µs | before fit µs | error | fitted µs | error |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for f, p in pairs:
        b = before[f.name]
        print(f"| {f.name} | {f.kind} | {f.public_us:.1f} | {b:.1f} | {(b - f.public_us) / f.public_us * 100:+.1f}% "
              f"| {p:.1f} | {(p - f.public_us) / f.public_us * 100:+.1f}% |")


def _table(figs, march, before):
    pairs = [(f, f.predict(march)) for f in figs]
    _rows(pairs, before)
    if pairs:
        e = sorted(abs(p - f.public_us) / f.public_us for f, p in pairs)
        print(f"median |error| {float(np.median(e)) * 100:.1f}% over {len(e)} figures")


def _profile_path():
    return ROOT / "resources" / "marches" / "bayes-e.json"


def _prior_march():
    """The profile before any fit: the estimates the fit starts from (the fitted numbers of a
    previous --write are replaced by the estimates they replaced, kept under "estimate")."""
    doc = json.loads(_profile_path().read_text(encoding="utf-8"))
    for p in doc["params"].values():
        if isinstance(p, dict) and "prior" in p:
            p["value"] = p["prior"]
    doc.pop("fit", None)
    from qtquant.perf.march import profile_from_dict

    m = profile_from_dict(doc)
    return dataclasses.replace(m, board_cpu_overhead_us=m.board_cpu_overhead_us or CPU_PRIOR_US)


def _write(march, names, train, med):
    p = _profile_path()
    doc = json.loads(p.read_text(encoding="utf-8"))
    figs = ", ".join(f"{f.name} ({f.public_us:g} µs {'compile estimate' if f.kind == 'compile' else 'board'})"
                     for f in train)
    for n in [*names, "channel_align"]:
        e = doc["params"][n]
        e.setdefault("prior", e["value"])
        v = getattr(march, n)
        e["value"] = round(v, 4) if isinstance(v, float) else v
        e["fitted"] = (f"fitted to {figs} by benchmarks/perf_fit.py (least squares on log latency; "
                       f"median leave-one-out |error| {med:.1f}%)")
    doc["fit"] = {"script": "benchmarks/perf_fit.py", "figures": [f.name for f in train],
                  "params": [*names, "channel_align"]}
    from qtquant.base.fileio import atomic_write_text

    atomic_write_text(p, json.dumps(doc, indent=2, ensure_ascii=False) + "\n", what="march profile")
    print(f"wrote {p}")


if __name__ == "__main__":
    raise SystemExit(main())
