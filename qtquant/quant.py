"""Quantization schemes and the arithmetic of scales (DESIGN §3)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .vocab import Scheme

__all__ = ["Scheme", "QParams", "qparams_for_range", "bits_lost", "SCALE_RTOL", "scales_differ"]

SCALE_RTOL = 1e-6  # relative difference above which two scales count as different
_TINY = 1e-12


@dataclass(frozen=True)
class QParams:
    scale: float
    zero_point: int
    scheme: Scheme

    def __post_init__(self):
        if not (self.scale > 0 and math.isfinite(self.scale)):
            raise ValueError(f"scale must be positive and finite, got {self.scale}")

    @property
    def qmin(self) -> int:
        return -128 if self.scheme is Scheme.SYMMETRIC_INT8 else 0

    @property
    def qmax(self) -> int:
        return 127 if self.scheme is Scheme.SYMMETRIC_INT8 else 255

    @property
    def lo(self) -> float:
        return (self.qmin - self.zero_point) * self.scale

    @property
    def hi(self) -> float:
        return (self.qmax - self.zero_point) * self.scale


def qparams_for_range(lo: float, hi: float, scheme: Scheme = Scheme.SYMMETRIC_INT8) -> QParams:
    lo, hi = float(lo), float(hi)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(f"range [{lo}, {hi}] is not finite")
    if scheme is Scheme.SYMMETRIC_INT8:
        absmax = max(abs(lo), abs(hi), _TINY)
        return QParams(absmax / 127.0, 0, scheme)
    lo, hi = min(lo, 0.0), max(hi, 0.0)  # zero must be exactly representable
    scale = max(hi - lo, _TINY) / 255.0
    zp = int(round(-lo / scale))
    return QParams(scale, max(0, min(255, zp)), scheme)


def range_width(lo: float, hi: float, scheme: Scheme) -> float:
    if scheme is Scheme.SYMMETRIC_INT8:
        return max(abs(lo), abs(hi))
    return max(hi, 0.0) - min(lo, 0.0)


def bits_lost(member_range: tuple[float, float], domain_range: tuple[float, float],
              scheme: Scheme = Scheme.SYMMETRIC_INT8) -> float:
    """log2(absmax(D) / absmax(t)): resolution a member gives up by sharing the domain's scale."""
    m = range_width(*member_range, scheme)
    d = range_width(*domain_range, scheme)
    if m <= _TINY:
        return 0.0 if d <= _TINY else float("inf")
    return max(0.0, math.log2(max(d, _TINY) / m))


def scales_differ(a: float, b: float) -> bool:
    return abs(a - b) > SCALE_RTOL * max(abs(a), abs(b))
