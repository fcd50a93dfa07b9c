"""``.qtquant`` projects in the app: save, save as, open, and the unsaved-changes prompt.

A project stores the model path and hash, input shapes, calibration configuration,
options and groups (:mod:`qtquant.files.project`, written atomically), plus a link to the
calibration statistics, which are saved next to it (``NAME.stats/``, the
:mod:`qtquant.calib.cache` format) so reopening it does not calibrate again.  The project
file is small and written at once; the statistics (histograms of every tensor) are written
by a background job, never on the GUI thread.  "Unsaved" means the command stack is away
from its clean state, or groups were re-mapped onto a changed model since the project was
opened.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QFileDialog, QMessageBox

from ...base.errors import QtQuantError
from ...base.fileio.paths import default_output_folder

__all__ = ["PROJECT_SUFFIX", "stats_dir", "statistics_job", "ProjectController"]

PROJECT_SUFFIX = ".qtquant"


def stats_dir(project_path) -> Path:
    p = Path(project_path)
    return p.with_name(p.stem + ".stats")


def statistics_job(graph, calibration, cache: Path, *, replace: bool = False):
    """The worker function of a job writing ``calibration``'s statistics to ``cache``, once per
    key (they depend on the data only).  ``replace``: clear a cache written for other data."""

    def work(progress, cancelled) -> Path:
        import shutil

        from ...calib.cache import cache_key, cache_paths, save_cache

        j, n = cache_paths(cache, cache_key(graph, calibration.config))
        if not (j.is_file() and n.is_file()):
            if replace:
                shutil.rmtree(cache, ignore_errors=True)
            save_cache(graph, calibration, cache)
        return cache

    return work


class ProjectController(QObject):
    """Which project file is open, saving, opening and prompting, for one session relay."""

    pathChanged = Signal(object)  # Path or None
    saved = Signal(object)  # the project file's Path (the window lists it in Open Recent)

    def __init__(self, relay, controller, messages, parent=None):
        super().__init__(parent)
        self.relay = relay
        self.controller = controller
        self.messages = messages
        self.path: Path | None = None
        self.remapped = False  # groups re-mapped onto a changed model: unsaved until saved
        self._opening: Path | None = None  # the project whose model is loading, if any
        self._located = False  # that project's model was located by the user: save to record it
        self.last_report = None  # qtquant.app.projects.OpenReport of the last opened project
        controller.loadStarted.connect(self._load_started)
        controller.loadFailed.connect(self._load_failed)
        controller.calibrationFinished.connect(self._calibrated)

    def _load_started(self, path: str) -> None:
        self._opening = Path(path) if path.lower().endswith(PROJECT_SUFFIX) else None

    def _load_failed(self, message: str) -> None:
        self._opening = None

    # -- state ------------------------------------------------------------------------------
    @property
    def modified(self) -> bool:
        return self.remapped or not self.relay.stack.clean

    def model_opened(self) -> None:
        """A model (or a project's model) replaced the session."""
        self.path, self._opening = self._opening, None
        self.remapped = bool(self.path) and (self._located or bool(
            self.last_report and self.last_report.model_changed and not getattr(self.last_report, "dropped_all",
                                                                                   False)))
        self._located = False
        if self.path is None:
            self.last_report = None
        self.pathChanged.emit(self.path)

    # -- saving -----------------------------------------------------------------------------
    def save(self) -> bool:
        if self.path is None:
            return self.save_as()
        return self.save_to(self.path)

    def save_as(self) -> bool:
        s = self.relay.session
        if s is None:
            return False
        # Next to the model, unless the model sits in a hidden cache folder (the demo's): then home
        stem = s.graph.path.stem if s.graph.path else "untitled"
        start = self.path or default_output_folder(s.graph.path) / (stem + PROJECT_SUFFIX)
        p, _ = QFileDialog.getSaveFileName(self.messages.widget, "Save project", str(start),
                                           f"qtquant projects (*{PROJECT_SUFFIX})")
        return self.save_to(p) if p else False

    def save_to(self, path) -> bool:
        """Write the project file now and its statistics in the background (:attr:`statistics`
        is that job, None when there is nothing to write)."""
        from ...files.project import save_project

        s = self.relay.session
        if s is None:
            self.messages.status("Nothing to save: open a model first", 5000)
            return False
        path = Path(path)
        if path.suffix != PROJECT_SUFFIX:
            path = path.with_name(path.name + PROJECT_SUFFIX)
        cache = stats_dir(path) if s.calibration is not None and not s.quantized_file else None
        try:
            save_project(s, path, stats_cache=cache)
        except (QtQuantError, OSError) as e:
            self.messages.error("Cannot save the project", str(e))
            return False
        self.path = path
        self.remapped = False
        self.relay.stack.set_clean()
        self.pathChanged.emit(path)
        self.saved.emit(path)
        self.messages.say(f"Saved {path.name}" + (f" with statistics in {cache.name}/" if cache else ""), 8000)
        if cache is not None:
            self.write_statistics(cache, failed="statistics not cached ({error}); opening the project will "
                                                "calibrate again")
        return True

    def write_statistics(self, cache: Path, *, failed: str = "", replace: bool = False):
        """Submit the job writing the session's statistics to ``cache``; returns it."""
        s = self.relay.session

        def on_error(e):
            if failed:
                self.messages.log(failed.format(error=e))

        # The job's own failure message would open an error dialog: a cache is only a speed-up.
        return self.controller.jobs.submit("statistics", f"write statistics to {cache.name}/",
                                           statistics_job(s.graph, s.calibration, cache, replace=replace),
                                           on_error=on_error, supersede=False, quiet=True)

    def _calibrated(self, ok: bool) -> None:
        """After a calibration in an open project: keep its statistics next to the project."""
        s = self.relay.session
        if ok and self.path is not None and s is not None and s.calibration is not None and not s.quantized_file:
            self.write_statistics(stats_dir(self.path))  # a read-only project folder: the next open calibrates

    # -- opening ----------------------------------------------------------------------------
    def open(self, path):
        """Open ``path`` in the background; returns the job (None: the user gave up locating a
        missing model)."""
        from ...files.project import load_project

        model = None
        try:
            proj = load_project(path)
        except QtQuantError:
            proj = None  # the load job reports a bad file the usual way
        if proj is not None and not proj.model_path().is_file() and self.messages.show_dialogs:
            model = self.locate_model(proj)
            if model is None:
                return None
        self._located = model is not None
        return self.controller.open_project(path, on_opened=self.opened, model=model)

    def locate_model(self, proj) -> Path | None:
        """The project's model is not where the project says: let the user point at it.  A file
        with another SHA-256 is not the same model; it is used only when the user says so (its
        groups are then re-mapped by tensor name)."""
        from ...files.project import model_matches

        want = proj.model_path()
        ans = self.messages.ask("Model not found", f"The model of {proj.path.name}, {want.name}, is not at\n{want}"
                                "\n\nLocate it?", QMessageBox.Open | QMessageBox.Cancel, QMessageBox.Open)
        if ans != QMessageBox.Open:
            return None
        start = want.parent if want.parent.is_dir() else proj.path.parent
        p, _ = QFileDialog.getOpenFileName(self.messages.widget, f"Locate {want.name}", str(start / want.name),
                                           "ONNX models (*.onnx);;All files (*)")
        if not p:
            return None
        try:
            same = model_matches(proj, p)
        except OSError as e:
            self.messages.error("Cannot read the model", str(e))
            return None
        if not same:
            ans = self.messages.ask("Not the same model", f"{Path(p).name} is not the model {proj.path.name} was saved "
                                    "with (its SHA-256 differs).\n\nOpen it anyway? The project's groups are "
                                    "re-mapped onto it by tensor name.", QMessageBox.Yes | QMessageBox.No,
                                    QMessageBox.No)
            if ans != QMessageBox.Yes:
                return None
        self.messages.log(f"project: model located at {p}" + ("" if same else " (a different file)"))
        return Path(p)

    def opened(self, session, report) -> bool:
        """GUI thread, before the session is shown: decide about groups on a changed model."""
        self.last_report = report
        report.dropped_all = False
        if report.model_changed:
            n = len(session.groups)
            text = (f"{report.message().capitalize()}.\n\nRe-map the project's groups onto the model by tensor "
                    f"name? {n} group(s) can be re-mapped; No opens the model without groups.")
            keep = self.messages.ask("The model changed", text, QMessageBox.Yes | QMessageBox.No,
                                     QMessageBox.Yes) == QMessageBox.Yes
            if not keep:
                if report.remap is not None:  # the model opens as if the project had no group
                    report.remap.undo(session)
                    report.remap = None
                report.dropped_all = True
            self.messages.log(f"project: {report.message()}; groups "
                              + ("re-mapped by tensor name" if keep else "dropped"))
        if report.log_problem and not report.model_changed:  # (a changed model's message above carries it)
            self.messages.log(f"project: {report.log_problem}")
        if report.stats_from_cache:
            self.messages.log("project: calibration statistics read from the project's cache")
        return True

    # -- prompting --------------------------------------------------------------------------
    def maybe_save(self) -> bool:
        """Ask before unsaved changes are lost; False means stop (the user cancelled)."""
        if not self.modified or self.relay.session is None:
            return True
        name = self.path.name if self.path else "the current model"
        ans = self.messages.ask("Unsaved changes", f"Save the changes to {name} as a project before closing it?",
                                QMessageBox.Save | QMessageBox.Discard | QMessageBox.Cancel, QMessageBox.Save,
                                quiet=QMessageBox.Discard)
        if ans == QMessageBox.Save:
            return self.save()
        return ans == QMessageBox.Discard
