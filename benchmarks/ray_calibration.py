"""Calibration on a local Ray instance with 2 workers against ``--jobs 1`` and ``--jobs 2``.

usage: python benchmarks/ray_calibration.py [--model ../shared/models/yolov8n_320.onnx]
           [--input-shape images=1x3x320x320] [--samples 256] [--observers minmax,percentile]

Needs the [ray] extra.  The data is qtquant's synthetic source (seeded uniform [0, 1) images,
``--calib synthetic``): the calibration folder has only 7 photos, and the wall time and the
equality of the results do not depend on what the pixels show.  All samples are calibrated on
(``--holdout 0``).  Ray is started once (``ray.init(num_cpus=2)``) before the timed runs and its
start-up time is printed apart; each figure is the wall time of one ``calibrate`` call in this
process, printed next to the ``--jobs 1`` and ``--jobs 2`` references of the same run, with
whether the statistics are equal: histograms bit for bit, min/max exactly.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _equal(a, b) -> tuple[bool, bool]:
    hist = all(np.array_equal(a.stats[n].hist, b.stats[n].hist) for n in a.stats) and list(a.stats) == list(b.stats)
    minmax = all((a.stats[n].min, a.stats[n].max) == (b.stats[n].min, b.stats[n].max) for n in a.stats)
    return hist, minmax


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(ROOT.parent / "shared" / "models" / "yolov8n_320.onnx"))
    ap.add_argument("--input-shape", default="images=1x3x320x320")
    ap.add_argument("--samples", type=int, default=256)
    ap.add_argument("--observers", default="minmax", help="comma-separated, e.g. minmax,percentile")
    args = ap.parse_args()

    import ray

    from qtquant.app import open_model
    from qtquant.calib import CalibConfig, calibrate

    graph = open_model(args.model, [args.input_shape]).graph
    # The workers import qtquant from where this process does.
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    t = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    print(f"ray.init(num_cpus=2): {time.perf_counter() - t:.1f} s (not in the figures below)")
    print(f"model {Path(args.model).name} ({args.input_shape}), {args.samples} synthetic samples, "
          f"{len(graph.observed_tensors)} observed tensors, {os.cpu_count()} CPUs")
    try:
        for observer in args.observers.split(","):
            base = dict(source="synthetic", count=args.samples, holdout=0, observer=observer.strip())
            runs = {}
            for label, extra in (("--jobs 1", dict(jobs=1)), ("--jobs 2", dict(jobs=2)),
                                 ("--ray, 2 workers", dict(ray="auto", jobs=2))):
                t = time.perf_counter()
                res = calibrate(graph, CalibConfig(**base, **extra))
                runs[label] = (time.perf_counter() - t, res)
            ref_s, ref = runs["--jobs 1"]
            print(f"--observer {observer}:")
            for label, (secs, res) in runs.items():
                hist, minmax = _equal(ref, res)
                same = "" if res is ref else (f"; vs --jobs 1: histograms {'bit-identical' if hist else 'DIFFER'}, "
                                              f"min/max {'exact' if minmax else 'DIFFER'}, ranges "
                                              f"{'equal' if res.ranges == ref.ranges else 'DIFFER'}")
                print(f"  {label:18s} {secs:6.1f} s  ({secs / ref_s:.2f}x --jobs 1, "
                      f"{secs / runs['--jobs 2'][0]:.2f}x --jobs 2; {res.batches} samples){same}")
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
