"""Background jobs: run a function in a worker thread, deliver its result on the GUI thread.

Each job has a *kind* (load, layout, calibrate, perf, fidelity, ...).  A result is
dropped as stale when a newer job of the same kind was submitted meanwhile, or when the
job's ``stale_key`` (typically the model generation and session revision) changed
between submission and completion.  Exceptions never reach
Qt: they come back as (one-line message, details) for the error dialog.  A job's
``cancel`` flag is what the worker function polls (calibration checks it between
batches).
"""

from __future__ import annotations

import itertools
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

from PySide6.QtCore import QObject, QRunnable, QThreadPool, Qt, Signal, Slot

from ..base import childproc
from ..base.errors import Cancelled, QtQuantError
from ..base.vocab import JobStatus

__all__ = ["Job", "JobManager", "error_text"]


def error_text(exc: BaseException) -> str:
    """The one-line message a user sees for ``exc``."""
    if isinstance(exc, QtQuantError):
        return str(exc)
    msg = " ".join(str(exc).split()) or type(exc).__name__
    if len(msg) > 300:
        msg = msg[:297] + "..."
    return f"unexpected {type(exc).__name__}: {msg}"


@dataclass(eq=False)
class Job:
    id: int
    kind: str
    label: str
    fn: Callable
    on_done: Callable | None
    on_error: Callable | None
    key: Any  # stale_key() at submission
    stale_key: Callable | None
    cancellable: bool
    supersede: bool = True
    quiet: bool = False  # a failure goes to on_error only, not to jobFailed (the error dialog)
    started: float = field(default_factory=time.perf_counter)
    cancel_event: threading.Event = field(default_factory=threading.Event)
    done: int = 0
    total: int = 0
    status: JobStatus = JobStatus.RUNNING
    seconds: float = 0.0

    @property
    def cancelled(self) -> bool:
        return self.cancel_event.is_set()

    def cancel(self) -> None:
        self.cancel_event.set()


class _Signals(QObject):
    progress = Signal(int, int, int)
    finished = Signal(int, object)
    failed = Signal(int, object)


# The child processes the window's jobs start (calibration, fidelity, shape inference, big
# layouts) run at a lower CPU priority than the GUI: on a machine with few cores, onnxruntime's
# pool threads and numpy otherwise take every core and the GUI thread waits for the scheduler.
# The worker *threads* of this process keep the normal priority: a niced thread that holds the
# interpreter lock is the last to get a core on a busy machine, and the GUI thread waits for the
# lock all that time (open of a 20,000-node graph with other programs busy: 150-300 ms stalls
# inside plain Python code of the load and calibration threads).
WORKER_NICENESS = 10


class _Runner(QRunnable):
    def __init__(self, job: Job, sig: _Signals):
        super().__init__()
        self.setAutoDelete(True)
        self.job, self.sig = job, sig

    def run(self):  # worker thread
        job, sig = self.job, self.sig

        def progress(done, total=0):
            sig.progress.emit(job.id, int(done), int(total))

        try:
            res = job.fn(progress, job.cancel_event.is_set)
        except BaseException as e:  # noqa: BLE001 - every failure becomes a message
            sig.failed.emit(job.id, (e, traceback.format_exc()))
            return
        sig.finished.emit(job.id, res)


