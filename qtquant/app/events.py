"""The session's typed events: one psygnal signal per kind of change.

A widget connects to the kinds it shows (``session.events.groups.connect(...)``), so an edit
refreshes only the views it concerns.  psygnal has no Qt in it; the GUI hops onto its own
thread where it needs to.
"""

from __future__ import annotations

from psygnal import Signal, SignalGroup

__all__ = ["SessionEvents", "KINDS"]


class SessionEvents(SignalGroup):
    calibrated = Signal()  # new statistics (or the same ones re-derived): every analysis changed
    options = Signal(dict)  # the fields that changed, with their new values
    groups = Signal()  # the user's groups changed (one edit: one emission)
    perf = Signal(object)  # the new perf Result
    fidelity = Signal(object)  # the new fidelity Result
    precision = Signal(object)  # the new PrecisionMap (after the "options" event that carries it too)
    accuracy = Signal(object)  # the new accuracy-debugger Result (qtquant.accuracy.AccuracyReport)
    compiler_log = Signal(object)  # a compile log placed on the graph (qtquant.horizon.match.LogMatch) or None


KINDS = ("calibrated", "options", "groups", "perf", "fidelity", "precision", "accuracy", "compiler_log")
