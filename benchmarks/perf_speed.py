"""Perf simulator speed: full simulation vs incremental re-simulation after one group edit.

Targets: full simulation of a 10,000-node graph under 0.5 s; an incremental
update at least 10x faster than a full one.  Prints the figures and the ratios, each
against a reference measured in the same run.

    python3 benchmarks/perf_speed.py [--yolo PATH] [--nodes 10000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the model builders live with the tests

from builders import synthetic_model  # noqa: E402
from qtquant.quant.concat import analyze_concats  # noqa: E402
from qtquant.quant.domains import build_domains  # noqa: E402
from qtquant.model.graph import graph_from_model, load_graph  # noqa: E402
from qtquant.perf import Simulator  # noqa: E402
from bench_common import SHARED  # noqa: E402

DEFAULT_YOLO = SHARED / "models" / "yolov8n_320.onnx"


def _timeit(fn, repeat):
    times = []
    out = None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def _ranges(graph, seed=0):
    rng = np.random.default_rng(seed)
    out = {}
    for t in graph.observed_tensors:
        hi = float(rng.uniform(0.5, 8.0))
        out[t] = (-hi, hi)
    return out


def bench(label, graph, repeat):
    ranges = _ranges(graph)
    t0 = time.perf_counter()
    concats = analyze_concats(graph, build_domains(graph, ranges))
    t_analysis = time.perf_counter() - t0
    target = max(concats, key=lambda c: c.rescales)  # the group edit: share the worst Concat
    edited = analyze_concats(graph, build_domains(graph, ranges, [[m.tensor for m in target.inputs]
                                                                  + [target.output.tensor]]))

    t_full, full = _timeit(lambda: Simulator(graph, "bayes-e").full(concats), repeat)
    sim = Simulator(graph, "bayes-e")
    sim.full(concats)
    t_inc, inc = _timeit(lambda: sim.update(edited), repeat)
    t_inc_overlay, _ = _timeit(lambda: sim.update(edited).by_node(), repeat)
    check = Simulator(graph, "bayes-e").full(edited)
    same = inc.to_dict() == check.to_dict()
    print(f"{label}: {len(graph.nodes)} nodes, {len(concats)} Concats, rescales {full.rescale_count} -> "
          f"{inc.rescale_count} after sharing {target.node}")
    print(f"  full simulation            {t_full * 1e3:9.2f} ms")
    print(f"  incremental after 1 edit   {t_inc * 1e3:9.3f} ms   ({t_full / t_inc:7.0f}x faster than full)")
    print(f"  incremental + by_node()    {t_inc_overlay * 1e3:9.3f} ms   ({t_full / t_inc_overlay:7.0f}x faster)")
    print(f"  (for scale: Concat analysis over fresh domains {t_analysis * 1e3:.1f} ms, not part of the simulator)")
    print(f"  incremental result == full result: {same}")
    return t_full, t_inc, same


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--yolo", type=Path, default=DEFAULT_YOLO, help="yolov8n ONNX (skipped when missing)")
    ap.add_argument("--nodes", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    ok = True
    if args.yolo.is_file():
        g = load_graph(args.yolo, {"images": (1, 3, 640, 640)})
        _, _, same = bench("yolov8n @640", g, args.repeat)
        ok &= same
    else:
        print(f"yolov8n: {args.yolo} not found, skipped")
    t = time.perf_counter()
    g = graph_from_model(synthetic_model(args.nodes, seed=0), ort_fallback=False)
    print(f"(synthetic graph built and shape-inferred in {time.perf_counter() - t:.2f} s)")
    t_full, t_inc, same = bench(f"synthetic {args.nodes}", g, args.repeat)
    ok &= same
    print()
    print(f"target full < 500 ms on {args.nodes} nodes: {t_full * 1e3:.1f} ms -> {'PASS' if t_full < 0.5 else 'FAIL'}")
    print(f"target incremental >= 10x faster: {t_full / t_inc:.0f}x -> {'PASS' if t_full / t_inc >= 10 else 'FAIL'}")
    return 0 if ok and t_full < 0.5 and t_full / t_inc >= 10 else 1


if __name__ == "__main__":
    raise SystemExit(main())
