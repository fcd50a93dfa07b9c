"""The orchestration of background work: load -> (layout || calibrate) -> (perf || fidelity).

:class:`Controller` only schedules jobs and applies their results: the work itself is the
application layer's and the core's, run in a worker thread on a frozen
:class:`~qtquant.app.Snapshot`.  Results are installed in the session
(:meth:`~qtquant.app.Session.set_perf` and friends) on the GUI thread, and only if they are
still current (model generation and session revision).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import QObject, QTimer, Signal

from ...model import shape_child
from ...app import Options, Session
from ...app.scene.protograph import early_structure
from ...app.scene.hierarchy import ViewState
from ...app.scene.view import SceneModel
from ...app.session import derive
from ...app.views.perfdata import fidelity_measure, node_detail, simulator, top_layers
from ...calib import CalibConfig, calibrate
from ...app.fidelity_worker import FidelityWorker
from ...model.shapes import parse_input_shapes
from ...base.vocab import JobStatus
from .. import collector
from ..jobs import Job, JobManager
from ..relay import SessionRelay

__all__ = ["Controller", "PERF_DEBOUNCE_MS", "FIDELITY_DEBOUNCE_MS"]

# After an edit: the incremental simulator costs a few ms, so it waits only long enough
# to fold a burst of undo/redo into one run; fidelity runs onnxruntime and waits longer.
PERF_DEBOUNCE_MS = 15
# The check runs in a child process and answers a state it measured before from its cache: after
# an edit it starts at once (Controller._edit_made); this delay is for the in-process check and
# the first check after a calibration.  A newer edit cancels it between samples.
FIDELITY_DEBOUNCE_MS = PERF_DEBOUNCE_MS
SETTLE_POLL_MS = 20  # after a calibration: how often to ask whether the views are done
_MODEL_JOBS = ("layout", "calibrate", "perf", "fidelity", "histogram")


class Controller(QObject):
    """Loads models and runs layout, calibration, simulation and fidelity in the background."""

    # From this size on, calibration runs the model in a child process (see calibrate's
    # ``isolate``), and so do shape inference and the layout when a model opens; below it,
    # starting a child costs more than the freeze it avoids.
    child_process_nodes = shape_child.APP_MIN_NODES
    # From this size on, the structure is drawn from the file while the model still loads.
    structure_first_nodes = 2000

    loadStarted = Signal(str)
    modelLoaded = Signal(object)  # Session
    loadFailed = Signal(str)
    layoutReady = Signal(object)  # SceneSpec with .layout
    # The first view of a big model, from its file, while it still loads (emitted by the load job;
    # queued to the GUI thread): the window shows the structure first, the numbers come later.
    structureReady = Signal(object, int)  # SceneSpec, generation
    structureShown = Signal(object)  # that SceneSpec, if still current, on the GUI thread
    calibrationStarted = Signal()
    calibrationFinished = Signal(bool)  # False when cancelled or failed
    perfFinished = Signal()
    fidelityFinished = Signal()

    def __init__(self, options: Options | None = None, parent=None, *, auto_calibrate: bool = True,
                 isolate_fidelity: bool = True):
        super().__init__(parent)
        # Before any model is open: what the first one opens with.  Afterwards the session's
        # options are the only ones, and the next model starts from them.
        self._initial = options or Options()
        self.auto_calibrate = auto_calibrate
        self.relay = SessionRelay(parent=self)
        self.jobs = JobManager(self)
        collector.install_collector()  # garbage cycles (some hold Qt objects) collected on this thread only
        if shape_child.MIN_NODES is None:  # onnx holds the GIL while it infers shapes
            shape_child.MIN_NODES = self.child_process_nodes
        # Started now, booting beside the window (at the children's lower priority): a big model
        # opened later, or given on the command line, does not wait a second for it.
        shape_child.warm()
        # The fidelity check runs in a child process: in a thread here, onnxruntime session
        # set-up and teardown and the QDQ build hold the GIL and freeze the window on big models.
        self.fidelity_worker = FidelityWorker.shared() if isolate_fidelity else None
        # Imported now, before a window shows: the first import (onnxruntime among them) takes
        # ~0.1 s with the GIL held, wherever it happens later.
        simulator()
        fidelity_measure()
        self.generation = 0  # bumps per opened model; every job result checks it
        self.early = None  # the structure shown before the model loaded (SceneSpec), this generation
        self.structureReady.connect(self._structure_ready)
        self.path: Path | None = None
        self.spec = None
        self.calibrating = False
        self._calibrate_after_layout = False
        self.jobs.jobFinished.connect(self._on_job_finished)
        # Connected before any view: an edit starts the check in the child process at once, so it
        # measures while this thread recolours the canvas and docks (two cores at work, not one
        # after the other); the simulation still waits for the views (it shares this process's GIL).
        self.relay.groupsChanged.connect(self._edit_made)
        self.relay.optionsChanged.connect(self._edit_made)
        self._fid_started = None  # the _key() the latest check was started for
        self.relay.settled.connect(self._on_session_changed)
        self._perf_timer = QTimer(self, singleShot=True, interval=PERF_DEBOUNCE_MS)
        self._perf_timer.timeout.connect(self.refresh_perf)
        self._fid_timer = QTimer(self, singleShot=True, interval=FIDELITY_DEBOUNCE_MS)
        self._fid_timer.timeout.connect(self.refresh_fidelity)
        # After a calibration the views have a few event-loop turns of work left (looks in
        # slices, the first repaint); a simulation started meanwhile takes the GIL from each
        # call Qt makes into Python, and those turns stretched to 0.1-0.25 s on big graphs.
        self.views_busy: Callable[[], bool] = lambda: False  # the window says when it is done
        self._settle_timer = QTimer(self, singleShot=True, interval=SETTLE_POLL_MS)
        self._idle_polls = 0
        self._settle_timer.timeout.connect(self._refresh_when_settled)

    @property
    def session(self) -> Session | None:
        return self.relay.session

    @property
    def options(self) -> Options:
        """The session's options, or (no model open) those the next model opens with."""
        s = self.relay.session
        return s.options if s is not None else self._initial

    # -- model --------------------------------------------------------------------------------
    def _new_generation(self) -> int:
        self.generation += 1
        self.early = None
        for kind in _MODEL_JOBS:
            self.jobs.cancel(kind)
        self._stop_timers()
        collector.model_closing()
        return self.generation

    def open_model(self, path, input_shapes=None, calib: CalibConfig | None = None, cut=(), stats=None) -> Job:
        """Load in the background; the current model stays until the new one is ready.
        ``cut``: tensor names the graph is cut at (the open dialog's "Cut at").  ``stats``: a
        statistics file (``qtquant calibrate --stats-out``) used instead of calibrating; one for
        another model or other input shapes fails the load with its one-line message."""
        from ...app.opening import OpenRequest, open_session

        gen = self._new_generation()
        # The next model keeps the user's options (march, policy...), not their calibration.
        opts = replace(self.options, calib=calib if calib is not None else self._initial.calib)
        shapes = parse_input_shapes(input_shapes.items() if isinstance(input_shapes, dict) else input_shapes)
        p = Path(path)
        explicit = frozenset()
        if stats:
            from ...calib.statsfile import RANGE_FIELDS, explicit_data_fields

            # An observer chosen in the dialog replaces the file's (its data settings are the file's)
            explicit = frozenset(explicit_data_fields(opts.calib) & set(RANGE_FIELDS))
        request = OpenRequest(p, shapes, opts, cut=cut, stats=stats, stats_explicit=explicit)
        self.loadStarted.emit(str(p))

        def work(progress, cancelled):
            if not cut:
                early = early_structure(p, self.structure_first_nodes)
                if early is not None:
                    self.structureReady.emit(early, gen)
            s = open_session(request)
            # Serialized here, while nothing is drawn yet: later the calibration and fidelity
            # children need the bytes, and encoding holds the GIL, freezing a big graph's window.
            s.graph.prepare_model_bytes()
            return s

        return self.jobs.submit("load", f"load {p.name}", work, lambda s: self._loaded(s, p, gen),
                                on_error=lambda e: self.loadFailed.emit(str(e)),
                                stale_key=lambda: self.generation)

    def _structure_ready(self, spec, gen: int) -> None:
        if gen == self.generation and self.early is None:
            self.early = spec
            self.structureShown.emit(spec)

    def _loaded(self, session: Session, path: Path, gen: int) -> None:
        collector.long_lived()
        self.path = path
        self.spec = None
        self.calibrating = False
        self.relay.set_session(session)
        self.modelLoaded.emit(session)
        # Layout first, calibration once it is on screen: both hold the GIL for stretches
        # (igraph, onnxruntime session set-up), and the first paint is what the user waits for.
        self._calibrate_after_layout = not session.ready and self.auto_calibrate
        self.start_layout()
        if session.ready:
            self.refresh()

    def open_project(self, path, on_opened=None, model=None) -> Job:
        """Open a ``.qtquant`` project in the background: model, options, groups, cached statistics.

        ``on_opened(session, report)`` runs on the GUI thread before the session is shown
        (the window asks there whether to keep groups re-mapped onto a changed model).
        """
        from ...app.projects import open_project

        gen = self._new_generation()
        p = Path(path)
        self.loadStarted.emit(str(p))

        def work(progress, cancelled):
            return open_project(p, remap=True, model=model)  # model: a moved model the user located

        def done(res):
            session, report = res
            if on_opened is not None and on_opened(session, report) is False:
                return
            self._loaded(session, session.graph.path or p, gen)
            if report.remap is not None:  # the groups re-mapped onto a changed model: an edit, undoable
                self.relay.stack.record(report.remap)

        return self.jobs.submit("load", f"open project {p.name}", work, done,
                                on_error=lambda e: self.loadFailed.emit(str(e)),
                                stale_key=lambda: self.generation)

    def start_layout(self) -> Job | None:
        s = self.session
        if s is None:
            return None
        graph, state, early = s.graph, s.view_state, self.early
        # The structure drawn from the file as it is now (the user may be opening blocks on it:
        # read here, on the GUI thread that changes it); what is done on it later is done again
        # on the loaded view when it arrives (_layout_done).
        drawn = early.model.frozen() if early is not None else None
        if drawn is not None and drawn.log and state is None:  # opened on it: what is open now
            state = ViewState(set(drawn.expanded))

        def work(progress, cancelled):
            # The module hierarchy first: a big graph opens collapsed, so only its top levels
            # are laid out (and drawn) now; blocks are laid out as they are expanded.
            model = SceneModel(graph, state)
            if drawn is not None and model.adopt(drawn):  # drawn from the file already
                spec = model.spec()
                spec.early = early
            else:
                spec = model.layout_all(isolate=len(model.units) >= self.child_process_nodes)
            spec.model = model
            spec.early_at = drawn.log_at if drawn is not None else 0
            return spec

        return self.jobs.submit("layout", "layout", work, self._layout_done, stale_key=lambda: self.generation)

    def _layout_done(self, spec) -> None:
        early = self.early
        if early is not None and early.model.log[spec.early_at:]:  # opened on the drawn structure since
            model, kept = spec.model, getattr(spec, "early", None)
            model.redo(early.model.log[spec.early_at:])
            spec = model.spec()
            spec.model, spec.early = model, kept
        self.spec = spec
        self.layoutReady.emit(spec)
        self._after_layout()

    def _after_layout(self) -> None:
        if self._calibrate_after_layout:
            self._calibrate_after_layout = False
            self.calibrate()

    # -- calibration ------------------------------------------------------------------------------
    def calibrate(self, config: CalibConfig | None = None) -> Job | None:
        """Calibrate with ``config`` (the session's own when None).  A new configuration is part
        of the statistics it produces, not an edit: it is not on the undo stack."""
        s = self.session
        if s is None:
            return None
        cfg = config if config is not None else s.options.calib
        graph, options, groups, qdq = s.graph, replace(s.options, calib=cfg), s.groups.as_lists(), s.qdq
        compiler = s.compiler_ranges
        snapshot = s.groups.snapshot()
        isolate = len(graph.nodes) >= self.child_process_nodes

        def work(progress, cancelled):
            from ...app.calibsearch import needs_search, searched

            res = calibrate(graph, cfg, progress=progress, cancel=cancelled, isolate=isolate)
            if needs_search(res):  # --observer search: the methods measured on the export, here too
                res = searched(graph, res, options, snapshot, qdq, cancel=cancelled)
            # The analyses too, here: on the GUI thread they would freeze a 20,000-node window ~1 s.
            return res, derive(graph, res, options, groups, qdq, compiler)

        self.calibrating = True
        self.calibrationStarted.emit()
        return self.jobs.submit("calibrate", f"calibrate ({cfg.source}, up to {cfg.count} samples)", work,
                                self._calibrated, stale_key=lambda: self.generation, cancellable=True)

    def _calibrated(self, result) -> None:
        res, derived = result
        collector.long_lived()
        self.calibrating = False
        s = self.session
        with s.batch():  # one "calibrated" for the views, after the options it was made with
            s.set_options(calib=derived.options.calib)
            s.set_calibration(res, derived)
        self.calibrationFinished.emit(True)

    def _on_job_finished(self, job: Job) -> None:
        if job.kind == "layout" and job.status == JobStatus.FAILED:
            self._after_layout()  # no drawing, but the analysis can still run
        if job.kind == "calibrate" and job.status != JobStatus.DONE and not self.jobs.active("calibrate"):
            self.calibrating = False
            self.calibrationFinished.emit(False)

    # -- derived results ----------------------------------------------------------------------------
    def _on_session_changed(self, kind: str) -> None:
        if not self.relay.ready:
            return
        if kind == "calibrated":
            self._stop_timers()
            self._idle_polls = 0
            self._settle_timer.start()
        elif kind in ("groups", "options", "compiler_log"):  # debounced, so a burst of undo/redo runs once
            self.schedule_refresh()

    def schedule_refresh(self) -> None:
        self._perf_timer.start()
        if self._fid_started != self._key():  # not started at the edit already
            self._fid_timer.start()

    def _edit_made(self, changed=None) -> None:
        """An edit (groups or options): start its check now when it runs in the child process and
        a first check has landed (a burst of edits supersedes, each check cancelled between samples)."""
        s = self.session
        if (s is None or not self.relay.ready or self.calibrating or self.fidelity_worker is None
                or s.fidelity is None or (changed and "calib" in changed)):
            return
        self.refresh_fidelity()

    def _refresh_when_settled(self) -> None:
        # Idle at two polls in a row: the repaint of the last looks has run in between (it
        # calls into Python per visible item; a job started before it made each call wait).
        idle = not self.views_busy()
        if idle and self._idle_polls >= 1:
            self.refresh()
            return
        self._idle_polls = self._idle_polls + 1 if idle else 0
        self._settle_timer.start()

    def _stop_timers(self) -> None:
        self._settle_timer.stop()
        self._perf_timer.stop()
        self._fid_timer.stop()

    @property
    def busy(self) -> bool:
        """Jobs running or a debounced refresh still to start."""
        return (self.jobs.busy or self._perf_timer.isActive() or self._fid_timer.isActive()
                or self._settle_timer.isActive())

    @property
    def busy_but_fidelity(self) -> bool:
        """:attr:`busy`, not counting the fidelity check (what a window waits for before it is usable)."""
        return (any(j.kind != "fidelity" for j in self.jobs.active()) or self._perf_timer.isActive()
                or self._settle_timer.isActive())

    def refresh(self) -> None:
        """Re-simulate and re-measure for the current revision now (results of older ones drop)."""
        self._stop_timers()
        self.refresh_perf()
        self.refresh_fidelity()

    def refresh_perf(self) -> Job | None:
        self._perf_timer.stop()
        s = self.session
        sim = simulator()
        if s is None or not s.ready:
            return None
        snap = s.snapshot()

        def work(progress, cancelled):
            perf = sim(snap)
            top_layers(perf)  # the perf dock's chart, computed here rather than on the GUI thread
            node_detail(perf)  # the latency badges' bound/fused tags, likewise
            return perf, sim(snap, baseline=True)

        return self.jobs.submit("perf", f"simulate ({snap.options.march})", work,
                                lambda r: self._perf_done(s, r, snap.revision), stale_key=self._key)

    def refresh_fidelity(self) -> Job | None:
        self._fid_timer.stop()
        s = self.session
        meas = fidelity_measure(self.fidelity_worker)
        if s is None or not s.ready or s.calibration is None:
            return None
        t0 = time.perf_counter()
        snap = s.snapshot()  # taken here: the worker thread must not read a session being edited
        self._fid_started = self._key()
        t1 = time.perf_counter()

        def work(progress, cancelled):  # a newer edit cancels it (supersede) between samples
            t2 = time.perf_counter()
            fid = meas(snap, cancel=cancelled)
            # Where an edit's check spent its time before and after the check itself (Fidelity.trace)
            fid.trace.update(snapshot=(t1 - t0) * 1e3, queued=(t2 - t1) * 1e3, submitted_at=t1,
                             returned=time.perf_counter())
            return fid

        return self.jobs.submit("fidelity", "fidelity", work, lambda r: self._fidelity_done(s, r, snap.revision),
                                stale_key=self._key)

    def _key(self):
        s = self.session
        return self.generation, s.revision if s is not None else -1

    def _perf_done(self, session: Session, res, rev) -> None:
        perf, base = res
        session.set_perf(perf, rev, base)
        self.perfFinished.emit()

    def _fidelity_done(self, session: Session, fid, rev) -> None:
        returned = fid.trace.pop("returned", None)
        if returned is not None:  # from the worker thread's return to the GUI thread
            fid.trace["delivered"] = (time.perf_counter() - returned) * 1e3
        session.set_fidelity(fid, rev)
        self.fidelityFinished.emit()

    def histogram(self, tensor: str, on_ready) -> Job | None:
        """Histogram of ``tensor`` over the held-out samples, for stats that carry none."""
        from ...app.histograms import compute_histogram, histogram_feeds

        s = self.session
        if s is None or s.calibration is None:
            return None
        feeds, graph = histogram_feeds(s), s.graph

        def done(res):
            if res is not None:
                s.histograms[tensor] = res
            on_ready(tensor)

        return self.jobs.submit("histogram", f"histogram {tensor}",
                                lambda progress, cancelled: compute_histogram(graph, feeds, tensor), done,
                                stale_key=self._key)

    def set_march(self, march: str) -> None:
        """With no model open: the march the next one opens with (an open model's march is an
        undoable edit, see :class:`~qtquant.gui.window.editing.Editor`)."""
        if self.session is None:
            self._initial = replace(self._initial, march=march)

    def set_board_clock(self, ghz: float) -> None:
        """With no model open: the board clock the next one opens with."""
        if self.session is None:
            self._initial = replace(self._initial, board_bpu_ghz=ghz)

    def shutdown(self) -> None:
        self._stop_timers()
        self.jobs.shutdown()
