"""Render the main window (or just the canvas) to PNG once every background job settled.

Used by ``qtquant screenshot`` and by the benchmarks; works under
``QT_QPA_PLATFORM=offscreen``.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QApplication, QToolBar

from ...base.errors import BadInputError, QtQuantError
from ...base.vocab import Overlay

__all__ = ["wait_settled", "take_screenshot", "ScreenshotError"]


class ScreenshotError(QtQuantError):
    """The model could not be rendered (load, calibration or layout failed, or timed out)."""


BIG_GRAPH_NODES = 2000  # from here on the screenshot does not wait for the fidelity check (see take_screenshot)


def wait_settled(win, timeout: float = 120.0, *, need_perf: bool = True, need_fidelity: bool | None = True) -> None:
    """Process events until the layout is drawn and calibration and simulation finished (and,
    ``need_fidelity``, the fidelity check; None: unless the graph has BIG_GRAPH_NODES nodes or more)."""
    app = QApplication.instance()
    t0 = time.monotonic()
    want_perf = need_perf
    while True:
        app.processEvents()
        if win.errors:
            raise ScreenshotError(win.errors[0][1])
        c = win.controller
        fid = need_fidelity
        if fid is None:
            fid = c.session is None or len(c.session.graph.nodes) < BIG_GRAPH_NODES
        busy = c.busy if fid else c.busy_but_fidelity
        done = (c.spec is not None and win.scene.spec is c.spec and not busy
                and c.relay.ready and (c.session.perf is not None or not want_perf))
        if done:
            return
        if c.session is not None and not c.relay.ready and not win.jobs.busy and c.spec is not None:
            raise ScreenshotError("calibration did not finish")
        if time.monotonic() - t0 > timeout:
            raise ScreenshotError(f"timed out after {timeout:.0f} s waiting for background jobs")
        time.sleep(0.01)


def _quiet_qpa() -> None:
    """The offscreen platform warns about window size hints it cannot honour; not news."""
    from PySide6.QtCore import qInstallMessageHandler

    prev = None

    def handler(mode, ctx, msg):
        if "propagateSizeHints" in msg:
            return
        if prev is not None:
            prev(mode, ctx, msg)
        else:
            import sys

            sys.stderr.write(msg + "\n")

    prev = qInstallMessageHandler(handler)


def _hierarchy(win, collapse: bool, expand) -> None:
    """--collapse / --expand: the view of the module hierarchy to render (the last block expanded is centred)."""
    canvas = win.canvas
    if collapse:
        canvas.collapse_all()
    for path in expand:
        m = canvas.model
        bid = m.h.resolve(path) if m is not None else None
        if bid is None:
            raise BadInputError(f"--expand: no block {path!r} in the module hierarchy"
                                + ("" if m is None or m.h.flat else f" (top level: {', '.join(m.h.top_blocks[:6])})"))
        canvas.expand(bid)
    if expand:
        inside = canvas.model.members_shown(canvas.model.h.resolve(expand[-1]))
        ys = [canvas.model.pos[u] for u in inside]
        if ys:
            from PySide6.QtCore import QPointF

            win.view.set_zoom(max(win.view.zoom, 0.55))
            top = min(y for _, y in ys)
            xs = sorted(x for x, _ in ys)
            vis = win.view.mapToScene(win.view.viewport().rect()).boundingRect()
            win.view.centerOn(QPointF(xs[len(xs) // 2], top + vis.height() / 2 - 40))


def take_screenshot(model, out, *, input_shapes=None, options=None, overlay: str = Overlay.NONE,
                    select: str | None = None, size=(1600, 1000), canvas_only: bool = False,
                    plan: str | None = None, timeout: float = 180.0, cut=(), collapse: bool = False,
                    expand=(), int16=(), keep_float=(), accuracy_top: int | None = None,
                    dock: str | None = None, error_local: bool = False, stats=None,
                    wait_fidelity: bool | None = None, max_sqnr_drop: float | None = None, compiler_log=None,
                    compiler_log_any_shape: bool = False, compiler_scales: bool = True,
                    compare: str | None = None) -> Path:
    """``int16`` / ``keep_float``: node or tensor names set to that precision (after ``plan``).
    ``accuracy_top``: run the accuracy check first (measuring that many candidates; the Error
    overlay runs it with 8 when not given); ``dock``: raise that dock's tab (e.g. "sensitivity").
    ``stats``: a statistics file used instead of calibrating.  ``compiler_log``: a compile log
    (:class:`~qtquant.horizon.log.CompileLog`) placed beside the model once it is open.
    ``wait_fidelity`` None: wait for the fidelity check unless the graph has BIG_GRAPH_NODES
    nodes or more -- there, as in the window, the structure and the calibrated colours come first
    and the output SQNR fills in later (the PNG then says it is being measured).
    ``compare``: a second file of the model to compare with (File › Compare With…)."""
    from .app import make_app
    from .mainwindow import MainWindow

    _quiet_qpa()
    app = make_app()
    tmp = tempfile.TemporaryDirectory(prefix="qtquant-shot-")
    settings = QSettings(str(Path(tmp.name) / "settings.ini"), QSettings.IniFormat)
    win = MainWindow(settings, options, show_dialogs=False)
    try:
        if canvas_only:  # the canvas fills the window: docks and bars out of the way
            for d in win.docks.values():
                d.hide()
            for tb in win.findChildren(QToolBar):
                tb.hide()
            win.menuBar().hide()
            win.statusBar().hide()
        win.resize(*size)
        win.show()
        win.open_model(model, input_shapes, options.calib if options is not None else None, cut, stats=stats)
        wait_settled(win, timeout, need_perf=False, need_fidelity=wait_fidelity)
        if compiler_log is not None:
            from ...app.compilerlog import place_compile_log

            place_compile_log(win.session, compiler_log, any_shape=compiler_log_any_shape, scales=compiler_scales)
            wait_settled(win, timeout, need_fidelity=wait_fidelity)
        if plan:
            from ...app.plans import apply_plan

            apply_plan(win.stack, plan)
        if int16 or keep_float:
            from ...app.commands import SetOptionsCommand
            from ...quant.precision import assignments_from_names

            s = win.session
            win.stack.push(SetOptionsCommand(
                precision=assignments_from_names(s.graph, int16, keep_float, base=s.options.precision)))
        wait_settled(win, timeout, need_fidelity=wait_fidelity)
        if accuracy_top is not None or overlay == Overlay.ERROR:
            from ...fidelity.accuracy import analyze_accuracy

            s = win.session
            s.set_accuracy(analyze_accuracy(s, top=8 if accuracy_top is None else accuracy_top), s.revision)
            app.processEvents()
        if max_sqnr_drop is not None:  # what the dock's Auto-share by accuracy does, in this thread
            from ...app.sharing import share_by_accuracy

            rep = share_by_accuracy(win.stack, max_sqnr_drop)
            win.sensitivity.plot.set_report(rep)
            win.sensitivity.set_busy(rep.text().splitlines()[0])
            wait_settled(win, timeout)
        if error_local:
            win.sensitivity.local.setChecked(True)
        if dock:
            if dock not in win.docks:
                raise BadInputError(f"--dock: no dock named {dock!r} (choose from {', '.join(win.docks)})")
            win.docks[dock].show()
            win.docks[dock].raise_()
        win.set_overlay(overlay)
        if compare:  # what File › Compare With… runs in the background, in this thread
            from ...compare.live import open_comparison

            s = win.session
            win.comparison.set_diff(open_comparison(compare, s, win.relay.perf(),
                                                    s.fidelity.value if s.fidelity is not None else None))
        _hierarchy(win, collapse, expand)
        if select:
            home = win.canvas.reveal(select) if select in win.session.graph.nodes else None
            if home is None and select not in win.scene.nodes:
                raise BadInputError(f"--select: no node named {select!r} in the model")
            win.jump_to(select)
            item = win.scene.nodes[home or select]
            item.flash = False
        win.scene.flush_looks()
        win.view.minimap.flush()
        for _ in range(5):
            app.processEvents()
        pix = (win.view if canvas_only else win).grab()
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        if not pix.save(str(out), "PNG"):
            raise BadInputError(f"cannot write {out}")
        return out
    finally:
        c = win.controller
        if c.jobs.active("fidelity") and c.fidelity_worker is not None:
            # Not waited for (a big graph): stop it, or its thread outlives the window it reports to.
            c.fidelity_worker.abort()
            c.jobs.pool.waitForDone(30000)
        win.close()
        win.deleteLater()
        app.processEvents()
        tmp.cleanup()
