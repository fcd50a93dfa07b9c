"""The Qt face of the current session and its command stack.

The application layer (:mod:`qtquant.app`) emits psygnal events; widgets connect to Qt signals
instead, so Qt disconnects a widget when it is destroyed and a psygnal emission from a worker
thread reaches the widgets on the GUI thread (Qt queues a cross-thread emission).  The relay
keeps no state of its own beyond which session is current: results, options and the undo
history live in the :class:`~qtquant.app.Session` and its :class:`~qtquant.app.CommandStack`.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal

from ..app import CommandStack, Session

__all__ = ["SessionRelay"]


class SessionRelay(QObject):
    """One Qt signal per session event kind, plus ``settled(kind)`` after each."""

    sessionReplaced = Signal(object)  # the new Session, or None
    calibrated = Signal()
    optionsChanged = Signal(dict)  # the option fields that changed
    groupsChanged = Signal()
    perfChanged = Signal(object)  # qtquant.app.Result
    fidelityChanged = Signal(object)  # qtquant.app.Result
    accuracyChanged = Signal(object)  # qtquant.app.Result of an AccuracyReport
    compilerLogChanged = Signal(object)  # a compile log placed on the graph (LogMatch), or None
    stackChanged = Signal()
    # After every listener of an event ran: background jobs start here, so they do not take
    # the GIL from the views refreshing on the GUI thread (0.1 s more on a big graph).
    settled = Signal(str)

    def __init__(self, session: Session | None = None, parent=None):
        super().__init__(parent)
        self.session: Session | None = None
        self.stack = CommandStack()
        self.stack.changed.connect(self._stack_changed)
        if session is not None:
            self.set_session(session)

    def set_session(self, session: Session | None) -> None:
        """Show ``session`` (None: no model); the undo history starts over."""
        old = self.session
        if old is not None:
            old.events.disconnect(self._on_event)
        self.session = session
        self.stack.clear(session)
        if session is not None:
            session.events.connect(self._on_event)
        self.sessionReplaced.emit(session)

    # -- psygnal -> Qt ----------------------------------------------------------------------
    def _on_event(self, info) -> None:
        kind = info.signal.name
        if kind == "groups":
            self.groupsChanged.emit()
        elif kind == "options":
            self.optionsChanged.emit(*info.args)
        elif kind == "calibrated":
            self.calibrated.emit()
        elif kind == "perf":
            self.perfChanged.emit(*info.args)
        elif kind == "fidelity":
            self.fidelityChanged.emit(*info.args)
        elif kind == "accuracy":
            self.accuracyChanged.emit(*info.args)
        elif kind == "compiler_log":
            self.compilerLogChanged.emit(*info.args)
        self.settled.emit(kind)

    def _stack_changed(self) -> None:
        self.stackChanged.emit()

    # -- what most readers ask ----------------------------------------------------------------
    @property
    def ready(self) -> bool:
        return self.session is not None and self.session.ready

    def concats(self, baseline: bool = False):
        """The Concat analysis of the current state, or None before scales exist."""
        return self.session.concats(baseline) if self.ready else None

    def perf(self, baseline: bool = False):
        """The latest simulation (or its ungrouped baseline), current or stale, or None."""
        s = self.session
        r = None if s is None else s.perf_baseline if baseline else s.perf
        return r.value if r is not None else None

    def accuracy(self):
        """The latest accuracy report (current or stale), or None."""
        s = self.session
        r = None if s is None else s.accuracy
        return r.value if r is not None else None

    def on_state_change(self, slot) -> None:
        """``slot()`` after whatever changes what a view derives from the session: another
        session, new statistics, an option, the groups.  Results (perf, fidelity) have their own
        signals, so a view updates only the part that shows them."""
        for sig in (self.sessionReplaced, self.calibrated, self.optionsChanged, self.groupsChanged,
                    self.compilerLogChanged):
            sig.connect(slot)

    def concat(self, name: str):
        return next((c for c in self.concats() or () if c.node == name), None)
