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

The window and the controller say when objects become long-lived (:func:`long_lived`: a model
loaded, a scene built, statistics arrived) and when they may become garbage
(:func:`model_closing`); this module is the only one that touches :mod:`gc`.
"""

from __future__ import annotations

import gc

from PySide6.QtCore import QCoreApplication, QObject, QTimer

__all__ = ["install_collector", "long_lived", "model_closing", "collect_step"]

INTERVAL_MS = 250
BULK_OBJECTS = 50_000  # new objects since the last check beyond which they are frozen, not walked


def long_lived() -> None:
    """What exists now lives as long as the model (the graph, the statistics, the scene's items):
    leave it out of every later collection.  A full collection walks every object with the GIL
    held: with a 20,000-node graph loaded that was some 160 ms (68 ms with the graph frozen).
    Frozen objects are still freed by reference counting; :func:`model_closing` unfreezes them."""
    gc.freeze()


def model_closing() -> None:
    """The model being replaced may be garbage now: let the collector see it again."""
    gc.unfreeze()


def collect_step(stats: dict | None = None) -> str:
    """One check of the generation counts: collect, freeze a bulk, or nothing.  Returns what it did."""
    counts, thresholds = gc.get_count(), gc.get_threshold()
    if counts[0] > BULK_OBJECTS:
        # A result arrived (statistics, an analysis, 20,000 looks): that many objects born and
        # still alive since the last check live on.  Walking them finds nothing and holds the
        # GIL 10-40 ms; freezing them costs nothing.  A cycle among them is collected after the
        # next model opens (model_closing).
        gc.freeze()
        return "bulk"
    gen = -1
    for g in range(3):
        if counts[g] > thresholds[g]:
            gen = g
    if gen < 0:
        return ""
    gc.collect(gen)
    if gen == 2:
        # What survived a full collection is long-lived (the graph, the scene's items): leave it
        # out of the next ones, which then cost only what is new.
        gc.freeze()
    return f"gen{gen}"


class _Collector(QObject):
    def __init__(self, app):
        super().__init__(app)
        self.timer = QTimer(self, interval=INTERVAL_MS)
        self.timer.timeout.connect(self.check)
        self.timer.start()
        self.collections = [0, 0, 0]
        self.bulk_freezes = 0

    def check(self) -> None:
        did = collect_step()
        if did == "bulk":
            self.bulk_freezes += 1
        elif did:
            self.collections[int(did[3:])] += 1


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
