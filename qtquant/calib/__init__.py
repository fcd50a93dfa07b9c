"""Calibration: data sources, observers and streaming, mergeable statistics."""

from .engine import CalibConfig, CalibrationResult, TensorStats, calibrate
from .holdout import CalibConfigError
from .observers import OBSERVERS, observe

__all__ = ["CalibConfig", "CalibConfigError", "CalibrationResult", "TensorStats", "calibrate", "OBSERVERS",
           "observe", "load_cached", "save_cache", "calibrate_cached"]


def __getattr__(name):  # the cache pulls in more; load it on first use
    if name in ("load_cached", "save_cache", "calibrate_cached"):
        from . import cache

        return getattr(cache, name)
    raise AttributeError(name)
