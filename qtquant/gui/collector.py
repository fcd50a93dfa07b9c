"""Cyclic garbage collection on the GUI thread only.

Python's collector runs in whichever thread happens to allocate when a threshold is crossed.
In this app that is often a worker, and a garbage cycle can hold a Qt object (a closed
dialog, a slot's closure over a widget): destroying it from a worker thread crashes Qt.  A
collection also walks the heap with the GIL held, so where it runs is where the freeze is.
The automatic collector is therefore switched off and a GUI-thread timer collects with the
usual generation thresholds.  Objects are still freed by reference counting at once.
After a full collection the survivors are frozen (see :func:`gc.freeze`), so the next full
collection walks only what was made since: on a 20,000-node graph one walk of everything is
~0.1 s, a freeze of the GUI thread.  For the same reason a bulk of new objects (a result that
just arrived) is frozen rather than walked.
"""

from __future__ import annotations

import gc

from PySide6.QtCore import QCoreApplication, QObject, QTimer

__all__ = ["install_collector"]

INTERVAL_MS = 250
BULK_OBJECTS = 50_000  # new objects since the last check beyond which they are frozen, not walked


class _Collector(QObject):
    def __init__(self, app):
        super().__init__(app)
        self.timer = QTimer(self, interval=INTERVAL_MS)
        self.timer.timeout.connect(self.check)
        self.timer.start()
        self.collections = [0, 0, 0]
        self.bulk_freezes = 0

    def check(self) -> None:
        counts, thresholds = gc.get_count(), gc.get_threshold()
        if counts[0] > BULK_OBJECTS:
            # A result arrived (statistics, an analysis, 20,000 looks): that many objects born
            # and still alive since the last check live on.  Walking them finds nothing and
            # holds the GIL 10-40 ms; freezing them costs nothing.  A cycle among them is
            # collected after the next model opens (Controller.open_model unfreezes).
            gc.freeze()
            self.bulk_freezes += 1
            return
        gen = -1
        for g in range(3):
            if counts[g] > thresholds[g]:
                gen = g
        if gen >= 0:
            gc.collect(gen)
            self.collections[gen] += 1
            if gen == 2:
                # What survived a full collection is long-lived (the graph, the scene's items):
                # leave it out of the next ones, which then cost only what is new.  Opening
                # another model unfreezes (Controller.open_model).
                gc.freeze()


def install_collector() -> "_Collector | None":
    """Idempotent; needs the QApplication.  Returns the collector (None without an app)."""
    app = QCoreApplication.instance()
    if app is None:
        return None
    found = app.findChild(_Collector)
    if found is None:
        found = _Collector(app)
    gc.disable()
    return found
