"""The application layer: everything the GUI needs that is not a widget, without Qt.

A :class:`Session` holds the graph, options, calibration, groups and every derived result
with its revision, and emits typed events (:class:`SessionEvents`).  Every edit is a command
on one :class:`CommandStack`.  Background work reads a frozen :class:`Snapshot`.  View-models
(:mod:`qtquant.app.views`) and the scene layout (:mod:`qtquant.app.scene`) are computed here
too, so all of it runs and is tested headless.  This package imports neither ``qtquant.gui``
nor ``qtquant.cli``.
"""

from .commands import CommandStack
from .events import SessionEvents
from .loader import open_model
from .options import Options
from .session import Result, Session
from .snapshot import Snapshot

__all__ = ["Session", "Options", "SessionEvents", "CommandStack", "Snapshot", "Result", "open_model"]
