"""Autosave of unsaved edits and recovery after a crash.

While the window has unsaved changes (:attr:`ProjectController.modified`), the project
(model path, options, calibration configuration, groups) is written to ``autosave.json`` in
the instance's own slot of the recovery folder, a second or so after each edit and every
:data:`AUTOSAVE_MS`; the calibration statistics go next to it once (``autosave.stats/``, by a
background job) so a restore does not calibrate again.  A clean close, a save or discarding the
edits removes the file.

Several instances run at once: each has its own slot (``instance-<pid>-<n>/``) and holds the
slot's ``lock`` (a :class:`QLockFile`) while it runs.  Only a slot whose lock can be taken, i.e.
whose owner is gone (crashed, killed), is offered back at the next start; the instance that
restores it takes the slot over.  An instance never deletes another's slot.  (Before slots, the
files sat in the folder itself; such a file has no live owner and is offered the same way.)

The recovery folder is, in order: ``QTQUANT_RECOVERY_DIR``, the settings key
``recovery/dir``, and for the application's own settings ``AppDataLocation/recovery``.
A window built on other settings (tests, screenshots) without either autosaves nothing,
so test runs never touch the user's folder or find each other's files.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from PySide6.QtCore import QLockFile, QObject, QStandardPaths, QTimer
from PySide6.QtWidgets import QMessageBox

from ...base.errors import QtQuantError
from .projects import statistics_job

__all__ = ["AUTOSAVE_MS", "EDIT_DEBOUNCE_MS", "ENV_VAR", "recovery_dir", "Recovery"]

AUTOSAVE_MS = 30_000  # periodic autosave while there are unsaved edits
EDIT_DEBOUNCE_MS = 1_500  # after an edit: a burst of undo/redo writes once
ENV_VAR = "QTQUANT_RECOVERY_DIR"
SETTINGS_KEY = "recovery/dir"
PROJECT_NAME = "autosave.json"  # not .qtquant: it must never become the window's project path
META_NAME = "autosave.meta.json"
STATS_NAME = "autosave.stats"
LOCK_NAME = "lock"
SLOT_PREFIX = "instance-"


def _lock(folder: Path) -> QLockFile | None:
    """The slot's lock, taken now, or None when a live process holds it."""
    lk = QLockFile(str(folder / LOCK_NAME))
    lk.setStaleLockTime(0)  # stale only when the owner process is gone, however old
    return lk if lk.tryLock(0) else None


def _saved_at(folder: Path) -> float:
    try:
        return (folder / PROJECT_NAME).stat().st_mtime
    except OSError:
        return 0.0


def recovery_dir(settings, app_settings: bool) -> Path | None:
    """Where autosaves go, or None (disabled)."""
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env)
    v = settings.value(SETTINGS_KEY) if settings is not None else None
    if v:
        return Path(str(v))
    if app_settings:
        base = QStandardPaths.writableLocation(QStandardPaths.AppDataLocation)
        return Path(base) / "recovery" if base else None
    return None