class JobManager(QObject):
    """Submits jobs to a thread pool and routes results back to the GUI thread."""

    jobStarted = Signal(object)
    jobProgress = Signal(object)
    jobFinished = Signal(object)  # status in job.status
    jobFailed = Signal(object, str, str)  # job, one-line message, details
    idle = Signal()

    def __init__(self, parent=None, threads: int = 3):
        super().__init__(parent)
        self.pool = QThreadPool(self)
        self.pool.setMaxThreadCount(threads)
        childproc.NICENESS = max(childproc.NICENESS, WORKER_NICENESS)
        self._ids = itertools.count(1)
        self._jobs: dict[int, tuple[Job, _Signals]] = {}
        self._latest: dict[str, int] = {}
        self.history: list[Job] = []

    # -- submitting ------------------------------------------------------------------------
    def submit(self, kind: str, label: str, fn: Callable[[Callable, Callable], Any],
               on_done: Callable[[Any], None] | None = None, *, on_error: Callable | None = None,
               stale_key: Callable[[], Any] | None = None, cancellable: bool = False,
               supersede: bool = True, quiet: bool = False) -> Job:
        """Run ``fn(progress, cancelled)`` in a worker; ``on_done(result)`` runs on the GUI thread.

        The result is dropped if ``stale_key()`` differs at completion from its value now,
        or (``supersede``) if another job of the same kind was submitted since.
        """
        if supersede:
            old = self._latest.get(kind)
            if old in self._jobs:
                self._jobs[old][0].cancel()
        job = Job(next(self._ids), kind, label, fn, on_done, on_error,
                  stale_key() if stale_key else None, stale_key, cancellable, supersede, quiet)
        sig = _Signals()
        sig.progress.connect(self._on_progress, Qt.QueuedConnection)
        sig.finished.connect(self._on_finished, Qt.QueuedConnection)
        sig.failed.connect(self._on_failed, Qt.QueuedConnection)
        self._jobs[job.id] = (job, sig)
        if supersede:
            self._latest[kind] = job.id
        self.history.append(job)
        del self.history[:-200]
        self.jobStarted.emit(job)
        self.pool.start(_Runner(job, sig))
        return job

    def cancel(self, kind: str | None = None) -> None:
        for job, _ in list(self._jobs.values()):
            if kind is None or job.kind == kind:
                job.cancel()

    def active(self, kind: str | None = None) -> list[Job]:
        return [j for j, _ in self._jobs.values() if kind is None or j.kind == kind]

    @property
    def busy(self) -> bool:
        return bool(self._jobs)

    def shutdown(self, timeout_ms: int = 5000) -> None:
        self.cancel()
        self.pool.waitForDone(timeout_ms)

    # -- results (GUI thread) ----------------------------------------------------------------
    def _stale(self, job: Job) -> bool:
        if job.supersede and self._latest.get(job.kind) != job.id:
            return True
        return job.stale_key is not None and job.stale_key() != job.key

    def _finish(self, job: Job, status: JobStatus) -> None:
        job.status = status
        job.seconds = time.perf_counter() - job.started
        self._jobs.pop(job.id, None)
        self.jobFinished.emit(job)
        if not self._jobs:
            self.idle.emit()

    def _running(self, jid: int) -> Job | None:
        """The job with id ``jid`` if it is still running (a late signal of a finished one: None)."""
        entry = self._jobs.get(jid)
        return entry[0] if entry is not None else None

    @Slot(int, int, int)
    def _on_progress(self, jid, done, total):
        job = self._running(jid)
        if job is None:
            return
        job.done, job.total = done, total
        self.jobProgress.emit(job)

    @Slot(int, object)
    def _on_finished(self, jid, result):
        job = self._running(jid)
        if job is None:
            return
        if self._stale(job) or (job.cancelled and job.cancellable):
            self._finish(job, JobStatus.STALE if not job.cancelled else JobStatus.CANCELLED)
            return
        try:
            if job.on_done is not None:
                job.on_done(result)
        except BaseException as e:  # noqa: BLE001 - applying a result must not kill the app
            self._finish(job, JobStatus.FAILED)
            self.jobFailed.emit(job, error_text(e), traceback.format_exc())
            return
        self._finish(job, JobStatus.DONE)

    @Slot(int, object)
    def _on_failed(self, jid, payload):
        job = self._running(jid)
        if job is None:
            return
        exc, details = payload
        if isinstance(exc, Cancelled) or job.cancelled:
            self._finish(job, JobStatus.CANCELLED)
            return
        if self._stale(job):
            self._finish(job, JobStatus.STALE)
            return
        self._finish(job, JobStatus.FAILED)
        if job.on_error is not None:
            try:
                job.on_error(exc)
            except BaseException:  # noqa: BLE001
                pass
        if not job.quiet:
            self.jobFailed.emit(job, error_text(exc), details)
