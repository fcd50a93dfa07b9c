"""Moved to :mod:`qtquant.app.loader`; this name stays until every import uses ``qtquant.app``."""

from .app.loader import open_model

__all__ = ["open_model"]
