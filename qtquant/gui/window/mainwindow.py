"""The main window: canvas in the centre, docks around it, toolbar, menus and status bar.

The window only composes.  Background work goes through
:class:`~qtquant.gui.window.controller.Controller`, which installs sessions in a
:class:`~qtquant.gui.relay.SessionRelay`; every widget and controller below takes that relay
(the session and its one command stack), not the window:
:class:`~qtquant.gui.window.actions.WindowActions` (actions, toolbar, menus),
:class:`~qtquant.gui.canvas.showing.CanvasPresenter` (what the canvas shows),
:class:`~qtquant.gui.canvas.edit.CanvasEditing` (selection, Share / Ungroup, context menu),
:class:`~qtquant.gui.window.projects.ProjectController`, :class:`~qtquant.gui.window.exporting.ExportController`,
:class:`~qtquant.gui.window.opening.ModelOpener` and :class:`~qtquant.gui.window.recovery.Recovery`.
"""

from __future__ import annotations

import math
from pathlib import Path

from PySide6.QtCore import QSettings, Qt, QTimer
from PySide6.QtWidgets import QDockWidget, QLabel, QMainWindow, QVBoxLayout, QWidget

from ...app import Options
from ...app.commands import StackStep
from .actions import WindowActions
from ..canvas.scene import GraphScene
from ..canvas.view import GraphView
from ..canvas.edit import CanvasEditing
from ..canvas.showing import CanvasPresenter
from .compilerlogs import LOG_SUFFIXES, CompilerLogOpener
from .controller import Controller
from ..docks.panels import ConcatList, GroupsPanel, JobLog, ModelInfo, PerfSummary
from ..docks.sensitivity import AccuracyJobs, SensitivityDock
from .editing import Editor
from .exporting import ExportController, render_canvas
from ..docks.history import HistoryView
from .comparing import ComparisonController
from ..docks.inspector import Inspector
from ..dialogs.messages import Messages
from .opening import ModelOpener
from ..dialogs.progress import JobProgress
from .projects import ProjectController
from .recovery import Recovery, recovery_dir
from ..canvas.search import SearchBar

__all__ = ["MainWindow"]

# The share of the window's width the canvas keeps when the side docks would take more (see
# MainWindow._keep_canvas_room)
CANVAS_SHARE = 0.4
RIGHT_DOCK_MIN = 220  # px: the narrowest the right side is made to give the canvas room
DOCK_SLACK = 6  # px a dock's width may differ from the one set (minimum sizes, separators) and still be ours


