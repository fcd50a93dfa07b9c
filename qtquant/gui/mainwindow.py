"""The main window: canvas in the centre, docks around it, toolbar, menus and status bar.

All background work goes through :class:`~qtquant.gui.controller.Controller`; this
module only builds widgets and applies results.  Edits (Share, Ungroup, Auto-share,
policy and march changes) are QUndoCommands on :attr:`MainWindow.undo_stack`; their
wiring, export and projects live in :class:`~qtquant.gui.editor_ui.EditingMixin`.
"""

from __future__ import annotations

import gc
import time
from pathlib import Path

from PySide6.QtCore import QSettings, Qt, QTimer
from PySide6.QtGui import QAction, QActionGroup, QKeySequence, QUndoStack
from PySide6.QtWidgets import (QComboBox, QDockWidget, QFileDialog, QLabel, QMainWindow, QProgressBar, QToolButton,
                               QVBoxLayout, QWidget)

from ..errors import QtQuantError
from ..perf import MARCHES
from ..app import Options
from .canvas import GraphScene, GraphView
from .controller import Controller
from .dialogs import ErrorDialog, ModelSettings, OpenDialog, calib_config, model_inputs, needs_shapes
from .docks import ConcatList, GroupsPanel, JobLog, ModelInfo, PerfSummary
from .editor_ui import EditingMixin
from .inspector import Inspector
from .overlays import MODE_LABELS, MODES, Looks, fill_looks
from .recovery import Recovery, recovery_dir
from .search import SearchBar

__all__ = ["MainWindow"]

MAX_RECENT = 10
BUILD_SLICE_MS = 12  # the scene is built in slices this long, events handled in between (Qt's
# dirty-item pass and repaint after each slice cost about as much again)


