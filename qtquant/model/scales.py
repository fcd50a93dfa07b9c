"""Quantization schemes and the arithmetic of scales (DESIGN §3)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..base.vocab import Scheme

__all__ = ["Scheme", "QParams", "qrange", "qparams_for_range", "bits_lost", "SCALE_RTOL", "scales_differ"]

SCALE_RTOL = 1e-6  # relative difference above which two scales count as different
_TINY = 1e-12


# numpy's integer type for each (scheme, bits): what the export stores values and zero points in
_DTYPES = {(Scheme.SYMMETRIC_INT8, 8): np.int8, (Scheme.ASYMMETRIC_UINT8, 8): np.uint8,
           (Scheme.SYMMETRIC_INT8, 16): np.int16, (Scheme.ASYMMETRIC_UINT8, 16): np.uint16}


def qrange(scheme: Scheme, bits: int = 8) -> tuple[int, int]:
    """(qmin, qmax) of ``bits``-wide integers: signed for the symmetric scheme, unsigned else.
    The one place the integer grid is spelled; 8 bits is the default, 16 is mixed precision's int16."""
    if bits == 8:  # asked twice per QParams made (10,000s for a big graph): no hashing of the enum
        if scheme is Scheme.SYMMETRIC_INT8:
            return -128, 127
        if scheme is Scheme.ASYMMETRIC_UINT8:
            return 0, 255
    if (scheme, bits) not in _DTYPES:
        raise ValueError(f"no {bits}-bit integers for {scheme.value}")
    if scheme is Scheme.SYMMETRIC_INT8:
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return 0, (1 << bits) - 1


@dataclass(frozen=True)
class QParams:
    """A scale and zero point on a ``bits``-wide grid (8: int8/uint8; 16: the int16/uint16 of a
    tensor set to int16, over the same range as its domain's int8 parameters, 256x finer steps)."""

    scale: float
    zero_point: int
    scheme: Scheme
    bits: int = 8

    def __post_init__(self) -> None:
        if not (self.scale > 0 and math.isfinite(self.scale)):
            raise ValueError(f"scale must be positive and finite, got {self.scale}")
        qrange(self.scheme, self.bits)  # refuses a width with no integer type

    @property
    def qmin(self) -> int:
        return qrange(self.scheme, self.bits)[0]

    @property
    def qmax(self) -> int:
        return qrange(self.scheme, self.bits)[1]

    @property
    def dtype(self) -> type:
        """The numpy integer type of the quantized values and the zero point."""
        return _DTYPES[(self.scheme, self.bits)]

    @property
    def lo(self) -> float:
        return (self.qmin - self.zero_point) * self.scale

    @property
    def hi(self) -> float:
        return (self.qmax - self.zero_point) * self.scale


_new = object.__new__
_isfinite = math.isfinite
_GRID8 = {s: qrange(s) for s in Scheme}  # qrange's 8-bit grids, read without a call
_SYM, _ASYM = Scheme.SYMMETRIC_INT8, Scheme.ASYMMETRIC_UINT8


def qparams_for_range(lo: float, hi: float, scheme: Scheme = Scheme.SYMMETRIC_INT8, bits: int = 8) -> QParams:
    """The parameters covering [lo, hi] on a ``bits``-wide grid (symmetric: absmax / qmax with zero
    point 0; asymmetric: the range, widened to hold 0, over all the steps).

    A big graph asks this once per domain (10,000s), so the already-valid result is made without
    the frozen dataclass's checked construction (and without further calls): finite bounds and a
    floor of _TINY make the scale positive, and finite but for an asymmetric range wider than a
    float holds, which the checked constructor refuses."""
    lo, hi = float(lo), float(hi)
    if not (_isfinite(lo) and _isfinite(hi)):
        raise ValueError(f"range [{lo}, {hi}] is not finite")
    if bits != 8:
        qmin, qmax = qrange(scheme, bits)
    elif scheme is _SYM:  # _GRID8[scheme] spelt out: an Enum's __hash__ is a Python call
        qmin, qmax = -128, 127
    elif scheme is _ASYM:
        qmin, qmax = 0, 255
    else:
        qmin, qmax = _GRID8[scheme]
    if scheme is _SYM:
        absmax, x = abs(lo), abs(hi)  # max(|lo|, |hi|, _TINY), see bits_lost
        absmax = x if x > absmax else absmax
        scale, zp = (_TINY if _TINY > absmax else absmax) / float(qmax), 0
    else:
        lo, hi = min(lo, 0.0), max(hi, 0.0)  # zero must be exactly representable
        scale = max(hi - lo, _TINY) / float(qmax - qmin)
        if not _isfinite(scale):
            return QParams(scale, 0, scheme, bits)  # raises
        zp = max(qmin, min(qmax, int(round(-lo / scale))))
    q = _new(QParams)
    d = q.__dict__
    d["scale"] = scale
    d["zero_point"] = zp
    d["scheme"] = scheme
    d["bits"] = bits
    return q


def range_width(lo: float, hi: float, scheme: Scheme) -> float:
    if scheme is Scheme.SYMMETRIC_INT8:
        return max(abs(lo), abs(hi))
    return max(hi, 0.0) - min(lo, 0.0)


def bits_lost(member_range: tuple[float, float], domain_range: tuple[float, float],
              scheme: Scheme = Scheme.SYMMETRIC_INT8) -> float:
    """log2(absmax(D) / absmax(t)): resolution a member gives up by sharing the domain's scale."""
    # Asked for every Concat member: range_width spelt out, and max(x, y) as ``y if y > x else x``
    # (what the builtin returns, without its argument parsing, which costs more than the maths).
    if scheme is Scheme.SYMMETRIC_INT8:
        m, x = abs(member_range[0]), abs(member_range[1])
        m = x if x > m else m
        d, x = abs(domain_range[0]), abs(domain_range[1])
        d = x if x > d else d
    else:
        m = range_width(*member_range, scheme)
        d = range_width(*domain_range, scheme)
    if m <= _TINY:
        return 0.0 if d <= _TINY else float("inf")
    lost = math.log2((_TINY if _TINY > d else d) / m)
    return lost if lost > 0.0 else 0.0


def scales_differ(a: float, b: float) -> bool:
    x, y = abs(a), abs(b)
    return abs(a - b) > SCALE_RTOL * (y if y > x else x)  # max(|a|, |b|), see bits_lost
