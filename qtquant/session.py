"""Moved to :mod:`qtquant.app.session`; this name stays until every import uses ``qtquant.app``."""

from .app.events import SessionEvents as Events  # gui/exporting.py's snapshot_session, until it takes a Snapshot
from .app.session import Derived, Options, Result, Session, derive

__all__ = ["Options", "Session", "Result", "Derived", "derive", "Events"]
