"""``qtquant screenshot`` of a large model against the floor of anything that calibrates.

The floor: create a plain onnxruntime session for the same model and run the same number of
samples through it (what any calibration must do at least once).  The screenshot includes
loading, the layout, calibration, the analyses and the render, as a user runs it.

Target: the screenshot of a 20,000-node model takes at most 3x the floor.

Run:  python benchmarks/screenshot_floor.py [--nodes 20000] [--samples 16] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gui_load import synthetic_model  # noqa: E402  (the graph family of the GUI benchmarks)

TARGET_RATIO = 3.0


def floor_seconds(path: Path, samples: int) -> float:
    """A plain onnxruntime session for ``path`` plus ``samples`` runs of random input."""
    import numpy as np
    import onnxruntime as ort

    t0 = time.perf_counter()
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    inp = sess.get_inputs()[0]
    shape = [d if isinstance(d, int) else 1 for d in inp.shape]
    rng = np.random.default_rng(0)
    for _ in range(samples):
        sess.run(None, {inp.name: rng.standard_normal(shape).astype(np.float32)})
    return time.perf_counter() - t0


def screenshot_seconds(path: Path, out: Path, samples: int) -> float:
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    cmd = [sys.executable, "-m", "qtquant", "screenshot", str(path), "-o", str(out), "--size", "1600x1000",
           "--calib-count", str(samples), "--timeout", "900"]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"screenshot failed ({r.returncode}): {r.stderr.strip()[-400:]}")
    return dt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=20000)
    ap.add_argument("--samples", type=int, default=16, help="calibration samples (qtquant's default count)")
    ap.add_argument("--keep", metavar="DIR", default=None, help="keep the model and the PNG in DIR")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="qtquant-floor-") as tmp:
        d = Path(args.keep or tmp)
        d.mkdir(parents=True, exist_ok=True)
        model = synthetic_model(d / f"synthetic_{args.nodes}.onnx", args.nodes)
        floor = floor_seconds(model, args.samples)
        shot = screenshot_seconds(model, d / f"synthetic_{args.nodes}.png", args.samples)
    ratio = shot / floor
    print(f"{args.nodes}-node model, {args.samples} samples")
    print(f"  floor (onnxruntime session + {args.samples} runs): {floor:8.2f} s")
    print(f"  qtquant screenshot (calibration included):     {shot:8.2f} s  ({ratio:.1f}x the floor)")
    verdict = "PASS" if ratio <= TARGET_RATIO else "FAIL"
    print(f"target: screenshot <= {TARGET_RATIO:.0f}x the floor: {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
