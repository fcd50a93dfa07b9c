"""Fit the global bayes-e (RDK X5) parameters of the perf model to every public X5 figure.

Figures (D-Robotics rdk_model_zoo, Apache-2.0; FIGURES below, each with its source):
  - the compiler's static estimates in the eight hb_mapper logs (hb_mapper 1.24.3, July 2025), against
    the simulated static latency;
  - board latencies (``hrt_model_exec perf``, one thread, one frame, NV12 input, float32 outputs
    dequantised on the CPU) of the zoo's classifiers at 224 and the Ultralytics n models at 640, against
    the board estimate (static + the runtime's CPU work, qtquant/perf/board.py);
  - YOLO11n's attention Softmax as float on the CPU, int16 and int8 (board), the precision prices.

Each board figure is simulated as it was measured: at the BPU clock its README states (BOARD_GHZ), and for
the triple with the Dequantize of the three box heads removed, as its demo ships the model (those outputs
leave as int32 and the runtime converts nothing for them).

Held out, never built, fitted to or looked up here: ConvNeXt, EfficientFormerV2, FastViT, FasterNet,
MobileNetV4, RepGhostNet, RepViT, ResNeXt, VargConvNet, the Ultralytics s/m/l/x sizes, other compile logs.

Models: built by ``benchmarks/perf_fit_models.py`` (timm / torchvision classifiers re-parameterised as
deployed, Ultralytics model files cut at the head convs; random weights) in a venv of their own, cached
under --models.  Concat rescales follow the march's Concat rule on synthetic calibration data (2 samples).

The fitter is the product's (qtquant/perf/fit.py, also ``qtquant perf --fit``): least squares on log
latency, every parameter global, fitted only where at least two figures depend on it; leave-one-out for
each figure.

    python benchmarks/perf_fit.py [--models /tmp/perffit-models] [--venv-python /tmp/perffit-venv/bin/python]
                                  [--write]

``--write`` stores the fit in resources/marches/bayes-e.json (each fitted number says what it was fitted to;
the value it replaced is kept as "prior", which the next fit starts from).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from qtquant.app import Options, open_model  # noqa: E402
from qtquant.calib import CalibConfig  # noqa: E402
from qtquant.perf.fit import Figure, fit_with_loo, profile_doc  # noqa: E402
from qtquant.perf.march import FigureKind, profile_from_dict  # noqa: E402
from qtquant.perf.simulator import Simulator  # noqa: E402
from qtquant.quant.precision import PrecisionMap, resolve_name  # noqa: E402
from qtquant.base.vocab import Precision  # noqa: E402

ZOO = "D-Robotics rdk_model_zoo "
LOG = ZOO + "samples/vision/ultralytics_yolo/source/reference_logs/hb_mapper_log_{}.txt (static estimate)"
CLS = ZOO + "samples/vision/classification/README.md (board, hrt_model_exec perf, 1 thread)"
YOLO = ZOO + "samples/vision/ultralytics_yolo/README.md (board, hrt_model_exec perf, 1 thread)"
TRIPLE = ZOO + "demos/detect/YOLO11/YOLO11-Detect_YUV420SP/README.md at cb6e2b2 (board, 1 thread): Softmax {}"
S, B = FigureKind.STATIC, FigureKind.BOARD
SOFTMAX = "/model.10/m/m.0/attn/Softmax"

# figure name, model file (perf_fit_models.py name), kind, public µs, source, precision of SOFTMAX
FIGURES = [
    *[(f"{m} static", m, S, us, LOG.format(log), None) for m, log, us in (
        ("yolov8n", "yolov8n", 3964.1), ("yolov9t", "yolov9t", 4008.6), ("yolov8n-seg", "yolov8n_seg", 5106.1),
        ("yolov5nu", "yolov5nu", 3320.5), ("yolo11n", "yolo11n", 5167.5), ("yolov8n-cls", "yolov8n_cls", 495.4),
        ("yolov10n", "yolov10n", 5754.1), ("yolo12n", "yolo12n", 35638.8))],
    *[(f"{m} board", m, B, ms * 1000, YOLO, None) for m, ms in (
        ("yolov5nu", 6.3), ("yolov8n", 7.0), ("yolov9t", 6.9), ("yolov10n", 8.7), ("yolo11n", 8.2),
        ("yolo12n", 39.4), ("yolov8n-seg", 10.4), ("yolov8n-cls", 0.7))],
    *[(f"{m} board", m, B, ms * 1000, CLS, None) for m, ms in (
        ("edgenext_base", 8.80), ("edgenext_small", 4.41), ("edgenext_x_small", 2.88), ("edgenext_xx_small", 2.47),
        ("efficientformer_l3", 17.55), ("efficientformer_l1", 5.88), ("efficientvit_m5", 6.34),
        ("efficientnet_b4", 5.44), ("efficientnet_b3", 3.96), ("efficientnet_b2", 3.31), ("googlenet", 2.19),
        ("mobilenetv1_100", 1.27), ("mobilenetv2_100", 1.42), ("mobilenetv3_large_100", 2.02),
        ("mobileone_s4", 4.58), ("mobileone_s3", 2.93), ("mobileone_s2", 2.11), ("mobileone_s1", 1.31),
        ("mobileone_s0", 0.80), ("repvgg_b1g2", 9.77), ("repvgg_b1g4", 7.58), ("repvgg_b0", 3.07),
        ("repvgg_a2", 6.07), ("repvgg_a1", 2.67), ("repvgg_a0", 1.85), ("resnet18", 2.95))],
    *[(f"yolo11n softmax {p.value}", "yolo11n", B, ms * 1000, TRIPLE.format(p.value), p)
      for p, ms in ((Precision.FLOAT, 23.3), (Precision.INT16, 8.0), (Precision.INT8, 6.7))],
]
# The BPU clock each board table was measured at, as its README states it: the classification table "BPU
# 1xBayes-e@1G"; the YOLO11 demo (the Softmax triple) overclocks it to 1.2 GHz (bpu_mclk_2x_clk); the
# Ultralytics table states none, so it is taken at the nominal clock (frequency_ghz, 0 here).
BOARD_GHZ = {CLS: 1.0, YOLO: 0.0, "triple": 1.2}
TRIPLE_NAMES = {f[0] for f in FIGURES if f[0].startswith("yolo11n softmax")}
ATTENTION = ("attention",)  # families whose name starts so: the attention models, judged apart
# The DDR line of each compile log (``latency = … us, DDR = … bytes``): bytes per frame, which the residency
# rule (stream_tiles, attention_onchip_share) is checked against.
LOG_DDR = {"yolov8n": 12651904, "yolov9t": 10916832, "yolov8n-seg": 16796832, "yolov5nu": 11696480,
           "yolo11n": 14326256, "yolov8n-cls": 2682784, "yolov10n": 17695424, "yolo12n": 149531184}
SHARES = (1.0, 0.5, 0.25)  # attention_onchip_share is chosen from these by the DDR lines


def _profile_path():
    return ROOT / "resources" / "marches" / "bayes-e.json"


def _prior_doc() -> dict:
    """The profile before any fit: a previous --write's fitted numbers replaced by the values they
    replaced (kept under "prior"), its "fit" dropped."""
    doc = json.loads(_profile_path().read_text(encoding="utf-8"))
    for section in (doc["params"], doc.get("precision") or {}):
        for k, p in list(section.items()):
            if isinstance(p, dict) and "prior" in p:
                p["value"] = p.pop("prior")
                p.pop("fitted", None)
            elif isinstance(p, dict) and "fitted" in p:  # absent before the fit: absent again
                del section[k]
    doc.pop("fit", None)
    return doc


def _load(models: Path, venv_python: str, march, only=frozenset()) -> list[Figure]:
    chosen = [f for f in FIGURES if not only or f[1] in only]
    missing = sorted({m for _, m, *_ in chosen if not (models / f"{m}.onnx").is_file()})
    if missing:
        cmd = [venv_python, str(ROOT / "benchmarks" / "perf_fit_models.py"), str(models), *missing]
        print("  building:", " ".join(cmd))
        subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL)
    opts = Options(march=march.path or march.name, calib=CalibConfig(source="synthetic", count=2, seed=0))
    sessions, figs = {}, []
    for name, model, kind, us, source, prec in chosen:
        f = models / f"{model}.onnx"
        if not f.is_file():
            print(f"  {name}: {f} missing and could not be built: left out")
            continue
        s = sessions.get(model)
        if s is None:
            s = sessions[model] = open_model(f, None, opts)
            s.run_calibration()
        pm = None
        if prec is not None and prec is not Precision.INT8:
            tensors = resolve_name(s.graph, SOFTMAX)
            if prec is Precision.INT16:  # the demo's node_info: 'InputType': 'int16', 'OutputType': 'int16'
                tensors += [t for t in s.graph.nodes[SOFTMAX].inputs if s.graph.is_quantized(t)]
            pm = PrecisionMap({t: prec for t in tensors})
        partner = "yolo11n softmax int8" if pm else ""
        # The triple's demo removes the Dequantize of its three box heads from the compiled model
        # (hb_model_modifier -r): those outputs leave as int32, the application dequantises them.
        raw = frozenset(t for t in s.graph.outputs if "/cv2." in t) if name in TRIPLE_NAMES else frozenset()
        clock = BOARD_GHZ["triple"] if name in TRIPLE_NAMES else BOARD_GHZ.get(source, 0.0)
        figs.append(Figure(name, kind, us, s.graph, tuple(s.concats()), source=source, precision=pm,
                           partner=partner, int_outputs=raw, board_bpu_ghz=clock if kind is B else 0.0))
    return figs


def _pct(a, b):
    return (a - b) / b * 100


def _print_table(res, figs):
    print("| figure | family | public µs | fitted µs | in-sample | leave-one-out µs | LOO |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for f in figs:
        p, loo = res.in_sample[f.name], res.loo.get(f.name)
        print(f"| {f.name} | {f.family} | {f.public_us:.1f} | {p:.1f} | {_pct(p, f.public_us):+.1f}% | "
              + (f"{loo:.1f} | {_pct(loo, f.public_us):+.1f}% |" if loo is not None else "- | - |"))


def _medians(res, figs):
    def med(sel):
        e = [abs(_pct(res.loo[f.name], f.public_us)) for f in sel if f.name in res.loo]
        i = [abs(_pct(res.in_sample[f.name], f.public_us)) for f in sel]
        return (f"median |in-sample| {np.median(i):.1f}%, median |LOO| {np.median(e):.1f}% "
                f"(max {max(e):.1f}%) over {len(e)}") if e else "-"

    print(f"\nall figures: {med(figs)}")
    print(f"attention models: {med([f for f in figs if f.family.startswith(ATTENTION)])}")
    print(f"convolution models: {med([f for f in figs if not f.family.startswith(ATTENTION)])}")
    for kind in (S, B):
        print(f"{kind.value} figures: {med([f for f in figs if f.kind is kind])}")
    for fam in sorted({f.family for f in figs}):
        print(f"  {fam}: {med([f for f in figs if f.family == fam])}")


def _ddr_check(figs, march) -> None:
    """Each compile log's DDR bytes per frame against the simulated ones, with the residency rule of the
    march and with each attention_onchip_share of SHARES (root-mean-square of the log ratios)."""
    import dataclasses

    statics = [f for f in figs if f.kind is S and f.name.split()[0] in LOG_DDR]
    if not statics:
        return
    print("\nDDR per frame, simulated against each compile log's DDR line:")
    rows = {}
    for share in SHARES:
        m = dataclasses.replace(march, attention_onchip_share=share)
        rows[share] = {f.name.split()[0]: Simulator(f.graph, m).full(f.concats).ddr_bytes for f in statics}
    plain = dataclasses.replace(march, stream_tiles=False)
    rows["size"] = {f.name.split()[0]: Simulator(f.graph, plain).full(f.concats).ddr_bytes for f in statics}
    own = march.attention_onchip_share
    print(f"| model | log MB | simulated MB (share {own:g}) | error | size alone MB |")
    print("|---|---:|---:|---:|---:|")
    for name, got in rows[own].items():
        print(f"| {name} | {LOG_DDR[name] / 1e6:.2f} | {got / 1e6:.2f} | {_pct(got, LOG_DDR[name]):+.0f}% | "
              f"{rows['size'][name] / 1e6:.2f} |")
    for key, got in rows.items():
        rms = float(np.sqrt(np.mean([np.log(v / LOG_DDR[k]) ** 2 for k, v in got.items()])))
        label = "size alone (no streaming)" if key == "size" else f"attention_onchip_share {key:g}"
        print(f"  {label}: root-mean-square log error {rms:.3f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=Path, default=Path("/tmp/perffit-models"), help="cache of built .onnx files")
    ap.add_argument("--venv-python", default="/tmp/perffit-venv/bin/python",
                    help="python of a venv with timm, ultralytics and onnx (to build missing models)")
    ap.add_argument("--prior", type=float, default=0.1, help="weight of the pull towards the unfitted estimates")
    ap.add_argument("--write", action="store_true", help="store the fit in resources/marches/bayes-e.json")
    ap.add_argument("--only", default="", help="comma-separated model names: fit to their figures only (a try-out)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    doc = _prior_doc()
    prior = profile_from_dict(doc, where="bayes-e (before the fit)", path=str(_profile_path()))
    print("loading and calibrating (synthetic, 2 samples) ...")
    figs = _load(args.models, args.venv_python, prior, set(filter(None, args.only.split(","))))
    print(f"{len(figs)} figures; fitting with leave-one-out ...")
    res = fit_with_loo(figs, prior, prior=args.prior,
                       progress=lambda k, n, name: print(f"  leave-one-out {k + 1}/{n}: {name}", flush=True))
    print(f"\nfitted parameters (channel_align {res.march.channel_align} chosen by the smallest residual):")
    for n in res.fitted:
        start = res.start.get(n)
        print(f"  {n:34s} {res.values[n]:12.5g}   (from {start:g}; depends: {len(res.depends.get(n, figs))} figures)")
    for n, why in res.not_fitted.items():
        print(f"  {n:34s} not fitted: {why}")
    print()
    _print_table(res, figs)
    _medians(res, figs)
    _ddr_check(figs, res.march)
    print(f"\n({time.perf_counter() - t0:.0f} s)")
    if args.write:
        from qtquant.base.fileio import atomic_write_text

        out = profile_doc(doc, res, script="benchmarks/perf_fit.py", describe=lambda f: f"{f.name} {f.public_us:g} µs")
        profile_from_dict(out)  # what is written must load
        atomic_write_text(_profile_path(), json.dumps(out, indent=2, ensure_ascii=False) + "\n",
                          what="march profile")
        print(f"wrote {_profile_path()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
