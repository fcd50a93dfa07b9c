"""The status bar's job display: what runs, its progress, and a Cancel button."""

from __future__ import annotations

from PySide6.QtCore import QObject, QTimer
from PySide6.QtWidgets import QLabel, QProgressBar, QToolButton

__all__ = ["JobProgress"]


class JobProgress(QObject):
    """Shows ``jobs`` (a JobManager) in ``status_bar``; logs each start and end to ``log``."""

    def __init__(self, jobs, status_bar, log, parent=None):
        super().__init__(parent)
        self.jobs = jobs
        self.log = log
        self.status_bar = status_bar
        self.bar = QProgressBar()
        self.bar.setFixedWidth(200)
        self.bar.setTextVisible(True)
        self.bar.setVisible(False)
        self.cancel_button = QToolButton()
        self.cancel_button.setText("Cancel")
        self.cancel_button.setVisible(False)
        self.cancel_button.clicked.connect(self.cancel)
        self.label = QLabel("")
        self._state = None  # (label, total, done, cancellable) shown now
        # Once per event-loop turn: a job ending and two starting (calibration done, simulation
        # and fidelity submitted) made three progress-bar re-layouts in one turn.
        self._timer = QTimer(self, singleShot=True, interval=0)
        self._timer.timeout.connect(self._show)
        for w in (self.label, self.bar, self.cancel_button):
            status_bar.addPermanentWidget(w)
        jobs.jobStarted.connect(self._started)
        jobs.jobProgress.connect(lambda job: self._timer.start())
        jobs.jobFinished.connect(self._finished)

    def _started(self, job) -> None:
        self.log(f"{job.label}: started")
        self._timer.start()

    def _finished(self, job) -> None:
        self.log(f"{job.label}: {job.status} in {job.seconds:.2f} s")
        self._timer.start()

    def _show(self) -> None:
        active = self.jobs.active()
        if not active:
            state = None
        else:
            main = next((j for j in active if j.cancellable), active[0])
            state = (main.label + ("" if len(active) == 1 else f" (+{len(active) - 1})"), main.total, main.done,
                     any(j.cancellable for j in active))
        if state == self._state:  # a progress bar re-laid out per job event: ~5 ms each
            return
        self._state = state
        if state is None:
            self.bar.setVisible(False)
            self.cancel_button.setVisible(False)
            self.label.setText("")
            return
        label, total, done, cancellable = state
        self.label.setText(label)
        self.bar.setVisible(True)
        if total:
            self.bar.setRange(0, total)
            self.bar.setValue(done)
            self.bar.setFormat("%v / %m")
        else:
            self.bar.setRange(0, 0)
        self.cancel_button.setVisible(cancellable)

    def cancel(self) -> None:
        for j in self.jobs.active():
            if j.cancellable:
                j.cancel()
        self.status_bar.showMessage("Cancelling…", 3000)
