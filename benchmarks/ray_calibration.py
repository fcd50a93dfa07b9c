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

Equality holds between runs whose onnxruntime sessions use the same number of intra-op threads:
the Ray workers run one thread each, and ``--jobs 1`` and ``--jobs 2`` run two samples at once a
process with ``cpu_count // 2`` and ``cpu_count // 4`` threads each (``session_threads``: one on
2 cores, where all three agree), and onnxruntime's
kernels can round differently with another thread count (a last-bit difference in a few
activations moves a min/max by an ulp and a value across a bin edge).  The merge itself is exact.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
from bench_common import SHARED, machine  # noqa: E402

from qtquant.calib.runner import session_threads  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _compare(a, b) -> str:
    """Histograms bit for bit, min/max exactly; when they differ, by how much."""
    hist = sum(not np.array_equal(a.stats[n].hist, b.stats[n].hist) for n in a.stats)
    mm = [max(abs(a.stats[n].min - b.stats[n].min), abs(a.stats[n].max - b.stats[n].max))
          / max(a.stats[n].absmax, 1e-30) for n in a.stats]
    if not hist and not max(mm):
        return "histograms bit-identical, min/max exact"
    return (f"{hist}/{len(a.stats)} histograms differ, min/max differ by up to {max(mm):.1e} of |x|max "
            f"({sum(v > 0 for v in mm)} tensors)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(SHARED / "models" / "yolov8n_320.onnx"))
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
    from qtquant.calib.rayrun import quiet_auth_notice

    quiet_auth_notice()  # as the CLI: Ray's notice that it chose token authentication itself
    t = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    print(f"ray.init(num_cpus=2): {time.perf_counter() - t:.1f} s (not in the figures below)")
    print(f"model {Path(args.model).name} ({args.input_shape}), {args.samples} synthetic samples, "
          f"{len(graph.observed_tensors)} observed tensors, {machine()}")
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
            jobs1_threads = session_threads(1)
            print(f"--observer {observer}:")
            for label, (secs, res) in runs.items():
                print(f"  {label:18s} {secs:6.1f} s  ({secs / ref_s:.2f}x --jobs 1, "
                      f"{secs / runs['--jobs 2'][0]:.2f}x --jobs 2; {res.batches} samples)")
            ray_res = runs["--ray, 2 workers"][1]
            print(f"  --ray vs --jobs 2 ({session_threads(2)} and 1 onnxruntime thread(s) a run): "
                  f"{_compare(runs['--jobs 2'][1], ray_res)}")
            print(f"  --ray vs --jobs 1 (two samples at once, {jobs1_threads} onnxruntime thread(s) each): "
                  f"{_compare(ref, ray_res)}")
            print(f"  --jobs 2 vs --jobs 1: {_compare(ref, runs['--jobs 2'][1])}")
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