class MainWindow(QMainWindow):
    def __init__(self, settings: QSettings | None = None, options: Options | None = None, *,
                 auto_calibrate: bool = True, show_dialogs: bool = True, offer_recovery: bool = True):
        super().__init__()
        self.settings = settings if settings is not None else QSettings("qtquant", "qtquant")
        self.controller = c = Controller(options, self, auto_calibrate=auto_calibrate)
        self.relay, self.jobs = c.relay, c.jobs
        self.setWindowTitle("qtquant")
        self.resize(1500, 940)
        self.setAcceptDrops(True)

        self.scene = GraphScene(self)
        self.view = GraphView(self.scene)
        self.search_bar = SearchBar()
        central = QWidget()
        cl = QVBoxLayout(central)
        cl.setContentsMargins(0, 0, 0, 0)
        cl.setSpacing(0)
        cl.addWidget(self.search_bar)
        cl.addWidget(self.view, 1)
        self.setCentralWidget(central)
        self._build_docks()
        self.messages = Messages(self, self.statusBar(), self.job_log, show_dialogs=show_dialogs)
        self.canvas = CanvasPresenter(self.relay, self.scene, self.view, self)
        # Background jobs after a calibration wait for the canvas to finish its sliced work.
        c.views_busy = lambda: self.canvas.busy
        self.canvas.jobs = self.jobs  # Expand all on a big graph lays out in the background
        self.inspector.describe_block = self.canvas.describe_block
        # Expanding a block makes a new view: the controller's "what is shown" follows it.
        self.canvas.viewChanged.connect(lambda: setattr(c, "spec", self.canvas.spec))
        self.canvas.built.connect(lambda spec: setattr(c, "spec", spec))
        self.editor = Editor(self.relay, self)
        self.accuracy_jobs = AccuracyJobs(self.relay, self.jobs, self.messages, self.sensitivity, self)
        self.last_autoshare = None
        self.projects = ProjectController(self.relay, c, self.messages, self)
        self.exports = ExportController(self.relay, self.jobs, self.settings, self.messages,
                                        lambda: render_canvas(self.scene, self.view), self)
        self.window_actions = WindowActions(self, self._slots(), self.relay, self.docks["history"])
        self.option_widgets = self.window_actions.options  # overlay, march, policy, auto-share threshold
        self.window_actions.build_toolbar()
        self.window_actions.build_menus(self.docks.values())
        self.comparison = ComparisonController(self.relay, self.jobs, self.messages, self.canvas, self.concat_list,
                                               self.inspector, self)
        self.edits = CanvasEditing(self.relay, self.editor, self.scene, self.view, self.canvas, self.groups_panel,
                                   self.window_actions, self)
        self.opener = ModelOpener(c, self.projects, self.settings, self.messages, self.window_actions.recent_menu, self)
        self.compiler_logs = CompilerLogOpener(self.relay, self.messages, self)
        self.progress = JobProgress(self.jobs, self.statusBar(), self.job_log.log, self)
        self.zoom_label = QLabel("")
        self.statusBar().addPermanentWidget(self.zoom_label)
        self._connect()
        # After _connect: its modelLoaded slot must run after the window's own.
        self.recovery = Recovery(self.relay, self.projects, c, self.messages,
                                 recovery_dir(self.settings, settings is None), self)
        self._restore()
        self._show_options()
        self.scene.reset("Open a model with File › Open (Ctrl+O),\nor drop an .onnx file here.")
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
        self._room_pending = False
        self._taken_widths: dict = {}  # side dock -> (its width before the window took room, the width set)
        r = self.relay
        self.model_info = ModelInfo(r)
        self.concat_list = ConcatList(r)
        self.groups_panel = GroupsPanel(r)
        self.inspector = Inspector(r)
        self.perf_summary = PerfSummary(r)
        self.job_log = JobLog()
        self.undo_view = HistoryView(r)
        self.sensitivity = SensitivityDock(r)
        self.docks = {
            "model": self._dock("Model", self.model_info, Qt.LeftDockWidgetArea, "dock_model"),
            "concats": self._dock("Concats", self.concat_list, Qt.LeftDockWidgetArea, "dock_concats"),
            "groups": self._dock("Groups", self.groups_panel, Qt.LeftDockWidgetArea, "dock_groups"),
            "inspector": self._dock("Inspector", self.inspector, Qt.RightDockWidgetArea, "dock_inspector"),
            "perf": self._dock("Performance", self.perf_summary, Qt.BottomDockWidgetArea, "dock_perf"),
            "log": self._dock("Job log", self.job_log, Qt.BottomDockWidgetArea, "dock_log"),
            "history": self._dock("History", self.undo_view, Qt.RightDockWidgetArea, "dock_history"),
            "sensitivity": self._dock("Sensitivity", self.sensitivity, Qt.BottomDockWidgetArea, "dock_sensitivity"),
        }
        self.docks["history"].hide()
        # Only one tabified group: with two, Qt (6.11/6.12) leaves a stale tab bar painted
        # after the window is resized.
        self.tabifyDockWidget(self.docks["perf"], self.docks["log"])
        self.tabifyDockWidget(self.docks["perf"], self.docks["sensitivity"])
        self.docks["perf"].raise_()
        self.resizeDocks([self.docks["model"], self.docks["concats"], self.docks["groups"]], [140, 370, 200],
                         Qt.Vertical)
        self.resizeDocks([self.docks["concats"], self.docks["inspector"]], [420, 400], Qt.Horizontal)
        self.resizeDocks([self.docks["perf"]], [280], Qt.Vertical)

    def resizeEvent(self, ev) -> None:
        super().resizeEvent(ev)
        if not self._room_pending:  # once the dock areas are laid out at the new size
            self._room_pending = True
            QTimer.singleShot(0, self._keep_canvas_room)

    def _keep_canvas_room(self) -> None:
        """Keep at least CANVAS_SHARE of the width for the canvas.  The side docks' widths are set
        (or restored) in pixels for a wide window; in a narrow one, a half screen, they left the
        canvas a strip (960 px: ~120 px, under the minimap).  A canvas wide enough is left as the
        user made it; for a narrow one the right side gives way first, then the left (each to its
        minimum).  Widened again, the sides get back what was taken from them (the left first), as
        far as the canvas keeps its share: the narrow widths had stuck, names in the Concat table
        elided to "…at"."""
        self._room_pending = False
        width = self.width()
        if width <= 0:
            return
        short = math.ceil(CANVAS_SHARE * width) - self.centralWidget().width()  # px the canvas lacks
        # One shown dock a side stands for its area's width
        left, right = (next((d for d in self.docks.values() if self.dockWidgetArea(d) == area and d.isVisible()
                             and not d.isFloating()), None) for area in (Qt.LeftDockWidgetArea, Qt.RightDockWidgetArea))
        shown = [d for d in (left, right) if d is not None]
        taken = self._taken_widths
        for d in list(taken):  # a side the user resized since (or hid) is theirs again
            if d not in shown or abs(d.width() - taken[d][1]) > DOCK_SLACK:
                del taken[d]
        if not shown or short == 0 or (short < 0 and not taken):
            return
        if short < 0:
            room = -short
            widths = []
            for d in shown:
                want, _ = taken.get(d, (d.width(), None))
                grow = min(room, max(0, want - d.width()))
                room -= grow
                widths.append(d.width() + grow)
        else:
            spare = sum(d.width() for d in shown) - short  # what the sides may keep
            if len(shown) == 2:
                # The right side (the inspector's wrapped text) gives way first: the Concat table on
                # the left needs its numbers and some of each name.
                r = min(right.width(), max(RIGHT_DOCK_MIN, spare * 2 // 5))
                widths = [max(1, spare - r), r]
            else:
                widths = [spare]
        for d, w in zip(shown, widths):
            want = taken[d][0] if d in taken else d.width()
            if w < want:
                taken[d] = (want, w)  # the width to give back, and the one set (to tell a user's resize)
            else:
                taken.pop(d, None)
        self.resizeDocks(shown, widths, Qt.Horizontal)

    def _slots(self) -> dict:
        v = self.view
        return {"open": lambda: self.opener.open_dialog(), "demo": lambda: self.opener.open_demo(),
                "calibrate": lambda: self.opener.calibrate_dialog(), "share": lambda: self.edits.share_selection(),
                "ungroup": lambda: self.edits.ungroup_selection(), "autoshare": self._auto_share,
                "export": self.exports.dialog, "compare": lambda: self.comparison.dialog(self),
                "clear_compare": lambda: self.comparison.clear(),
                "open_project": lambda: self.opener.open_project_dialog(),
                "open_compiler_log": lambda: self.compiler_logs.open_dialog(),
                "save_project": self.projects.save, "save_project_as": self.projects.save_as,
                "find": self.search_bar.open, "fit": v.fit, "zoom_in": lambda: v.set_zoom(v.zoom * 1.25),
                "zoom_out": lambda: v.set_zoom(v.zoom / 1.25), "resimulate": self.controller.refresh,
                "expand": lambda: self.expand_selection(), "collapse": lambda: self.collapse_selection(),
                "expand_all": lambda: self.canvas.expand_all(), "collapse_all": self.collapse_all,
                "hide_shapes": lambda: self.canvas.set_hide_shapes(self.actions_by_name["hide_shapes"].isChecked()),
                "quit": self.close}

    def _connect(self) -> None:
        c, r, o = self.controller, self.relay, self.window_actions.options
        c.loadStarted.connect(lambda p: self.messages.status(f"Loading {Path(p).name}…"))
        c.modelLoaded.connect(self._on_model_loaded)
        c.loadFailed.connect(lambda m: self.messages.status("Could not open the model", 8000))
        c.layoutReady.connect(self.canvas.show_layout)
        c.structureShown.connect(self.canvas.show_structure)
        c.loadFailed.connect(lambda m: self.canvas.load_failed())
        c.calibrationStarted.connect(lambda: self.messages.status("Calibrating…"))
        c.calibrationFinished.connect(self._on_calibrated)
        self.jobs.jobFailed.connect(lambda job, msg, det: self.show_error(f"{job.label.capitalize()} failed", msg,
                                                                          det))
        self.canvas.built.connect(self._scene_built)
        self.canvas.buildProgress.connect(
            lambda done, total: self.messages.status(f"Drawing the graph: {done:,} of {total:,} items…", 4000))
        r.optionsChanged.connect(self._show_options)
        r.stackChanged.connect(self.update_title)
        r.stackChanged.connect(self._stack_message)
        self.projects.pathChanged.connect(self.update_title)
        self.editor.message.connect(self.messages.say)
        self.editor.autoShared.connect(self._show_autoshare_report)
        o.overlayChosen.connect(self.set_overlay)
        o.marchChosen.connect(self.set_march)
        o.policyChosen.connect(self.editor.set_policy)
        o.thresholdChosen.connect(self.editor.set_threshold)
        self.concat_list.floatOutputThresholdChosen.connect(self.editor.set_float_output_threshold)
        self.search_bar.jump.connect(self.jump_to)
        self.view.activated.connect(self.canvas.toggle)
        self.inspector.tensors.itemDoubleClicked.connect(lambda it: self._inspector_link(it.row()))
        self.scene.selectionChanged.connect(self._on_selection)
        for w in (self.concat_list, self.perf_summary, self.groups_panel, self.sensitivity):
            w.nodeActivated.connect(self.jump_to)
        self.sensitivity.localToggled.connect(self.canvas.set_error_local)
        self.perf_summary.marchChanged.connect(self.set_march)
        self.perf_summary.boardClockChanged.connect(self.set_board_clock)
        self.inspector.histogramWanted.connect(lambda t: c.histogram(t, self._histogram_ready))
        # "Zoom", not a bare "100%": beside the job's progress bar it read as the job's progress
        self.view.zoomChanged.connect(lambda z: self.zoom_label.setText(f"Zoom {z * 100:.0f}%"))

    # -- what the parts share ------------------------------------------------------------------
    @property
    def session(self):
        return self.relay.session

    @property
    def stack(self):
        return self.relay.stack

    @property
    def actions_by_name(self) -> dict:
        return self.window_actions.by_name

    @property
    def show_dialogs(self) -> bool:
        return self.messages.show_dialogs

    @show_dialogs.setter
    def show_dialogs(self, on: bool) -> None:
        self.messages.show_dialogs = on

    @property
    def errors(self) -> list:
        return self.messages.errors

    # -- opening --------------------------------------------------------------------------------
    def open_model(self, path, input_shapes=None, calib=None, cut=(), stats=None):
        """Open ``path`` with explicit shapes/calibration (no dialog).  Returns the load job."""
        return self.opener.open_model(path, input_shapes, calib, cut, stats=stats)

    def request_open(self, path, ask: bool | None = None) -> bool:
        return self.opener.request_open(path, ask)

    def open_project(self, path, ask: bool = True):
        return self.opener.open_project(path, ask)

    def _accepts(self, path: str) -> bool:
        """A model or project, or, with a model open, its compile log (.txt / .log)."""
        p = path.lower()
        return p.endswith((".onnx", ".qtquant")) or (p.endswith(LOG_SUFFIXES) and self.relay.session is not None)

    def dragEnterEvent(self, ev):
        if any(self._accepts(u.toLocalFile()) for u in ev.mimeData().urls()):
            ev.acceptProposedAction()

    def dropEvent(self, ev):
        for u in ev.mimeData().urls():
            p = u.toLocalFile()
            if not self._accepts(p):
                continue
            ev.acceptProposedAction()
            if p.lower().endswith(LOG_SUFFIXES):
                QTimer.singleShot(0, lambda p=p: self.compiler_logs.open_path(p))
            else:
                QTimer.singleShot(0, lambda p=p: self.open_project(p) if p.lower().endswith(".qtquant")
                                  else self.request_open(p, ask=True))
            return

    # -- results ------------------------------------------------------------------------------------
    def _on_model_loaded(self, session) -> None:
        g = session.graph
        self.canvas.model_opened(g)
        self.search_bar.set_graph(g)
        self.projects.model_opened()
        if self.projects.path is not None:
            self.opener.add_recent(self.projects.path)
        self.update_title()
        self._show_options()
        self.edits.update_actions()
        if g.path:
            self.opener.add_recent(g.path)
        self.messages.log(f"opened {g.path or 'model'}: {len(g.nodes)} nodes, {len(g.concat_nodes())} Concats"
                          + (f", cut at {', '.join(g.cut)}" if g.cut else ""))
        self.messages.status(f"Opened {g.path.name if g.path else 'model'}", 5000)  # replaces "Loading …"

    def _stack_message(self, *_) -> None:
        """Undo and redo say what they did, replacing the message of the edit they undo; a new
        edit is named as itself (an edit with more to say, a share, says it right after)."""
        st = self.relay.stack
        step = st.last_step
        if step is StackStep.UNDO:
            self.messages.status(f"Undid {st.redo_text}", 8000)
        elif step is StackStep.REDO:
            self.messages.status(f"Redid {st.undo_text}", 8000)
        elif step is StackStep.DO:
            self.messages.status(st.undo_text, 8000)

    def _scene_built(self, spec) -> None:
        lay = spec.layout
        self.messages.log(f"layout: {len(spec.nodes)} items, {len(spec.edges)} edges, {lay.crossings} crossings, "
                          f"{lay.seconds * 1000:.0f} ms")
        m = self.canvas.model
        if m is not None:  # a project may have saved the toggle off
            hide = self.actions_by_name["hide_shapes"]
            blocked = hide.blockSignals(True)
            hide.setChecked(m.state.hide_shapes)
            hide.blockSignals(blocked)

    def _on_calibrated(self, ok: bool) -> None:
        if ok:
            cs = self.relay.concats() or []
            skipped = [n for n in getattr(self.session.calibration, "notes", ()) if n.startswith("skipped ")]
            for n in skipped:  # an unreadable photo left out: said where the run is logged
                self.messages.log(f"calibration: {n}")
            search = getattr(self.relay.session.calibration, "search", None)
            self.messages.status(f"Calibrated: {sum(1 for c in cs if c.rescales)} of {len(cs)} Concats "
                                 f"need rescales" + (f"; {len(skipped)} unreadable image(s) skipped (see the job "
                                                     "log)" if skipped else "")
                                 + (f"; {search.summary()}" if search is not None else ""), 8000)
        else:
            self.messages.status("Calibration stopped", 8000)
            self.canvas.apply_looks()  # on success the "calibrated" event has applied them already
        self.edits.update_actions()

    def _auto_share(self):
        self.option_widgets.commit()
        return self.edits.auto_share()

    def _histogram_ready(self, tensor: str) -> None:
        if self.inspector.tensor == tensor:  # still the one shown
            self.inspector.show_tensor(tensor)

    def _show_autoshare_report(self, report) -> None:
        self.last_autoshare = report
        self.messages.log(report.text())
        self.messages.report("Auto-share", report.text())

    def _show_options(self, *_) -> None:
        # With no model open: what the next one opens with (the toolbar showed its first march,
        # bernoulli2, where the model would open on bayes-e).
        options = self.controller.options
        self.window_actions.options.show_options(options)
        self.concat_list.show_options(options)
        self.perf_summary.set_march(options.march)
        self.perf_summary.set_board_clock(options.board_bpu_ghz, _march_board_ghz(options.march))

    def update_title(self, *_) -> None:
        s = self.relay.session
        if s is None:
            self.setWindowTitle("qtquant")
            return
        name = self.projects.path.name if self.projects.path else (s.graph.path.name if s.graph.path else "model")
        cut = getattr(s.graph, "cut", ())  # --cut / the open dialog's "Cut at": say it is not the whole file
        name += f" (cut at {len(cut)} tensor{'s' if len(cut) != 1 else ''})" if cut else ""
        self.setWindowTitle(f"{name}[*] — qtquant")
        self.setWindowModified(self.projects.modified)

    def set_overlay(self, mode) -> None:
        self.canvas.set_overlay(mode)
        self.window_actions.show_overlay(mode)

    def set_march(self, march: str) -> None:
        """Toolbar / Performance dock: an undoable edit once a model is open."""
        self.window_actions.options.show_march(march)
        self.perf_summary.set_march(march)
        if self.relay.session is None:
            self.controller.set_march(march)
        else:
            self.editor.set_march(march)

    def set_board_clock(self, ghz: float) -> None:
        """Performance dock: the board's BPU clock, an undoable edit once a model is open."""
        if self.relay.session is None:
            self.controller.set_board_clock(ghz)
        else:
            self.editor.set_option("board_bpu_ghz", ghz)

    # -- selection and navigation --------------------------------------------------------------
    def _on_selection(self) -> None:
        if self.scene.switching:  # items swapped for the overview: the selection is kept
            return
        names = self.scene.selected_names()
        name = names[0] if len(names) == 1 else None
        self.inspector.show_node(name, others=len(names) if len(names) > 1 else 0)
        # A row left highlighted after the canvas selection is cleared claimed a selection that is gone.
        self.concat_list.select_name(name or "")

    def jump_to(self, name: str) -> bool:
        """Centre ``name`` (a node, terminal or block), opening the blocks around it first."""
        ok = self.view.center_on(self.canvas.reveal(name) or name)
        if not ok:
            self.messages.status(f"{name} is not on the canvas yet", 4000)
        return ok

    def collapse_all(self) -> bool:
        """View › Collapse all; on a model without a module hierarchy (flat names such as PP-OCR's
        ``p2o.*``) it says so instead of doing nothing."""
        m = self.canvas.model
        if m is not None and m.h.flat:
            self.messages.status("Collapse all: this model has no module hierarchy (its node names carry no "
                                 "module paths such as /model.3/...): nothing to collapse", 8000)
            return False
        return self.canvas.collapse_all()

    def expand_selection(self) -> bool:
        return any([self.canvas.expand(n) for n in self.scene.selected_names()])

    def collapse_selection(self) -> bool:
        names = self.scene.selected_names()
        return bool(names) and self.canvas.collapse(names[0])

    def _inspector_link(self, row: int) -> None:
        """Double-click on a tensor in the inspector: go to the node at its other end."""
        s, node, rows = self.relay.session, self.inspector.node, getattr(self.inspector, "_tensor_rows", [])
        if s is None or node is None or not 0 <= row < len(rows) or rows[row] not in s.graph.tensors:
            return
        tt = s.graph.tensors[rows[row]]
        there = tt.producer if tt.producer and tt.producer != node else next(
            (c for c in tt.consumers if c != node), None)
        if there is not None:
            self.jump_to(there)

    def search(self, text: str) -> str | None:
        self.search_bar.open()
        self.search_bar.edit.setText(text)
        return self.search_bar.next_hit()

    def show_error(self, title: str, message: str, details: str = ""):
        return self.messages.error(title, message, details)

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
        self.controller.shutdown()  # first: a statistics job still writing would re-make the slot
        self.recovery.release()  # this instance's slot and lock go; other instances' stay
        self.messages.close_dialogs()
        super().closeEvent(ev)


def _march_board_ghz(march: str) -> float:
    """The board clock of ``march`` (a name or a profile file), 0 when it cannot be read: the error is
    reported where the march is priced, not here."""
    from ...base.errors import QtQuantError
    from ...perf import load_march

    try:
        return load_march(march).board_ghz
    except (QtQuantError, OSError, ValueError):
        return 0.0
