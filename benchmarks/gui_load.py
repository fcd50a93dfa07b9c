"""Desktop app load and paint speed, and layout quality against python-igraph's Sugiyama.

For each model (the demo, yolov8n at 320x320 when the shared model folder is present, and
a synthetic 5,000-node graph) this prints:

* open -> first paint and full paint: from ``open_model`` to the first paint of the canvas
  (a big graph's structure is drawn while it loads), and to the paint of the typed graph with
  every item placed (load, layout and scene build included; calibration runs alongside);
  also the split into load, layout and build, and open -> calibrated colours painted;
* the layout engine's time and edge crossings against plain ``Graph.layout_sugiyama``
  (igraph's own layering) on the same node graph;
* the frame time of a scripted pan (scroll by 60 px per frame, synchronous repaint) at
  the readable default zoom and with the whole graph in view.

Targets: yolov8n_320 painted < 2 s after load; 5,000 nodes < 5 s, smooth panning.

``--before REV`` times the app's first window instead, as ``qtquant`` with no model starts it, in
this checkout and in REV (checked out in a temporary ``git worktree``), alternately with the same
interpreter, each run a fresh process: from the process start to the GUI's modules imported, to
the empty window's first paint and to the demo's canvas painted.  It prints the medians of each
side and their ratio.  ``--first-window`` times this checkout alone the same way.

Run:  QT_QPA_PLATFORM=offscreen python3 benchmarks/gui_load.py [--models DIR]
      python3 benchmarks/gui_load.py --before REV [--runs N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
ROOT = Path(__file__).resolve().parents[1]
# A first-window run times another checkout's qtquant: its folder goes first on the path, before
# anything imports qtquant (``--root``; nothing below imports it at module level).
_root = sys.argv[sys.argv.index("--root") + 1] if "--root" in sys.argv[:-1] else str(ROOT)
sys.path.insert(0, _root)

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from bench_common import SHARED, machine, pump_events  # noqa: E402


def synthetic_model(path: Path, target_nodes: int = 5000) -> Path:
    """Inception-like blocks: 4 parallel branches of 1-3 Conv+SiLU units, a Concat, a 1x1 Conv+SiLU.

    Tiny tensors (8 channels, 8x8) so that loading measures the graph, not the weights.  About
    28 nodes and 10 layers per block: a 5,000-node graph is ~1,800 layers deep and 4-5 wide,
    the proportions of real detection and attention models.
    """
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    c = 8
    k = [0]

    def name(base):
        k[0] += 1
        return f"{base}_{k[0]}"

    def conv_silu(x, cin, cout, tag, gain=1.0):
        n = name(tag + "/conv/Conv")
        w = (rng.standard_normal((cout, cin, 1, 1)) * gain / np.sqrt(cin)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, n + ".w"))
        nodes.append(helper.make_node("Conv", [x, n + ".w"], [n + "_out"], name=n, kernel_shape=[1, 1]))
        s = name(tag + "/act/Sigmoid")
        nodes.append(helper.make_node("Sigmoid", [n + "_out"], [s + "_out"], name=s))
        m = name(tag + "/act/Mul")
        nodes.append(helper.make_node("Mul", [n + "_out", s + "_out"], [m + "_out"], name=m))
        return m + "_out"

    x = conv_silu("images", 3, c, "/stem")
    b = 0
    while len(nodes) < target_nodes - 30:
        tag = f"/model.{b}"
        outs = []
        for br in range(4):
            y = x
            for u in range(int(rng.integers(1, 4))):
                # branch gains differ, so the Concats mismatch like real multi-scale blocks
                y = conv_silu(y, c if u == 0 else c // 2, c // 2, f"{tag}/b{br}.{u}", gain=0.5 + br)
            outs.append(y)
        cat = name(f"{tag}/Concat")
        nodes.append(helper.make_node("Concat", outs, [cat + "_out"], name=cat, axis=1))
        x = conv_silu(cat + "_out", 4 * (c // 2), c, f"{tag}/cv2")
        b += 1
    nodes[-1].output[0] = "out"
    g = helper.make_graph(nodes, "synthetic", [helper.make_tensor_value_info("images", TensorProto.FLOAT,
                                                                             [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return path


class PaintProbe:
    """Records when the canvas viewport is first painted after a given moment."""

    def __init__(self, viewport):
        from PySide6.QtCore import QEvent, QObject

        probe = self

        class Filter(QObject):
            def eventFilter(self, obj, ev):
                if ev.type() == QEvent.Paint and probe.armed and probe.t is None:
                    probe.pending = True
                return False

        self.armed = False
        self.pending = False
        self.t = None
        self._f = Filter()
        viewport.installEventFilter(self._f)

    def arm(self):
        self.armed, self.pending, self.t = True, False, None


def run_model(app, path: Path, shapes, label: str, calib_count: int = 4) -> dict:
    from PySide6.QtCore import QSettings

    from qtquant.calib import CalibConfig
    from qtquant.app.scene.layout import igraph_reference
    from qtquant.gui.window.mainwindow import MainWindow

    marks = {}

    class Window(MainWindow):
        def _scene_built(self, spec):  # the scene is built in slices: this runs after the last one
            super()._scene_built(spec)
            # A big graph's structure is drawn before its load finishes (the early structure): the
            # first build is that one, the last the typed graph's.
            marks["built"] = time.perf_counter()
            marks.setdefault("first_built", marks["built"])
            probe.arm()

    tmp = tempfile.mkdtemp(prefix="qtquant-bench-")
    win = Window(QSettings(str(Path(tmp) / "s.ini"), QSettings.IniFormat))
    win.resize(1600, 1000)
    win.show()
    for _ in range(5):
        app.processEvents()
    vp = win.view.viewport()
    probe = PaintProbe(vp)
    win.controller.modelLoaded.connect(lambda s: marks.setdefault("loaded", time.perf_counter()))
    # "layout arrived", apart from "scene built": the controller's signal, which the canvas builds the scene on
    win.controller.layoutReady.connect(lambda spec: marks.setdefault("layout", time.perf_counter()))
    win.controller.calibrationFinished.connect(lambda ok: marks.setdefault("calibrated", time.perf_counter()))

    def recoloured():  # the canvas took the calibrated looks (all of them: none left for a later turn)
        # (calibrationFinished comes after the views took the calibration: a small graph's looks
        # are on the canvas by then, so the session says whether they are the calibrated ones)
        s = win.session
        if s is not None and s.calibration is not None and not win.controller.calibrating \
                and not win.scene.looks_pending:
            marks.setdefault("coloured", time.perf_counter())

    win.scene.looksChanged.connect(recoloured)
    t0 = time.perf_counter()
    win.open_model(path, shapes, CalibConfig(count=calib_count))
    deadline = t0 + 300
    # first paint: a scene was built (the early structure, or the typed graph) and the viewport
    # then painted once; full paint: the same for the typed graph's scene, built after the load
    def painted(final: bool):
        while time.perf_counter() < deadline:
            app.processEvents()
            if probe.armed and probe.pending and probe.t is None and win.scene.spec is not None and (
                    not final or marks.get("built", 0) > marks.get("loaded", float("inf"))):
                probe.t = time.perf_counter()
                return probe.t
            time.sleep(0.001)
        raise SystemExit(f"{label}: not painted in {deadline - t0:.0f} s")

    t_first = painted(final=False)
    t_paint = t_first if marks["built"] > marks.get("loaded", float("inf")) else painted(final=True)
    # colours: calibration done and its looks on the canvas, painted (the perf and fidelity jobs
    # that follow refresh other overlays); all done: those jobs too
    pump_events(app, lambda: "coloured" in marks or ("calibrated" in marks and not win.controller.busy),
                deadline - time.perf_counter(), f"{label}: the calibrated colours")
    vp.repaint()
    t_colours = time.perf_counter()
    pump_events(app, lambda: not win.controller.busy, deadline - time.perf_counter(), f"{label}: the jobs")
    t_done = time.perf_counter()
    spec = win.controller.spec
    lay = spec.layout
    edges = [(e.src, e.dst) for e in spec.edges]
    ig_t, ig_x = igraph_reference(len(spec.nodes), edges)

    # scripted pans: readable zoom (the default view), then the whole graph in view
    def pan(frames=40, step=60):
        sb = win.view.horizontalScrollBar() if win.view.horizontalScrollBar().maximum() > 0 else \
            win.view.verticalScrollBar()
        vb = win.view.verticalScrollBar()
        times = []
        for i in range(frames):
            t = time.perf_counter()
            d = step if (i // 10) % 2 == 0 else -step
            if sb.maximum() > 0:
                sb.setValue(sb.value() + d)
            vb.setValue(vb.value() + d)
            vp.repaint()
            times.append((time.perf_counter() - t) * 1000)
        return statistics.median(times), sorted(times)[int(len(times) * 0.95) - 1]

    win.view.set_zoom(1.0)
    win.view.centerOn(next(iter(win.scene.nodes.values())))  # (a collapsed block is one item)
    pan_readable = pan()
    win.view.fit()
    pan_fit = pan()
    t = time.perf_counter()
    vp.repaint()
    fit_paint = (time.perf_counter() - t) * 1000
    res = {
        "label": label, "nodes": len(win.session.graph.nodes), "items": len(spec.nodes), "edges": len(edges),
        "first_paint_s": t_first - t0, "full_paint_s": t_paint - t0,
        "load_s": marks["loaded"] - t0, "layout_s": marks["layout"] - marks["loaded"],
        "build_s": marks["built"] - marks["layout"], "paint_s": t_paint - marks["built"], "colours_s": t_colours - t0,
        "done_s": t_done - t0,
        "engine_s": lay.seconds,
        "engine_x": lay.crossings, "igraph_s": ig_t, "igraph_x": ig_x, "pan_readable": pan_readable,
        "pan_fit": pan_fit, "fit_paint_ms": fit_paint, "fit_zoom": win.view.zoom,
    }
    win.close()
    win.controller.shutdown()
    win.deleteLater()
    app.processEvents()
    return res


# -- the first window, in a fresh process per run ---------------------------------------------------

FIRST_WINDOW_MARKS = (("imports", "GUI modules imported"), ("window", "empty window painted"),
                      ("demo", "demo canvas painted"))


def first_window_child(t0: float) -> int:
    """One start of the app as ``qtquant`` with no model starts it (its own settings file, no
    recovery prompt): prints, as JSON, the seconds from ``t0`` (the parent's clock just before it
    started this process) to each of :data:`FIRST_WINDOW_MARKS`."""
    import importlib

    import qtquant

    # --before may name a checkout from before gui/ had subpackages (gui/app.py, gui/mainwindow.py).
    window = "qtquant.gui.window" if (Path(qtquant.__file__).parent / "gui" / "window").is_dir() else "qtquant.gui"
    make_app = importlib.import_module(f"{window}.app").make_app
    MainWindow = importlib.import_module(f"{window}.mainwindow").MainWindow

    marks = {"imports": time.time() - t0}
    from PySide6.QtCore import QEvent, QObject, QSettings, QTimer

    app = make_app(["qtquant"])
    win = None
    loaded = []

    class Paints(QObject):
        def eventFilter(self, obj, ev):
            if ev.type() == QEvent.Paint and win is not None:
                if "window" not in marks and getattr(obj, "window", None) and obj.window() is win:
                    marks["window"] = time.time() - t0
                if loaded and "demo" not in marks and obj is win.view.viewport() and win.scene.spec is not None:
                    marks["demo"] = time.time() - t0
            return False

    paints = Paints()
    app.installEventFilter(paints)
    folder = Path(tempfile.mkdtemp(prefix="qtquant-bench-"))
    settings = QSettings(str(folder / "s.ini"), QSettings.IniFormat)
    win = MainWindow(settings, offer_recovery=False)
    win.controller.modelLoaded.connect(lambda s: loaded.append(True))
    win.show()
    QTimer.singleShot(0, win.opener.open_demo)
    deadline = time.time() + 120
    while "demo" not in marks and time.time() < deadline:
        app.processEvents()
        time.sleep(0.001)
    print(json.dumps({"qtquant": str(Path(qtquant.__file__).parent), **marks}), flush=True)
    win.controller.shutdown()
    shutil.rmtree(folder, ignore_errors=True)
    os._exit(0 if "demo" in marks else 1)  # a fast exit: the teardown is not what is timed


def _time_first_window(root: Path, python: str) -> dict:
    env = {**os.environ, "QT_QPA_PLATFORM": os.environ.get("QT_QPA_PLATFORM", "offscreen")}
    t0 = time.time()
    out = subprocess.run([python, str(Path(__file__).resolve()), "--first-window-child", str(t0), "--root", str(root)],
                         capture_output=True, text=True, env=env, timeout=300)
    line = next((ln for ln in reversed(out.stdout.splitlines()) if ln.startswith("{")), None)
    if out.returncode != 0 or line is None:
        raise SystemExit(f"first window of {root}: exit {out.returncode}\n{out.stderr[-2000:]}")
    got = json.loads(line)
    if Path(got["qtquant"]).resolve() != (root / "qtquant").resolve():
        raise SystemExit(f"the run for {root} imported {got['qtquant']}")
    return got


def _describe(root: Path) -> str:
    def git(*a):
        return subprocess.run(["git", "-C", str(root), *a], capture_output=True, text=True).stdout.strip()

    return git("rev-parse", "--short", "HEAD") + (" + uncommitted changes" if git("status", "--porcelain",
                                                                                   "--untracked-files=no") else "")


def first_windows(before: str | None, runs: int) -> int:
    """Time the first window of this checkout (and of ``before``, alternately), ``runs`` times each
    after one discarded warm-up run each; print the medians and the ratio."""
    python = sys.executable
    sides = [("this checkout", ROOT)]
    tmp = None
    if before is not None:
        tmp = Path(tempfile.mkdtemp(prefix="qtquant-before-")) / "tree"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", str(tmp), before], check=True)
        sides.insert(0, (f"before ({before})", tmp))
    try:
        times: dict[str, list[dict]] = {label: [] for label, _ in sides}
        for label, root in sides:  # warm-up: the file cache, .pyc files of a fresh worktree
            _time_first_window(root, python)
        for i in range(runs):
            for label, root in (sides if i % 2 == 0 else sides[::-1]):  # ABBA: a drift hits both sides alike
                times[label].append(_time_first_window(root, python))
        print(f"first window: {runs} run(s) each, alternating, one process per run; {python}, "
              f"QT_QPA_PLATFORM={os.environ.get('QT_QPA_PLATFORM')}; {machine()}")
        for label, root in sides:
            print(f"  {label}: {root} at {_describe(root)}")
        head = f"{'seconds from process start to':<32}" + "".join(f"{label:>26}" for label, _ in sides)
        print(head + (f"{'ratio':>9}" if len(sides) == 2 else ""))
        for key, text in FIRST_WINDOW_MARKS:
            meds = []
            row = f"{text:<32}"
            for label, _ in sides:
                xs = [r[key] for r in times[label]]
                meds.append(statistics.median(xs))
                row += f"{f'{meds[-1]:.3f} ({min(xs):.3f}-{max(xs):.3f})':>26}"
            if len(meds) == 2:
                row += f"{meds[1] / meds[0]:>8.2f}x"
            print(row)
        print("(median, then min-max in brackets" + ("; ratio = this checkout / before: under 1 is faster)"
                                                    if len(sides) == 2 else ")"))
    finally:
        if tmp is not None:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tmp)], check=False)
            shutil.rmtree(tmp.parent, ignore_errors=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=str(SHARED / "models"),
                    help="folder with yolov8n_320.onnx (skipped if missing)")
    ap.add_argument("--nodes", type=int, default=5000, help="size of the synthetic graph")
    ap.add_argument("--before", default=None, metavar="REV",
                    help="time the first window of this checkout and of REV (a git revision), alternately")
    ap.add_argument("--first-window", action="store_true", help="time the first window of this checkout alone")
    ap.add_argument("--runs", type=int, default=9, help="first-window runs per checkout (default 9)")
    ap.add_argument("--first-window-child", type=float, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--root", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.first_window_child is not None:
        return first_window_child(args.first_window_child)
    if args.before is not None or args.first_window:
        return first_windows(args.before, args.runs)
    from qtquant.app.demo import build_attention_demo
    from qtquant.gui.window.app import make_app

    app = make_app()
    tmp = Path(tempfile.mkdtemp(prefix="qtquant-bench-"))
    demo = tmp / "demo.onnx"
    onnx.save(build_attention_demo(), str(demo))
    runs = [(demo, None, "demo (attention)")]
    yolo = Path(args.models) / "yolov8n_320.onnx"
    if yolo.exists():
        runs.append((yolo, {"images": (1, 3, 320, 320)}, "yolov8n_320"))
    else:
        print(f"(skipping yolov8n_320: {yolo} not found)")
    t = time.perf_counter()
    synth = synthetic_model(tmp / "synthetic.onnx", args.nodes)
    print(f"built the synthetic model in {time.perf_counter() - t:.1f} s")
    runs.append((synth, None, f"synthetic {args.nodes}"))
    rows = [run_model(app, p, s, label) for p, s, label in runs]

    print()
    print(f"{'model':<20} {'nodes':>6} {'edges':>6} {'first paint':>12} {'full paint':>11} {'load':>7} "
          f"{'layout':>7} {'build':>7} {'paint':>7} {'colours':>8} {'all done':>9}")
    for r in rows:
        print(f"{r['label']:<20} {r['nodes']:>6} {r['edges']:>6} {r['first_paint_s']:>11.2f}s "
              f"{r['full_paint_s']:>10.2f}s {r['load_s']:>6.2f}s {r['layout_s']:>6.2f}s {r['build_s']:>6.2f}s "
              f"{r['paint_s']:>6.2f}s {r['colours_s']:>7.2f}s {r['done_s']:>8.2f}s")
    print("(first paint = the first canvas paint with a scene: a big graph's structure, drawn while it loads; "
          "full paint = load + layout job + scene build + canvas paint of the typed graph; colours = "
          "calibration done and its colours on the canvas, painted; all done = the perf and fidelity jobs that "
          "follow done too)")
    print()
    print(f"{'model':<20} {'layout engine':>14} {'igraph sugiyama':>16} {'time ratio':>11} "
          f"{'crossings':>10} {'igraph':>7}")
    for r in rows:
        ratio = r["engine_s"] / r["igraph_s"] if r["igraph_s"] else float("nan")
        print(f"{r['label']:<20} {r['engine_s'] * 1000:>12.0f}ms {r['igraph_s'] * 1000:>14.0f}ms {ratio:>10.2f}x "
              f"{r['engine_x']:>10} {r['igraph_x']:>7}")
    print()
    print(f"{'model':<20} {'pan @100% median/p95':>22} {'pan @fit median/p95':>22} {'fit zoom':>9}")
    for r in rows:
        a, b = r["pan_readable"], r["pan_fit"]
        print(f"{r['label']:<20} {a[0]:>10.1f} / {a[1]:>5.1f} ms {b[0]:>10.1f} / {b[1]:>5.1f} ms "
              f"{r['fit_zoom'] * 100:>8.1f}%")
    print()
    for r in rows:
        if r["label"] == "yolov8n_320":
            print(f"target yolov8n_320 painted < 2 s: {r['full_paint_s']:.2f} s "
                  f"({'met' if r['full_paint_s'] < 2 else 'MISSED'})")
        if r["label"].startswith("synthetic"):
            print(f"target {r['nodes']} nodes painted < 5 s: {r['full_paint_s']:.2f} s "
                  f"({'met' if r['full_paint_s'] < 5 else 'MISSED'}; its structure first at "
                  f"{r['first_paint_s']:.2f} s); pan median {r['pan_readable'][0]:.1f} ms "
                  f"at 100%, {r['pan_fit'][0]:.1f} ms with all {r['nodes']} nodes in view")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
