"""Bulk construction without the cyclic garbage collector walking it as it grows.

Building a 10,000-node graph, its domains and its Concat analysis makes ~100,000 objects, none
of them in a cycle.  Each 700 allocations the collector walks the young ones, every tenth time
the older ones, and once the whole heap: a third of the time the analysis took (synthetic
10k-node graph: 34 ms of ~230 ms).  :func:`gc_paused` switches automatic collection off for the
duration and back on after, unless it was off already (the desktop app runs collections itself,
see :mod:`qtquant.app.gcpolicy`); objects are still freed by reference counting at once.

Switching collection back on is not enough: the collector counts allocations while it is off,
so the first allocation after the build would walk every object the build made (the young
generation), and later the middle one again, only to find them all alive (synthetic 10k-node
analysis: ~30M instructions a run).  So what the build made goes straight to the oldest
generation (``gc.freeze()`` then ``gc.unfreeze()``: two list splices, no walk), where the next
full collection sees it as it sees everything else; a garbage cycle made meanwhile is collected
then.  Not when something is frozen already: unfreezing would hand it back to the collector.
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable
from typing import ParamSpec, TypeVar

__all__ = ["gc_paused"]

P = ParamSpec("P")
R = TypeVar("R")


def gc_paused(fn: Callable[P, R]) -> Callable[P, R]:
    """Decorator: run ``fn`` with automatic collection off (restored after, also on error)."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        was = gc.isenabled()
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            if was:
                if not gc.get_freeze_count():
                    gc.freeze()  # every tracked object -> the permanent generation, counts reset
                    gc.unfreeze()  # ... -> the oldest generation
                gc.enable()

    return wrapper
