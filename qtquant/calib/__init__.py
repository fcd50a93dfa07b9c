"""Calibration: data sources, observers and streaming, mergeable statistics."""

from .engine import CalibConfig, CalibrationResult, TensorStats, calibrate

__all__ = ["CalibConfig", "CalibrationResult", "TensorStats", "calibrate"]