class Recovery(QObject):
    """The autosave timer, recovery file and restore prompt of one session relay's projects."""

    def __init__(self, relay, projects, controller, messages, folder: Path | None, parent=None):
        super().__init__(parent)
        self.relay, self.projects, self.controller, self.messages = relay, projects, controller, messages
        self.dir = folder
        self.restored = False  # the last offer() restored the autosave
        self.last_error = ""
        self.writes = 0
        self._restoring: dict | None = None
        self._dirty = False
        self._seen = (relay.stack.index, relay.stack.clean)  # the stack state last handled
        self._stats_for = None  # (graph, calibration) whose statistics the autosave folder holds
        self.root = folder  # the recovery folder; self.dir is this instance's slot in it
        self._lock: QLockFile | None = None
        self._claim: tuple[Path, QLockFile] | None = None  # an orphan being offered
        if folder is not None:
            self.dir = self._new_slot(folder)
        self._edit_timer = QTimer(self, singleShot=True, interval=EDIT_DEBOUNCE_MS)
        self._edit_timer.timeout.connect(self.autosave)
        self._timer = QTimer(self, interval=AUTOSAVE_MS)
        self._timer.timeout.connect(self._tick)
        if folder is None:
            return
        relay.stackChanged.connect(self._stack_changed)
        controller.modelLoaded.connect(self._model_loaded)
        projects.pathChanged.connect(self._path_changed)  # a save of a restored (remapped) state
        self._timer.start()

    # -- slots ----------------------------------------------------------------------------------
    def _new_slot(self, root: Path) -> Path | None:
        """This instance's own slot, locked for as long as it runs."""
        n = 0
        while n < 1000:
            slot = root / f"{SLOT_PREFIX}{os.getpid()}-{n}"
            n += 1
            if slot.exists():
                continue
            try:
                slot.mkdir(parents=True)
            except FileExistsError:
                continue
            except OSError as e:  # a read-only folder: no autosave, said once
                self.messages.log(f"autosave disabled: {e}")
                return None
            self._lock = _lock(slot)
            if self._lock is not None:
                return slot
        return None

    def orphans(self) -> list[Path]:
        """Slots with an autosave whose owner is gone, newest first (this instance's own excluded).
        Empty slots left by a crash are removed on the way."""
        if self.root is None or not self.root.is_dir():
            return []
        found = []
        for folder in [self.root, *sorted(self.root.glob(SLOT_PREFIX + "*"))]:
            if folder == self.dir or not folder.is_dir():
                continue
            if self._claim is not None and folder == self._claim[0]:
                found.append(folder)
                continue
            lk = _lock(folder)
            if lk is None:
                continue  # its instance is running: its edits are its own
            try:
                if (folder / PROJECT_NAME).is_file():
                    found.append(folder)
                elif folder != self.root:
                    shutil.rmtree(folder, ignore_errors=True)  # a crash before any edit
            finally:
                lk.unlock()
        return sorted(found, key=_saved_at, reverse=True)

    # -- paths ----------------------------------------------------------------------------------
    @property
    def enabled(self) -> bool:
        return self.dir is not None

    @property
    def project_path(self) -> Path | None:
        return self.dir / PROJECT_NAME if self.dir else None

    def has_autosave(self) -> bool:
        """This instance's recovery file exists."""
        return bool(self.dir) and (self.dir / PROJECT_NAME).is_file()

    def pending(self) -> bool:
        """This instance has a recovery file, or one is left by an instance that is gone."""
        return self.has_autosave() or bool(self.orphans())

    def meta(self, folder: Path | None = None) -> dict:
        try:
            d = json.loads(((folder or self.dir) / META_NAME).read_text(encoding="utf-8"))
            return d if isinstance(d, dict) else {}
        except (OSError, ValueError, TypeError):
            return {}

    # -- autosaving --------------------------------------------------------------------------------
    def _stack_changed(self) -> None:
        st = self.relay.stack
        seen, self._seen = self._seen, (st.index, st.clean)
        if st.index != seen[0] or st.count == 0:  # an undo step, or the history starting over
            self._edited()
        if st.clean and not seen[1]:
            self._clean_changed(True)

    def _edited(self, *_) -> None:
        self._dirty = True
        self._edit_timer.start()

    def _tick(self) -> None:
        if self._dirty:
            self.autosave()

    def _clean_changed(self, clean: bool) -> None:
        if clean and not self.projects.modified:  # saved, or undone back to the saved state
            self._edit_timer.stop()
            self.discard()

    def _path_changed(self, _path) -> None:
        if self._restoring is None and not self.projects.modified and self.pending():
            self._edit_timer.stop()
            self.discard()

    def _model_loaded(self, session) -> None:
        if self._restoring is not None:
            self._after_restore(self._restoring)
            self._restoring = None
        elif not self.projects.modified:  # the user let the old edits go (save prompt)
            self.discard()

    def autosave(self) -> bool:
        """Write the recovery file now if there are unsaved changes (else remove it)."""
        self._edit_timer.stop()
        s = self.relay.session
        if self.dir is None or s is None:
            return False
        if not self.projects.modified:
            self.discard()
            return False
        from ...files.project import save_project

        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            cache = self._write_stats(s)
            save_project(s, self.dir / PROJECT_NAME, stats_cache=cache)  # atomic: a crash mid-write keeps the old
            proj = self.projects.path
            meta = {"project": str(proj) if proj else None, "model": str(s.graph.path or ""),
                    "groups": len(s.groups), "saved": time.strftime("%Y-%m-%d %H:%M:%S"), "pid": os.getpid()}
            from ...base.fileio import atomic_write_text

            atomic_write_text(self.dir / META_NAME, json.dumps(meta, indent=2) + "\n")
        except (QtQuantError, OSError) as e:  # a full or read-only disk: say so once, keep editing
            if str(e) != self.last_error:
                self.messages.log(f"autosave failed: {e}")
            self.last_error = str(e)
            return False
        self._dirty = False
        self.last_error = ""
        self.writes += 1
        return True

    def _write_stats(self, s) -> Path | None:
        """The statistics folder the autosave points to; written by a job, once per calibration
        (a failure there only means that restoring calibrates again)."""
        cal = s.calibration
        if cal is None or s.quantized_file:
            return None
        cache = self.dir / STATS_NAME
        if self._stats_for != (s.graph, cal):
            self._stats_for = (s.graph, cal)
            self.controller.jobs.submit("statistics", "autosave statistics", statistics_job(s.graph, cal, cache,
                                                                                            replace=True),
                                        supersede=False, quiet=True)
        return cache

    def discard(self) -> None:
        """Remove the recovery file (clean close, save, edits dropped)."""
        self._dirty = False
        if self.dir is None:
            return
        for name in (PROJECT_NAME, META_NAME):
            try:
                (self.dir / name).unlink()
            except FileNotFoundError:
                pass
            except OSError:
                pass
        shutil.rmtree(self.dir / STATS_NAME, ignore_errors=True)
        self._stats_for = None

    def stop(self) -> None:
        self._timer.stop()
        self._edit_timer.stop()

    def release(self) -> None:
        """A clean close: the slot goes (after :meth:`discard`) and so does its lock."""
        self._release_claim()
        if self.dir is not None and self._lock is not None:
            if not self.has_autosave() and self.dir != self.root:
                for p in self.dir.iterdir() if self.dir.is_dir() else ():
                    if p.name != LOCK_NAME:
                        shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
                self._lock.unlock()
                shutil.rmtree(self.dir, ignore_errors=True)
            else:
                self._lock.unlock()
            self._lock = None

    def _release_claim(self) -> None:
        if self._claim is not None:
            self._claim[1].unlock()
            self._claim = None

    def _adopt(self, folder: Path, lk: QLockFile) -> None:
        """Take over an orphan's slot: its autosave becomes this instance's, and this instance's
        own (still empty) slot goes."""
        old, old_lock = self.dir, self._lock
        if old is not None and old_lock is not None and not self.has_autosave():
            old_lock.unlock()
            shutil.rmtree(old, ignore_errors=True)
        self.dir, self._lock, self._claim = folder, lk, None
        self._stats_for = None

    # -- restoring ---------------------------------------------------------------------------------
    def offer(self) -> bool:
        """If a recovery file exists, ask to restore it.  True when a restore started.

        Open restores, Discard deletes the file, Cancel keeps it for the next start.
        """
        self.restored = False
        folder = lk = None
        for cand in self.orphans():  # the newest whose owner is gone; held while the user decides
            lk = _lock(cand)
            if lk is not None:
                folder = cand
                break
        if folder is None:
            return False
        self._claim = (folder, lk)
        meta = self.meta(folder)
        what = Path(meta["project"]).name if meta.get("project") else (Path(meta.get("model") or "model").name)
        text = (f"A qtquant window that is no longer running (process {meta.get('pid', '?')}) did not close "
                f"cleanly. Unsaved changes to {what} ({meta.get('groups', '?')} group(s), "
                f"autosaved {meta.get('saved', 'earlier')}) can be restored.\n\n"
                "Open restores them; Discard deletes them; Cancel keeps them for the next start.")
        ans = self.messages.ask("Recover unsaved changes", text,
                                QMessageBox.Open | QMessageBox.Discard | QMessageBox.Cancel, QMessageBox.Open)
        if ans == QMessageBox.Discard:
            self._drop_orphan(folder)
            return False
        if ans != QMessageBox.Open:
            self._release_claim()
            return False
        self._adopt(folder, lk)
        self.restore(meta)
        return True

    def _drop_orphan(self, folder: Path) -> None:
        for name in (PROJECT_NAME, META_NAME):
            (folder / name).unlink(missing_ok=True)
        shutil.rmtree(folder / STATS_NAME, ignore_errors=True)
        self._release_claim()
        if folder != self.root:
            shutil.rmtree(folder, ignore_errors=True)

    def restore(self, meta: dict | None = None):
        """Reopen the autosaved project; the window shows it as unsaved.  Returns the load job."""
        meta = self.meta() if meta is None else meta
        self._restoring = meta
        self.restored = True
        self.messages.log(f"recovery: restoring {self.project_path}")
        job = self.controller.open_project(self.project_path, on_opened=self.projects.opened)
        job_failed = self.controller.loadFailed

        def failed(_msg, sig=job_failed):
            self._restoring = None
            try:
                sig.disconnect(failed)
            except (RuntimeError, TypeError):
                pass

        job_failed.connect(failed)
        return job

    def _after_restore(self, meta: dict) -> None:
        pio = self.projects
        p = meta.get("project")
        pio.path = Path(p) if p else None  # Save goes back to the user's project, never the autosave
        pio.remapped = True  # unsaved until saved: closing asks, and autosave keeps the file
        pio.pathChanged.emit(pio.path)
        self._dirty = True  # written again soon, so a second crash still has it
        self._edit_timer.start()
        self.messages.status("Restored unsaved changes; save them to keep them", 10000)
        self.messages.log("recovery: restored unsaved changes")
