"""Trace one "group these tensors" edit in the desktop app, from gesture to canvas recolour.

The demo model (multi-scale attention) is opened in the real window (offscreen), calibrated,
and left to settle.  Then `attn/k_cat` is selected on the canvas and Ctrl+G is pressed, as a
user does.  With ``sys.setprofile`` the script counts:

* **first turn**: the Python functions that run while the key event is delivered (the
  synchronous part of the gesture), and the GUI<->core crossings among them: a call from
  code under ``qtquant/gui`` into the rest of ``qtquant`` or back (a slot run by a core
  event counts: the nearest qtquant frame above it is core);
* **until idle**: how many times each widget class ran a refresh (a method whose name starts
  with refresh/rebuild/_rebuild/_refresh/_fill/populate, defined under ``qtquant/gui``),
  from the key press until the jobs the edit started have finished.

Counts, not times: they do not depend on the machine.  Run it against another checkout with
``--root DIR`` (its ``qtquant`` is imported instead of this one's).

Run:  QT_QPA_PLATFORM=offscreen python3 benchmarks/edit_trace.py [--root DIR] [--concat attn/k_cat]
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import pump_events  # noqa: E402

REFRESH = re.compile(r"^_?(refresh|rebuild|fill|populate|update_rows|reload)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=str(Path(__file__).resolve().parents[1]), help="the checkout to trace")
    ap.add_argument("--concat", default="attn/k_cat")
    ap.add_argument("--timeout", type=float, default=120.0)
    args = ap.parse_args()
    root = Path(args.root).resolve()
    sys.path.insert(0, str(root))
    pkg = str(root / "qtquant")
    gui = str(root / "qtquant" / "gui")

    from PySide6.QtCore import Qt
    from PySide6.QtTest import QTest
    from PySide6.QtWidgets import QApplication

    import qtquant
    from qtquant.app.demo import write_demo

    assert str(Path(qtquant.__file__).resolve()).startswith(pkg), qtquant.__file__
    from qtquant.gui.window.mainwindow import MainWindow

    app = QApplication.instance() or QApplication(sys.argv)
    tmp = Path(tempfile.mkdtemp(prefix="qtquant-trace-"))
    write_demo(tmp)
    win = MainWindow()
    for attr in ("show_dialogs",):
        if hasattr(win, attr):
            setattr(win, attr, False)
    win.resize(1400, 900)
    win.show()

    def idle() -> bool:
        c = getattr(win, "controller", None)
        busy = getattr(c, "busy", False)
        jobs = getattr(win, "jobs", None)
        return not busy and not getattr(jobs, "busy", False)

    def session():
        s = getattr(win, "session", None)
        if s is None and getattr(win, "bridge", None) is not None:
            s = win.bridge.session
        return s

    def pump(cond, what):
        pump_events(app, cond, args.timeout, what)

    model = next(tmp.glob("multiscale_attention*.onnx"))
    win.open_model(str(model))
    pump(lambda: session() is not None and session().ready and idle(), "calibration")
    t_settle = time.monotonic()
    pump(lambda: idle() and time.monotonic() - t_settle > 1.0, "the views to settle")
    scene = win.scene
    item = scene.nodes[args.concat]
    scene.clearSelection()
    item.setSelected(True)
    app.processEvents()
    groups_before = len(session().groups)

    first = {"calls": 0, "funcs": set(), "crossings": 0}
    refreshes: Counter = Counter()
    phase = {"first": True}

    def zone(filename: str) -> str:
        if filename.startswith(gui):
            return "gui"
        if filename.startswith(pkg):
            return "core"
        return ""

    def prof(frame, event, arg):
        if event != "call":
            return
        fn = frame.f_code.co_filename
        z = zone(fn)
        if not z:
            return
        name = frame.f_code.co_name
        if z == "gui" and REFRESH.match(name):
            me = frame.f_locals.get("self")
            refreshes[f"{type(me).__name__}.{name}" if me is not None else name] += 1
        if not phase["first"]:
            return
        first["calls"] += 1
        first["funcs"].add((fn, frame.f_code.co_firstlineno, name))
        up = frame.f_back
        while up is not None and not zone(up.f_code.co_filename):
            up = up.f_back
        if up is not None and zone(up.f_code.co_filename) != z:
            first["crossings"] += 1

    sys.setprofile(prof)
    QTest.keyClick(win.view.viewport() if hasattr(win, "view") else win, Qt.Key_G, Qt.ControlModifier)
    phase["first"] = False
    t0 = time.monotonic()
    pump(lambda: idle() and time.monotonic() - t0 > 1.0, "the edit's jobs")
    sys.setprofile(None)
    groups_after = len(session().groups)
    print(f"checkout {root}")
    print(f"edit: Ctrl+G on {args.concat}: groups {groups_before} -> {groups_after}")
    print(f"first event-loop turn: {first['calls']} Python calls of {len(first['funcs'])} distinct qtquant "
          f"functions, {first['crossings']} GUI<->core crossings")
    print("refreshes until idle, per widget method:")
    for k, v in sorted(refreshes.items()):
        print(f"  {v:3d}  {k}")
    win.close()
    return 0 if groups_after > groups_before else 1


if __name__ == "__main__":
    raise SystemExit(main())
