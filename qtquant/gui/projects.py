"""``.qtquant`` projects in the app: save, save as, open, and the unsaved-changes prompt.

A project stores the model path and hash, input shapes, calibration configuration,
options and groups (:mod:`qtquant.project`, written atomically), plus a link to the
calibration statistics, which are saved next to it (``NAME.stats/``, the
:mod:`qtquant.calib.cache` format) so reopening it does not calibrate again.  "Unsaved"
means the undo stack is away from its clean index, or groups were re-mapped onto a
changed model since the project was opened.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QFileDialog, QMessageBox

from ..errors import QtQuantError

__all__ = ["PROJECT_SUFFIX", "stats_dir", "save_project_files", "ProjectIO"]

PROJECT_SUFFIX = ".qtquant"


def stats_dir(project_path) -> Path:
    p = Path(project_path)
    return p.with_name(p.stem + ".stats")


def save_project_files(session, path) -> tuple[Path, Path | None, str]:
    """Write the statistics cache (when there is one to write) and the project file.

    Returns (project path, statistics folder or None, a note for the user or "").
    """
    from ..calib.cache import cache_key, cache_paths, save_cache
    from ..project import save_project

    path = Path(path)
    if path.suffix != PROJECT_SUFFIX:
        path = path.with_name(path.name + PROJECT_SUFFIX)
    cache, note = None, ""
    cal = session.calibration
    if cal is not None and not session.quantized_file:
        cache = stats_dir(path)
        try:
            j, n = cache_paths(cache, cache_key(session.graph, cal.config))
            if not (j.is_file() and n.is_file()):  # statistics depend on the data only: write once
                save_cache(session.graph, cal, cache)
        except (QtQuantError, OSError) as e:  # the data moved, or the folder is read-only
            cache, note = None, f"statistics not cached ({e}); opening the project will calibrate again"
    save_project(session, path, stats_cache=cache)
    return path, cache, note


class ProjectIO(QObject):
    """The window's project file: which one is open, saving, opening, prompting."""

    pathChanged = Signal(object)  # Path or None

    def __init__(self, window):
        super().__init__(window)
        self.win = window
        self.path: Path | None = None
        self.remapped = False  # groups re-mapped onto a changed model: unsaved until saved
        self._opening: Path | None = None  # the project whose model is loading, if any
        self.last_report = None  # qtquant.project.OpenReport of the last opened project
        window.controller.loadStarted.connect(self._load_started)
        window.controller.loadFailed.connect(self._load_failed)

    def _load_started(self, path: str) -> None:
        self._opening = Path(path) if path.lower().endswith(PROJECT_SUFFIX) else None

    def _load_failed(self, message: str) -> None:
        self._opening = None

    # -- state ------------------------------------------------------------------------------
    @property
    def modified(self) -> bool:
        return self.remapped or not self.win.undo_stack.isClean()

    def model_opened(self) -> None:
        """A model (or a project's model) replaced the session."""
        self.path, self._opening = self._opening, None
        self.remapped = bool(self.path) and bool(self.last_report and self.last_report.model_changed
                                                  and not getattr(self.last_report, "dropped_all", False))
        if self.path is None:
            self.last_report = None
        self.pathChanged.emit(self.path)

    # -- saving -----------------------------------------------------------------------------
    def save(self) -> bool:
        if self.path is None:
            return self.save_as()
        return self.save_to(self.path)

    def save_as(self) -> bool:
        s = self.win.bridge.session
        if s is None:
            return False
        start = self.path or (s.graph.path.with_suffix(PROJECT_SUFFIX) if s.graph.path else Path.home() / "untitled")
        p, _ = QFileDialog.getSaveFileName(self.win, "Save project", str(start),
                                           f"qtquant projects (*{PROJECT_SUFFIX})")
        return self.save_to(p) if p else False

    def save_to(self, path) -> bool:
        s = self.win.bridge.session
        if s is None:
            self.win.statusBar().showMessage("Nothing to save: open a model first", 5000)
            return False
        try:
            path, cache, note = save_project_files(s, path)
        except (QtQuantError, OSError) as e:
            self.win.show_error("Cannot save the project", str(e))
            return False
        self.path = path
        self.remapped = False
        self.win.undo_stack.setClean()
        self.pathChanged.emit(path)
        self.win.add_recent(path)
        msg = f"Saved {path.name}" + (f" with statistics in {cache.name}/" if cache else "")
        self.win.statusBar().showMessage(msg + (f"; {note}" if note else ""), 8000)
        self.win.job_log.log(msg + (f"; {note}" if note else ""))
        return True

    def cache_statistics(self) -> None:
        """After a calibration in an open project: keep its statistics next to the project."""
        s = self.win.bridge.session
        if self.path is None or s is None or s.calibration is None or s.quantized_file:
            return
        from ..calib.cache import save_cache

        try:
            save_cache(s.graph, s.calibration, stats_dir(self.path))
        except (QtQuantError, OSError):
            pass  # a read-only project folder: the next open calibrates again

    # -- opening ----------------------------------------------------------------------------
    def open(self, path):
        """Open ``path`` in the background; returns the job."""
        return self.win.controller.open_project(path, on_opened=self._opened)

    def _opened(self, session, report) -> bool:
        """GUI thread, before the session is shown: decide about groups on a changed model."""
        self.last_report = report
        report.dropped_all = False
        if report.model_changed:
            n = len(session.groups)
            text = (f"{report.message().capitalize()}.\n\nRe-map the project's groups onto the model by tensor "
                    f"name? {n} group(s) can be re-mapped; No opens the model without groups.")
            keep = True
            if self.win.show_dialogs:
                ans = QMessageBox.question(self.win, "The model changed", text,
                                           QMessageBox.Yes | QMessageBox.No, QMessageBox.Yes)
                keep = ans == QMessageBox.Yes
            if not keep:
                session.groups.clear()
                session.groups_changed()
                report.dropped_all = True
            self.win.job_log.log(f"project: {report.message()}; groups "
                                 + ("re-mapped by tensor name" if keep else "dropped"))
        if report.stats_from_cache:
            self.win.job_log.log("project: calibration statistics read from the project's cache")
        return True

    # -- prompting --------------------------------------------------------------------------
    def maybe_save(self) -> bool:
        """Ask before unsaved changes are lost; False means stop (the user cancelled)."""
        if not self.modified or self.win.bridge.session is None or not self.win.show_dialogs:
            return True
        name = self.path.name if self.path else "the current model"
        ans = QMessageBox.question(self.win, "Unsaved changes",
                                   f"Save the changes to {name} as a project before closing it?",
                                   QMessageBox.Save | QMessageBox.Discard | QMessageBox.Cancel, QMessageBox.Save)
        if ans == QMessageBox.Save:
            return self.save()
        return ans == QMessageBox.Discard
