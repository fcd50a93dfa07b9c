"""The Qt bridge over a core Session, and the orchestration of background work.

:class:`SessionBridge` is a thin QObject around a Qt-free
:class:`~qtquant.session.Session`: it turns the session's events into Qt signals and
caches what the widgets read (Concat analysis per revision, the latest perf and fidelity
results).  :class:`Controller` owns the jobs: load -> (layout || calibrate) -> (perf ||
fidelity).  Worker threads only compute; results are applied here, on the GUI thread,
and only if they are still current (model generation and session revision).
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import QObject, Qt, QTimer, Signal, Slot

from ..calib import CalibConfig, calibrate
from .. import shape_child
from ..fidelity_worker import FidelityWorker, Snapshot
from ..session import Options, Session, derive
from ..shapes import parse_input_shapes
from .collector import install_collector
from .jobs import Job, JobManager
from ..app.views.perfdata import fidelity_measure, simulator, top_layers
from ..app.scene import layout_scene, scene_spec

__all__ = ["SessionBridge", "Controller", "PERF_DEBOUNCE_MS", "FIDELITY_DEBOUNCE_MS"]

# After an edit: the incremental simulator costs a few ms, so it waits only long enough
# to fold a burst of undo/redo into one run; fidelity runs onnxruntime and waits longer.
PERF_DEBOUNCE_MS = 15
FIDELITY_DEBOUNCE_MS = 60
SETTLE_POLL_MS = 20  # after a calibration: how often to ask whether the views are done


def _freeze_heap() -> None:
    """Exclude what exists now (the graph, the statistics) from garbage collection.

    A full collection walks every object, holding the GIL: with a 20,000-node graph loaded that
    was some 160 ms (68 ms with the graph frozen), several times per edit.  Frozen objects are
    still freed by reference counting; opening another model unfreezes them.
    """
    gc.freeze()


class _Frozen:
    """What ``simulate_session`` reads, fixed on the GUI thread at submission.

    The worker then never touches the live session, which the next edit may change.
    """

    def __init__(self, session, concats, baseline):
        self.graph = session.graph
        self.options = session.options
        self._concats = {False: concats, True: baseline}

    def concats(self, baseline: bool = False):
        return self._concats[bool(baseline)]


class SessionBridge(QObject):
    """Qt face of one Session.  ``changed(kind)`` follows ``session.events``."""

    sessionReplaced = Signal(object)  # the new Session (or None)
    changed = Signal(str)  # "calibrated" | "options" | "groups" | ...
    # After every ``changed`` listener has run: background jobs start here, so they do not
    # take the GIL from the views refreshing on the GUI thread (0.1 s more on a big graph).
    settled = Signal(str)
    perfChanged = Signal()
    fidelityChanged = Signal()
    _event = Signal(str)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.session: Session | None = None
        self.perf = None
        self.perf_baseline = None  # the same simulation without any user group (the unedited model)
        self.fidelity = None
        self.perf_revision = -1  # session revision the perf result belongs to
        self.fidelity_revision = -1
        self._concats = None
        self._concats_rev = -1
        self._base_concats = None
        self._base_dm = None
        self.hist_cache: dict[str, tuple] = {}  # tensor -> (counts, edges) computed by the GUI
        # Session events may in principle fire from a worker: re-emit through a queued hop.
        self._event.connect(self._on_event, Qt.AutoConnection)

    def set_session(self, session: Session | None) -> None:
        if self.session is not None:
            self.session.events.disconnect(self._relay)
        self.session = session
        self.perf = self.perf_baseline = self.fidelity = None
        self.perf_revision = self.fidelity_revision = -1
        self._concats, self._concats_rev = None, -1
        self._base_concats = self._base_dm = None
        self.hist_cache = {}
        if session is not None:
            session.events.connect(self._relay)
        self.sessionReplaced.emit(session)

    def _relay(self, info):  # psygnal EmissionInfo, until the widgets connect to the signals they show
        self._event.emit(info.signal.name)

    @Slot(str)
    def _on_event(self, kind: str) -> None:
        if kind == "calibrated":
            self.hist_cache = {}
        self.notify(kind)

    def notify(self, kind: str) -> None:
        """``changed(kind)`` to every view, then ``settled(kind)``."""
        self.changed.emit(kind)
        self.settled.emit(kind)

    @property
    def revision(self) -> int:
        return self.session.revision if self.session is not None else -1

    @property
    def graph(self):
        return self.session.graph if self.session is not None else None

    @property
    def ready(self) -> bool:
        return self.session is not None and self.session.ready

    @property
    def concats(self):
        """Concat analysis for the current revision, or None before calibration."""
        s = self.session
        if s is None or not s.ready:
            return None
        if self._concats_rev != s.revision:
            self._concats = s.concats()
            self._concats_rev = s.revision
        return self._concats

    @property
    def baseline_concats(self):
        """Concat analysis without user groups (cached until calibration or options change)."""
        s = self.session
        if s is None or not s.ready:
            return None
        dm = s.baseline_domains
        if self._base_dm is not dm:
            self._base_concats, self._base_dm = s.concats(baseline=True), dm
        return self._base_concats

    def concat(self, name: str):
        for c in self.concats or ():
            if c.node == name:
                return c
        return None

    def set_perf(self, perf, revision: int, baseline=None) -> None:
        self.perf, self.perf_revision = perf, revision
        if baseline is not None:
            self.perf_baseline = baseline
        self.perfChanged.emit()

    def set_fidelity(self, fid, revision: int) -> None:
        self.fidelity, self.fidelity_revision = fid, revision
        self.fidelityChanged.emit()


class Controller(QObject):
    """Loads models and runs layout, calibration, simulation and fidelity in the background."""

    # From this size on, calibration runs the model in a child process (see calibrate's
    # ``isolate``), and so do shape inference and the layout when a model opens; below it,
    # starting a child costs more than the freeze it avoids.
    child_process_nodes = 2000

    loadStarted = Signal(str)
    modelLoaded = Signal(object)  # Session
    loadFailed = Signal(str)
    layoutReady = Signal(object)  # SceneSpec with .layout
    calibrationStarted = Signal()
    calibrationFinished = Signal(bool)  # False when cancelled or failed
    perfFinished = Signal()
    fidelityFinished = Signal()

    def __init__(self, options: Options | None = None, parent=None, *, auto_calibrate: bool = True,
                 isolate_fidelity: bool = True):
        super().__init__(parent)
        self.options = options or Options()
        self.auto_calibrate = auto_calibrate
        self.bridge = SessionBridge(self)
        self.jobs = JobManager(self)
        install_collector()  # garbage cycles (some hold Qt objects) collected on this thread only
        if shape_child.MIN_NODES is None:  # onnx holds the GIL while it infers shapes
            shape_child.MIN_NODES = self.child_process_nodes
        # The fidelity check runs in a child process: in a thread here, onnxruntime session
        # set-up and teardown and the QDQ build hold the GIL and freeze the window on big models.
        self.fidelity_worker = FidelityWorker.shared() if isolate_fidelity else None
        # Imported now, before a window shows: the first import (onnxruntime among them) takes
        # ~0.1 s with the GIL held, wherever it happens later.
        simulator()
        fidelity_measure()
        self.generation = 0  # bumps per opened model; every job result checks it
        self.path: Path | None = None
        self.spec = None
        self.calibrating = False
        self._calibrate_after_layout = False
        self.jobs.jobFinished.connect(self._on_job_finished)
        self.bridge.changed.connect(self._on_options)
        self.bridge.settled.connect(self._on_session_changed)
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

    # -- model --------------------------------------------------------------------------------
    def open_model(self, path, input_shapes=None, calib: CalibConfig | None = None) -> Job:
        """Load in the background; the current model stays until the new one is ready."""
        from ..loader import open_model

        self.generation += 1
        gen = self.generation
        for kind in ("layout", "calibrate", "perf", "fidelity", "histogram"):
            self.jobs.cancel(kind)
        self._stop_timers()
        gc.unfreeze()  # the model being replaced may be garbage now: let the collector see it
        opts = replace(self.options, calib=calib) if calib is not None else self.options
        shapes = parse_input_shapes(input_shapes.items() if isinstance(input_shapes, dict) else input_shapes)
        p = Path(path)
        self.loadStarted.emit(str(p))

        def work(progress, cancelled):
            s = open_model(p, shapes, opts)
            # Serialized here, while nothing is drawn yet: later the calibration and fidelity
            # children need the bytes, and encoding holds the GIL, freezing a big graph's window.
            s.graph.prepare_model_bytes()
            return s

        return self.jobs.submit("load", f"load {p.name}", work, lambda s: self._loaded(s, p, gen),
                                on_error=lambda e: self.loadFailed.emit(str(e)),
                                stale_key=lambda: self.generation)

    def _loaded(self, session: Session, path: Path, gen: int) -> None:
        _freeze_heap()
        self.path = path
        self.spec = None
        self.calibrating = False
        self.options = replace(session.options, calib=self.options.calib)
        self.bridge.set_session(session)
        self.modelLoaded.emit(session)
        # Layout first, calibration once it is on screen: both hold the GIL for stretches
        # (igraph, onnxruntime session set-up), and the first paint is what the user waits for.
        self._calibrate_after_layout = not session.ready and self.auto_calibrate
        self.start_layout()
        if session.ready:
            self.refresh()

    def open_project(self, path, on_opened=None) -> Job:
        """Open a ``.qtquant`` project in the background: model, options, groups, cached statistics.

        ``on_opened(session, report)`` runs on the GUI thread before the session is shown
        (the window asks there whether to keep groups re-mapped onto a changed model).
        """
        from ..project import open_project

        self.generation += 1
        gen = self.generation
        for kind in ("layout", "calibrate", "perf", "fidelity", "histogram"):
            self.jobs.cancel(kind)
        self._stop_timers()
        gc.unfreeze()
        p = Path(path)
        self.loadStarted.emit(str(p))

        def work(progress, cancelled):
            return open_project(p, remap=True)

        def done(res):
            session, report = res
            if on_opened is not None and on_opened(session, report) is False:
                return
            self._loaded(session, session.graph.path or p, gen)

        return self.jobs.submit("load", f"open project {p.name}", work, done,
                                on_error=lambda e: self.loadFailed.emit(str(e)),
                                stale_key=lambda: self.generation)

    def close_model(self) -> None:
        gc.unfreeze()
        self.generation += 1
        self._stop_timers()
        self.jobs.cancel()
        self.bridge.set_session(None)
        self.spec = None
        self.path = None

    def start_layout(self) -> Job | None:
        s = self.bridge.session
        if s is None:
            return None
        graph = s.graph
        isolate = len(graph.nodes) >= self.child_process_nodes

        def work(progress, cancelled):
            return layout_scene(scene_spec(graph), graph, isolate=isolate)

        return self.jobs.submit("layout", "layout", work, self._layout_done, stale_key=lambda: self.generation)

    def _layout_done(self, spec) -> None:
        self.spec = spec
        self.layoutReady.emit(spec)
        self._after_layout()

    def _after_layout(self) -> None:
        if self._calibrate_after_layout:
            self._calibrate_after_layout = False
            self.calibrate()

    # -- calibration ------------------------------------------------------------------------------
    def calibrate(self, config: CalibConfig | None = None) -> Job | None:
        s = self.bridge.session
        if s is None:
            return None
        if config is not None and config != s.options.calib:
            s.set_options(calib=config)
        cfg = s.options.calib
        graph, options, groups, qdq = s.graph, s.options, s.groups.as_lists(), s.qdq
        isolate = len(graph.nodes) >= self.child_process_nodes

        def work(progress, cancelled):
            res = calibrate(graph, cfg, progress=progress, cancel=cancelled, isolate=isolate)
            # The analyses too, here: on the GUI thread they would freeze a 20,000-node window ~1 s.
            return res, derive(graph, res, options, groups, qdq)

        self.calibrating = True
        self.calibrationStarted.emit()
        return self.jobs.submit("calibrate", f"calibrate ({cfg.source}, {cfg.count} samples)", work,
                                self._calibrated, stale_key=lambda: self.generation, cancellable=True)

    def cancel_calibration(self) -> None:
        self.jobs.cancel("calibrate")

    def _calibrated(self, result) -> None:
        res, derived = result
        _freeze_heap()
        self.calibrating = False
        self.bridge.session.set_calibration(res, derived)  # -> "calibrated" event -> refresh()
        self.calibrationFinished.emit(True)

    def _on_job_finished(self, job: Job) -> None:
        if job.kind == "layout" and job.status == "failed":
            self._after_layout()  # no drawing, but the analysis can still run
        if job.kind == "calibrate" and job.status != "done" and not self.jobs.active("calibrate"):
            self.calibrating = False
            self.calibrationFinished.emit(False)

    # -- derived results ----------------------------------------------------------------------------
    def _on_options(self, kind: str) -> None:
        if kind == "options":  # before the views refresh: they read self.options
            s = self.bridge.session
            if s is not None and s.options.march != self.options.march:  # the next model keeps it
                self.options = replace(self.options, march=s.options.march)

    def _on_session_changed(self, kind: str) -> None:
        if not self.bridge.ready:
            return
        if kind == "calibrated":
            self._stop_timers()
            self._idle_polls = 0
            self._settle_timer.start()
        else:  # an edit: debounced, so a burst of undo/redo runs the simulator once
            self.schedule_refresh()

    def schedule_refresh(self) -> None:
        self._perf_timer.start()
        self._fid_timer.start()

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

    def refresh(self) -> None:
        """Re-simulate and re-measure for the current revision now (results of older ones drop)."""
        self._stop_timers()
        self.refresh_perf()
        self.refresh_fidelity()

    def refresh_perf(self) -> Job | None:
        self._perf_timer.stop()
        s = self.bridge.session
        sim = simulator()
        if s is None or not s.ready or sim is None:
            return None
        # The analyses are built here, on the GUI thread (cached per revision); the worker
        # only runs the incremental simulator over them.
        frozen = _Frozen(s, self.bridge.concats, self.bridge.baseline_concats)
        rev = s.revision

        def work(progress, cancelled):
            perf = sim(frozen)
            top_layers(perf)  # the perf dock's chart, computed here rather than on the GUI thread
            return perf, sim(frozen, baseline=True)

        return self.jobs.submit("perf", f"simulate ({s.options.march})", work,
                                lambda r: self._perf_done(r, rev), stale_key=self._key)

    def refresh_fidelity(self) -> Job | None:
        self._fid_timer.stop()
        s = self.bridge.session
        meas = fidelity_measure(self.fidelity_worker)
        if s is None or not s.ready or meas is None or s.calibration is None:
            return None
        if self.fidelity_worker is not None:
            s = Snapshot(s)  # taken here: the worker thread must not read a session being edited
        else:
            s.domains  # build on the GUI thread once, so the worker only reads it
            s.baseline_domains
        rev = s.revision

        def work(progress, cancelled):  # a newer edit cancels it (supersede) between samples
            return meas(s, cancel=cancelled)

        return self.jobs.submit("fidelity", "fidelity", work, lambda r: self._fidelity_done(r, rev),
                                stale_key=self._key)

    def _key(self):
        return (self.generation, self.bridge.revision)

    def _perf_done(self, res, rev) -> None:
        perf, base = res
        self.bridge.set_perf(perf, rev, base)
        self.perfFinished.emit()

    def _fidelity_done(self, fid, rev) -> None:
        self.bridge.set_fidelity(fid, rev)
        self.fidelityFinished.emit()

    def histogram(self, tensor: str, on_ready) -> Job | None:
        """Histogram of ``tensor`` over the held-out samples, for stats that carry none."""
        s = self.bridge.session
        if s is None or s.calibration is None:
            return None
        feeds = list(getattr(s.calibration, "holdout", None) or [])
        if not feeds:
            from ..runtime import zeros_feed

            feeds = [zeros_feed(s.graph)]
        graph = s.graph

        def work(progress, cancelled):
            import numpy as np

            from ..runtime import make_session, with_outputs

            sess = make_session(with_outputs(graph.model, [tensor]), graph.base_dir)
            vals = np.concatenate([np.asarray(sess.run([tensor], f)[0], np.float64).ravel() for f in feeds])
            vals = vals[np.isfinite(vals)]
            if not vals.size:
                return None
            return np.histogram(vals, bins=128)

        def done(res):
            if res is not None:
                self.bridge.hist_cache[tensor] = res
            on_ready(tensor)

        return self.jobs.submit("histogram", f"histogram {tensor}", work, done, stale_key=self._key)

    def set_march(self, march: str) -> None:
        """Not undoable (the window's edits go through the undo stack instead)."""
        s = self.bridge.session
        self.options = replace(self.options, march=march)
        if s is not None and s.options.march != march:
            s.set_options(march=march)  # "options" event -> refresh()

    def shutdown(self) -> None:
        self._stop_timers()
        self.jobs.shutdown()