class MainWindow(EditingMixin, QMainWindow):
    def __init__(self, settings: QSettings | None = None, options: Options | None = None, *,
                 auto_calibrate: bool = True, show_dialogs: bool = True, offer_recovery: bool = True):
        super().__init__()
        self.settings = settings if settings is not None else QSettings("qtquant", "qtquant")
        self.model_settings = ModelSettings(self.settings)
        self.show_dialogs = show_dialogs  # False for screenshots: errors are only recorded
        self.controller = Controller(options, self, auto_calibrate=auto_calibrate)
        self.bridge = self.controller.bridge
        self.jobs = self.controller.jobs
        self.undo_stack = QUndoStack(self)
        self.overlay = "none"
        self.errors: list[tuple[str, str, str]] = []  # (title, message, details)
        self.error_dialogs: list[ErrorDialog] = []
        self.setWindowTitle("qtquant")
        self.resize(1500, 940)
        self.setAcceptDrops(True)
        self._build = None  # (generator, spec) of a scene being built in slices
        self._build_timer = QTimer(self, singleShot=True, interval=0)
        # Background jobs after a calibration wait for the canvas to finish its sliced work.
        self.controller.views_busy = lambda: self._build is not None or self.scene.looks_pending
        self._build_timer.timeout.connect(self._build_more)

        self.scene = GraphScene(self)
        self.view = GraphView(self.scene)
        self.search_bar = SearchBar()
        self.search_bar.jump.connect(self.jump_to)
        central = QWidget()
        cl = QVBoxLayout(central)
        cl.setContentsMargins(0, 0, 0, 0)
        cl.setSpacing(0)
        cl.addWidget(self.search_bar)
        cl.addWidget(self.view, 1)
        self.setCentralWidget(central)

        self._build_docks()
        self._setup_editing()
        self._build_actions()
        self._build_status()
        self._connect()
        self._connect_editing()
        # After _connect: its modelLoaded slot must run after the window's own.
        self.recovery = Recovery(self, recovery_dir(self.settings, settings is None))
        self._restore()
        self._show_welcome()
        if offer_recovery and show_dialogs and self.recovery.pending():
            QTimer.singleShot(0, self.recovery.offer)

    # -- construction ----------------------------------------------------------------------------
    def _dock(self, title: str, widget, area, name: str) -> QDockWidget:
        d = QDockWidget(title, self)
        d.setObjectName(name)
        d.setWidget(widget)
        self.addDockWidget(area, d)
        return d

    def _build_docks(self) -> None:
        b = self.bridge
        self.model_info = ModelInfo(b)
        self.concat_list = ConcatList(b)
        self.groups_panel = GroupsPanel(b)
        self.inspector = Inspector(b)
        self.perf_summary = PerfSummary(b)
        self.job_log = JobLog()
        self.docks = {
            "model": self._dock("Model", self.model_info, Qt.LeftDockWidgetArea, "dock_model"),
            "concats": self._dock("Concats", self.concat_list, Qt.LeftDockWidgetArea, "dock_concats"),
            "groups": self._dock("Groups", self.groups_panel, Qt.LeftDockWidgetArea, "dock_groups"),
            "inspector": self._dock("Inspector", self.inspector, Qt.RightDockWidgetArea, "dock_inspector"),
            "perf": self._dock("Performance", self.perf_summary, Qt.BottomDockWidgetArea, "dock_perf"),
            "log": self._dock("Job log", self.job_log, Qt.BottomDockWidgetArea, "dock_log"),
        }
        # Only one tabified group: with two, Qt (6.11/6.12) leaves a stale tab bar painted
        # after the window is resized.
        self.tabifyDockWidget(self.docks["perf"], self.docks["log"])
        self.docks["perf"].raise_()
        self.resizeDocks([self.docks["model"], self.docks["concats"], self.docks["groups"]], [140, 370, 200],
                         Qt.Vertical)
        self.resizeDocks([self.docks["concats"], self.docks["inspector"]], [420, 400], Qt.Horizontal)
        self.resizeDocks([self.docks["perf"]], [280], Qt.Vertical)

    def _act(self, text, slot=None, shortcut=None, tip="", enabled=True) -> QAction:
        a = QAction(text, self)
        if slot is not None:
            a.triggered.connect(slot)
        if shortcut:
            a.setShortcut(QKeySequence(shortcut))
        if tip:
            a.setToolTip(tip)
            a.setStatusTip(tip)
        a.setEnabled(enabled)
        return a

    def _build_actions(self) -> None:
        A = self.actions_by_name = {
            "open": self._act("Open…", self.open_dialog, QKeySequence.Open, "Open an ONNX model"),
            "demo": self._act("Open demo model", self.open_demo, tip="The bundled multi-scale attention demo"),
            "calibrate": self._act("Calibrate…", self.calibrate_dialog, "Ctrl+K", "Choose calibration data and run it"),
            **self._edit_actions(),
            "find": self._act("Find…", self.search_bar.open, QKeySequence.Find, "Find a node or tensor"),
            "fit": self._act("Fit to view", self.view.fit, "F", "Show the whole graph"),
            "zoom_in": self._act("Zoom in", lambda: self.view.set_zoom(self.view.zoom * 1.25), QKeySequence.ZoomIn),
            "zoom_out": self._act("Zoom out", lambda: self.view.set_zoom(self.view.zoom / 1.25),
                                  QKeySequence.ZoomOut),
            "resimulate": self._act("Re-simulate", self.controller.refresh, "F5", "Run the perf simulator again"),
            "quit": self._act("Quit", self.close, QKeySequence.Quit),
        }
        A["undo"] = self.undo_stack.createUndoAction(self, "Undo")
        A["undo"].setShortcut(QKeySequence.Undo)
        A["redo"] = self.undo_stack.createRedoAction(self, "Redo")
        A["redo"].setShortcuts([QKeySequence("Ctrl+Shift+Z"), QKeySequence.Redo])

        tb = self.addToolBar("Main")
        tb.setObjectName("toolbar_main")
        tb.setToolButtonStyle(Qt.ToolButtonTextOnly)
        for key in ("open", "calibrate", None, "autoshare"):
            tb.addSeparator() if key is None else tb.addAction(A[key])
        tb.addWidget(self.autoshare_bits)
        for key in ("share", "ungroup", None, "undo", "redo", None):
            tb.addSeparator() if key is None else tb.addAction(A[key])
        tb.addWidget(QLabel(" Overlay: "))
        self.overlay_combo = QComboBox()
        for m in MODES:
            self.overlay_combo.addItem(MODE_LABELS[m], m)
        self.overlay_combo.currentIndexChanged.connect(lambda i: self.set_overlay(self.overlay_combo.itemData(i)))
        tb.addWidget(self.overlay_combo)
        tb.addWidget(QLabel("  March: "))
        self.march_combo = QComboBox()
        self.march_combo.addItems(MARCHES)
        self.march_combo.setCurrentText(self.controller.options.march)
        self.march_combo.currentTextChanged.connect(self.set_march)
        tb.addWidget(self.march_combo)
        tb.addWidget(QLabel("  Policy: "))
        tb.addWidget(self.policy_combo)
        tb.addSeparator()
        tb.addAction(A["fit"])
        tb.addAction(A["export"])

        mb = self.menuBar()
        fm = mb.addMenu("&File")
        fm.addAction(A["open"])
        fm.addAction(A["open_project"])
        self.recent_menu = fm.addMenu("Open &Recent")
        fm.addAction(A["demo"])
        fm.addSeparator()
        fm.addAction(A["save_project"])
        fm.addAction(A["save_project_as"])
        fm.addSeparator()
        fm.addAction(A["export"])
        fm.addSeparator()
        fm.addAction(A["quit"])
        em = mb.addMenu("&Edit")
        for key in ("undo", "redo", "history", None, "find", None, "share", "ungroup", "autoshare"):
            em.addSeparator() if key is None else em.addAction(A[key])
        vm = mb.addMenu("&View")
        for key in ("fit", "zoom_in", "zoom_out"):
            vm.addAction(A[key])
        vm.addSeparator()
        self.overlay_actions = QActionGroup(self)
        for m in MODES:
            a = QAction(f"Overlay: {MODE_LABELS[m]}", self, checkable=True)
            a.setData(m)
            a.setChecked(m == "none")
            a.triggered.connect(lambda checked=False, m=m: self.set_overlay(m))
            self.overlay_actions.addAction(a)
            vm.addAction(a)
        vm.addSeparator()
        for d in self.docks.values():
            vm.addAction(d.toggleViewAction())
        am = mb.addMenu("&Analysis")
        am.addAction(A["calibrate"])
        am.addAction(A["resimulate"])
        pm = am.addMenu("Shared-range &policy")
        self.policy_actions = QActionGroup(self)
        for i in range(self.policy_combo.count()):
            a = QAction(self.policy_combo.itemText(i), self, checkable=True)
            a.setData(self.policy_combo.itemData(i))
            a.triggered.connect(lambda checked=False, v=a.data(): self.editor.set_policy(v))
            self.policy_actions.addAction(a)
            pm.addAction(a)
        pm.aboutToShow.connect(lambda: [a.setChecked(a.data() == self.policy_combo.currentData())
                                        for a in self.policy_actions.actions()])
        self._rebuild_recent()

    def _build_status(self) -> None:
        sb = self.statusBar()
        self.progress = QProgressBar()
        self._progress_state = None  # (label, total, done, cancellable) shown now
        self._progress_timer = QTimer(self, singleShot=True, interval=0)
        self._progress_timer.timeout.connect(self._show_progress)
        self.progress.setFixedWidth(200)
        self.progress.setTextVisible(True)
        self.progress.setVisible(False)
        self.cancel_button = QToolButton()
        self.cancel_button.setText("Cancel")
        self.cancel_button.setVisible(False)
        self.cancel_button.clicked.connect(self.cancel_jobs)
        self.job_label = QLabel("")
        self.zoom_label = QLabel("")
        sb.addPermanentWidget(self.job_label)
        sb.addPermanentWidget(self.progress)
        sb.addPermanentWidget(self.cancel_button)
        sb.addPermanentWidget(self.zoom_label)

    def _connect(self) -> None:
        c, b, j = self.controller, self.bridge, self.jobs
        c.loadStarted.connect(lambda p: self.statusBar().showMessage(f"Loading {Path(p).name}…"))
        c.modelLoaded.connect(self._on_model_loaded)
        c.loadFailed.connect(lambda m: self.statusBar().showMessage("Could not open the model", 8000))
        c.layoutReady.connect(self._on_layout)
        c.calibrationStarted.connect(lambda: self.statusBar().showMessage("Calibrating…"))
        c.calibrationFinished.connect(self._on_calibrated)
        b.changed.connect(lambda kind: self.apply_looks())
        b.changed.connect(lambda kind: self.update_hulls() if kind in ("groups", "calibrated") else None)
        b.perfChanged.connect(lambda: self.apply_looks() if self.overlay == "latency" else None)
        j.jobStarted.connect(self._on_job_started)
        j.jobProgress.connect(self._on_job_progress)
        j.jobFinished.connect(self._on_job_finished)
        j.jobFailed.connect(lambda job, msg, det: self.show_error(f"{job.label.capitalize()} failed", msg, det))
        self.scene.selectionChanged.connect(self._on_selection)
        self.scene.selectionChanged.connect(self._on_selection_for_edit)
        self.concat_list.nodeActivated.connect(self.jump_to)
        self.perf_summary.nodeActivated.connect(self.jump_to)
        self.perf_summary.marchChanged.connect(self.set_march)
        self.inspector.histogramWanted.connect(
            lambda t: self.controller.histogram(t, lambda tt: self.inspector.show_tensor(tt)
                                                if self.inspector.tensor == tt else None))
        self.view.zoomChanged.connect(lambda z: self.zoom_label.setText(f"{z * 100:.0f}%"))

    # -- opening models ---------------------------------------------------------------------------
    def open_model(self, path, input_shapes=None, calib=None):
        """Open ``path`` with explicit shapes/calibration (no dialog).  Returns the load job."""
        return self.controller.open_model(path, input_shapes, calib)

    def request_open(self, path, ask: bool | None = None) -> bool:
        """Open with remembered settings; ask first when ``ask`` or when shapes are unresolved."""
        path = Path(path)
        if path.suffix.lower() == ".qtquant":
            return self.open_project(path) is not None
        if not self.projects.maybe_save():
            return False
        rem = self.model_settings.load(path)
        if ask is None:
            ask = needs_shapes(model_inputs(path)) and not rem.get("shapes")
        values = rem
        if ask and self.show_dialogs:
            dlg = OpenDialog(path, rem, self)
            if dlg.exec() != OpenDialog.Accepted:
                return False
            values = dlg.values()
            self.model_settings.save(path, values)
        shapes = {k: tuple(int(x) for x in v.lower().split("x")) for k, v in values.get("shapes", {}).items()}
        self.open_model(path, shapes, calib_config(values.get("calib", {})))
        return True

    def open_dialog(self) -> None:
        start = str(self.controller.path.parent) if self.controller.path else str(Path.home())
        p, _ = QFileDialog.getOpenFileName(self, "Open ONNX model", start, "ONNX models (*.onnx);;All files (*)")
        if p:
            self.request_open(p, ask=True)

    def open_demo(self) -> None:
        from ..demo import demo_model_path

        try:
            self.request_open(demo_model_path(), ask=False)
        except (OSError, QtQuantError) as e:
            self.show_error("Cannot write the demo model", str(e))

    def calibrate_dialog(self) -> None:
        path = self.controller.path
        if path is None or self.bridge.session is None:
            return
        rem = self.model_settings.load(path)
        dlg = OpenDialog(path, rem, self, shapes_editable=False, title="Calibrate")
        if dlg.exec() != OpenDialog.Accepted:
            return
        values = dlg.values()
        values["shapes"] = rem.get("shapes", values["shapes"])
        self.model_settings.save(path, values)
        self.controller.calibrate(calib_config(values["calib"]))

    def dragEnterEvent(self, ev):
        if any(u.toLocalFile().lower().endswith((".onnx", ".qtquant")) for u in ev.mimeData().urls()):
            ev.acceptProposedAction()

    def dropEvent(self, ev):
        for u in ev.mimeData().urls():
            if u.toLocalFile().lower().endswith(".qtquant"):
                ev.acceptProposedAction()
                QTimer.singleShot(0, lambda p=u.toLocalFile(): self.open_project(p))
                return
            if u.toLocalFile().lower().endswith(".onnx"):
                ev.acceptProposedAction()
                QTimer.singleShot(0, lambda p=u.toLocalFile(): self.request_open(p, ask=True))
                return

    # -- recent files ---------------------------------------------------------------------------
    def recent_files(self) -> list[str]:
        v = self.settings.value("recent", [])
        if isinstance(v, str):
            v = [v]
        return [p for p in (v or []) if p]

    def add_recent(self, path: Path) -> None:
        p = str(Path(path).resolve())
        rec = [p] + [r for r in self.recent_files() if r != p]
        self.settings.setValue("recent", rec[:MAX_RECENT])
        self._rebuild_recent()

    def _rebuild_recent(self) -> None:
        self.recent_menu.clear()
        rec = self.recent_files()
        for p in rec:
            a = self.recent_menu.addAction(Path(p).name)
            a.setToolTip(p)
            a.triggered.connect(lambda checked=False, p=p: self.request_open(p))
        self.recent_menu.setEnabled(bool(rec))

    # -- results ------------------------------------------------------------------------------------
    def _on_model_loaded(self, session) -> None:
        g = session.graph
        name = g.path.name if g.path else "model"
        self._build = None  # a half-built scene of the previous model is dropped
        self.view.viewport().setUpdatesEnabled(True)
        self.scene.reset(f"Laying out {len(g.nodes)} nodes…")
        self.search_bar.set_graph(g)
        self.undo_stack.clear()
        self.group_focus = None
        self.projects.model_opened()
        if self.projects.path is not None:
            self.add_recent(self.projects.path)
        self.update_title()
        self._sync_options()
        self.update_edit_actions()
        if g.path:
            self.add_recent(g.path)
        self.job_log.log(f"opened {g.path or name}: {len(g.nodes)} nodes, {len(g.concat_nodes())} Concats")

    def _on_layout(self, spec) -> None:
        """Build the scene in slices of BUILD_SLICE_MS (20,000 items take over a second)."""
        self._build = (self.scene.build_steps(spec), spec)
        # No painting of a half-built scene between slices (each paint re-indexes the new items).
        self.view.viewport().setUpdatesEnabled(False)
        self._build_timer.start()  # not in this turn: it also starts the calibration job

    def _build_more(self) -> None:
        if self._build is None:  # superseded: another model replaced the scene
            return
        gen, spec = self._build
        t = time.perf_counter()
        for _ in gen:
            if time.perf_counter() - t > BUILD_SLICE_MS / 1000:
                gc.freeze()  # the items made so far live as long as the scene: no collector walks them
                self._build_timer.start()
                return
        self._build = None
        self._scene_built(spec)

    def _scene_built(self, spec) -> None:
        gc.freeze()  # the scene's 50,000 items live as long as the model: no collector walks over them
        self.view.viewport().setUpdatesEnabled(True)
        self.view.resetTransform()
        self.view.fit_top()
        self.apply_looks()
        self.update_hulls()
        self.view.minimap.schedule_refresh()  # in its own slice of the event loop, not this one
        lay = spec.layout
        self.job_log.log(f"layout: {len(spec.nodes)} items, {len(spec.edges)} edges, {lay.crossings} crossings, "
                         f"{lay.seconds * 1000:.0f} ms")

    def _on_calibrated(self, ok: bool) -> None:
        if ok:
            cs = self.bridge.concats or []
            self.statusBar().showMessage(f"Calibrated: {sum(1 for c in cs if c.rescales)} of {len(cs)} Concats "
                                         f"need rescales", 8000)
        else:
            self.statusBar().showMessage("Calibration stopped", 8000)
            self.apply_looks()  # on success the "calibrated" change has applied them already

    def apply_looks(self) -> None:
        """Re-colour the canvas for the current overlay and analysis (no re-layout)."""
        g = self.bridge.graph
        if g is None or self.scene.spec is None or self.scene.spec is not self.controller.spec:
            return
        looks = Looks()

        def finish():
            self.view.legend.set_overlay(*looks.legend)
            return looks.nodes, looks.edges, looks.edge_default

        # Computed in slices: a heat overlay of 20,000 nodes is ~80 ms of Python.
        self.scene.compute_looks(fill_looks(looks, g, self.overlay, self.bridge.concats, self.bridge.perf), finish)

    def set_overlay(self, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown overlay {mode!r}; choose from {', '.join(MODES)}")
        self.overlay = mode
        self.overlay_combo.blockSignals(True)
        self.overlay_combo.setCurrentIndex(MODES.index(mode))
        self.overlay_combo.blockSignals(False)
        for a in self.overlay_actions.actions():
            a.setChecked(a.data() == mode)
        self.apply_looks()

    def _sync_march(self, march: str) -> None:
        self.march_combo.blockSignals(True)
        if self.march_combo.findText(march) < 0:
            self.march_combo.addItem(march)
        self.march_combo.setCurrentText(march)
        self.march_combo.blockSignals(False)
        self.perf_summary.set_march(march)

    # -- selection and navigation --------------------------------------------------------------
    def _on_selection(self) -> None:
        if self.scene.switching:  # items swapped for the overview: the selection is kept
            return
        names = self.scene.selected_names()
        name = names[0] if len(names) == 1 else None
        self.inspector.show_node(name, others=len(names) if len(names) > 1 else 0)
        if name:
            self.concat_list.select_name(name)

    def jump_to(self, name: str) -> bool:
        ok = self.view.center_on(name)
        if not ok:
            self.statusBar().showMessage(f"{name} is not on the canvas yet", 4000)
        return ok

    def search(self, text: str) -> str | None:
        self.search_bar.open()
        self.search_bar.edit.setText(text)
        return self.search_bar.next_hit()

    # -- jobs and errors ------------------------------------------------------------------------
    def _on_job_started(self, job) -> None:
        self.job_log.log(f"{job.label}: started")
        self._update_progress()

    def _on_job_progress(self, job) -> None:
        self._update_progress()

    def _on_job_finished(self, job) -> None:
        self.job_log.log(f"{job.label}: {job.status} in {job.seconds:.2f} s")
        self._update_progress()

    def _update_progress(self) -> None:
        # Once per event-loop turn: a job ending and two starting (calibration done, simulation
        # and fidelity submitted) made three progress-bar re-layouts in one turn.
        self._progress_timer.start()

    def _show_progress(self) -> None:
        active = self.jobs.active()
        if not active:
            state = None
        else:
            main = next((j for j in active if j.cancellable), active[0])
            state = (main.label + ("" if len(active) == 1 else f" (+{len(active) - 1})"), main.total, main.done,
                     any(j.cancellable for j in active))
        if state == self._progress_state:  # a progress bar re-laid out per job event: ~5 ms each
            return
        self._progress_state = state
        if state is None:
            self.progress.setVisible(False)
            self.cancel_button.setVisible(False)
            self.job_label.setText("")
            return
        label, total, done, cancellable = state
        self.job_label.setText(label)
        self.progress.setVisible(True)
        if total:
            self.progress.setRange(0, total)
            self.progress.setValue(done)
            self.progress.setFormat("%v / %m")
        else:
            self.progress.setRange(0, 0)
        self.cancel_button.setVisible(cancellable)

    def cancel_jobs(self) -> None:
        for j in self.jobs.active():
            if j.cancellable:
                j.cancel()
        self.statusBar().showMessage("Cancelling…", 3000)

    def show_error(self, title: str, message: str, details: str = "") -> ErrorDialog | None:
        self.errors.append((title, message, details))
        self.job_log.log(f"error: {message}")
        self.statusBar().showMessage(message, 10000)
        if not self.show_dialogs:
            return None
        dlg = ErrorDialog(title, message, details, self)
        self.error_dialogs.append(dlg)
        dlg.finished.connect(lambda r, d=dlg: self.error_dialogs.remove(d) if d in self.error_dialogs else None)
        dlg.show()
        return dlg

    def _show_welcome(self) -> None:
        self.scene.reset("Open a model with File › Open (Ctrl+O), or drop an .onnx file here.")

    # -- persistence ----------------------------------------------------------------------------------
    def _restore(self) -> None:
        geo = self.settings.value("window/geometry")
        if geo is not None:
            self.restoreGeometry(geo)
        st = self.settings.value("window/state")
        if st is not None:
            self.restoreState(st)

    def closeEvent(self, ev):
        if not self.projects.maybe_save():
            ev.ignore()
            return
        self.settings.setValue("window/geometry", self.saveGeometry())
        self.settings.setValue("window/state", self.saveState())
        self.recovery.stop()
        self.recovery.discard()  # a clean close: nothing to recover next time
        self.controller.shutdown()
        for d in list(self.error_dialogs):
            d.close()
        super().closeEvent(ev)
