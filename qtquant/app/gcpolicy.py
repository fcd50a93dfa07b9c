"""When the cyclic garbage collector runs, and what it leaves out: the one place that decides.

Python's collector runs in whichever thread happens to allocate when a threshold is crossed.
In the desktop app that is often a worker, and a garbage cycle can hold a Qt object (a closed
dialog, a slot's closure over a widget): destroying it from a worker thread crashes Qt.  A
collection also walks the heap with the GIL held, so where it runs is where the freeze is.
So the app switches the automatic collector off (:meth:`Collector.take_over`) and calls
:meth:`Collector.check` from a timer on its own thread, with the usual generation thresholds.
Objects are still freed by reference counting at once.

Long-lived objects are frozen out of collections (:func:`long_lived`): a full walk of
a 20,000-node graph is ~0.1 s (160 ms with its scene, 68 ms with the graph frozen), several
times per edit.  Replacing the model unfreezes (:func:`model_closing`) so its cycles can go.
"""

from __future__ import annotations

import gc

__all__ = ["INTERVAL_MS", "BULK_OBJECTS", "BATCH_THRESHOLD", "Collector", "long_lived", "model_closing", "batch"]

INTERVAL_MS = 250  # how often the app calls Collector.check
BULK_OBJECTS = 50_000  # new objects since the last check beyond which they are frozen, not walked
BATCH_THRESHOLD = 50_000  # a command's young generation (Python's default: 700)


def batch() -> None:
    """A command that runs once and exits (``qtquant analyze``, ``fix``, ...): the young generation
    is collected every :data:`BATCH_THRESHOLD` new objects instead of every 700.

    Such a command builds a graph, its statistics and exports that live until it exits, and at
    Python's thresholds the collector walked them again and again: ``analyze`` of a 20,000-node CNN
    spent 1.2-1.4 s in 1,400 young, 125 middle and 6 full collections (gc.callbacks, 2 cores), most
    of it the full ones, none of which found much.  Cycles are still collected, later."""
    gc.set_threshold(BATCH_THRESHOLD, *gc.get_threshold()[1:])


def long_lived() -> None:
    """What exists now lives as long as the model (the graph, its statistics, the scene's
    items): leave it out of every later collection.  Reference counting still frees it."""
    gc.freeze()


def model_closing() -> None:
    """Before another model opens: what was frozen may be garbage now, let the collector see it."""
    gc.unfreeze()


class Collector:
    """Generation-threshold collection, run where and when the caller says (no Qt here)."""

    def __init__(self) -> None:
        self.collections = [0, 0, 0]
        self.bulk_freezes = 0

    @staticmethod
    def take_over() -> None:
        """From now on collections run only from :meth:`check`."""
        gc.disable()

    def check(self) -> int | None:
        """Collect what the thresholds ask for; returns the generation collected (-1: a bulk
        was frozen instead), or None."""
        counts, thresholds = gc.get_count(), gc.get_threshold()
        if counts[0] > BULK_OBJECTS:
            # A result arrived (statistics, an analysis, 20,000 looks): that many objects born
            # and still alive since the last check live on.  Walking them finds nothing and
            # holds the GIL 10-40 ms; freezing them costs nothing.  A cycle among them is
            # collected after the next model opens (model_closing).
            gc.freeze()
            self.bulk_freezes += 1
            return -1
        gen = -1
        for g in range(3):
            if counts[g] > thresholds[g]:
                gen = g
        if gen < 0:
            return None
        gc.collect(gen)
        self.collections[gen] += 1
        if gen == 2:
            # What survived a full collection is long-lived (the graph, the scene's items):
            # leave it out of the next ones, which then cost only what is new.
            gc.freeze()
        return gen
