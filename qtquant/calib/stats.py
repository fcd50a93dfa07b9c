"""Streaming, mergeable per-tensor statistics.

Every calibration batch is reduced into a :class:`TensorStats` right away, so memory does not grow
with the number of batches.  Statistics merge exactly: reducing A then B gives bit-for-bit the same
histogram as reducing A∪B at once, in any batching, in one process or split over several.

Why the histogram is built this way:

* It is a signed histogram of ``x`` with ``2 * BINS`` equal bins over ``[-T, T)``, symmetric about
  zero, so folding it gives the histogram of ``|x|`` (what symmetric int8 observers need) and the
  signed one serves the asymmetric uint8 observers.  One histogram serves both schemes, so a cached
  calibration can switch scheme or observer without re-running the model.
* ``T`` is always a power of two strictly above the largest ``|x|`` seen.  Bin boundaries at ``T``
  are then exactly every other boundary at ``2T``, so when the range grows the old counts are
  re-binned by adding neighbour pairs, with no approximation (onnxruntime's HistogramCollector
  re-bins approximately).  ``T`` depends only on the data's absmax, hence the merge law.
* Scaling by ``BINS / T`` is a power of two, exact in float32 (short of underflow: a tiny negative
  below ``2**-149 * T / BINS`` becomes -0.0 and lands in the ``[0, w)`` bin), and the bin index is
  ``floor`` of it: one multiply, one floor and one ``bincount`` per value instead of
  ``np.histogram``'s several passes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

__all__ = ["TensorStats", "BINS", "MA_CONSTANT", "NonFiniteError"]

BINS = 2048  # bins per sign; T is at most 2*absmax, so at least 1024 bins cover [0, absmax]
_LOG2_BINS = 11
_EXP_MIN = -100  # T >= 2**-100 keeps BINS / T finite in float32
MA_CONSTANT = 0.01  # PyTorch MovingAverageMinMaxObserver's averaging constant
SUB_BLOCK = 64  # with stride > 1 the histogram takes every stride-th block of this many values


class NonFiniteError(ValueError):
    """A batch holds NaN or Inf (the engine turns it into a CalibrationDataError naming the source)."""


def _ma_push(state: tuple, values: np.ndarray, c: float = MA_CONSTANT) -> tuple:
    """Moving-average state ``(n, first, acc)``: the average is ``(1-c)**(n-1) * first + acc``.

    Keeping ``first`` apart from the decayed sum makes two states mergeable in order (see
    :func:`_ma_merge`), which a plain running average is not.
    """
    n, first, acc = state
    for v in values.tolist():
        if n == 0:
            n, first, acc = 1, float(v), 0.0
        else:
            n, acc = n + 1, acc * (1.0 - c) + c * float(v)
    return n, first, acc


def _ma_merge(a: tuple, b: tuple, c: float = MA_CONSTANT) -> tuple:
    """State after the samples of ``a`` followed by those of ``b``."""
    if a[0] == 0:
        return b
    if b[0] == 0:
        return a
    n2, first2, acc2 = b
    decay = (1.0 - c) ** n2
    return a[0] + n2, a[1], a[2] * decay + c * (1.0 - c) ** (n2 - 1) * first2 + acc2


def _ma_value(state: tuple, c: float = MA_CONSTANT) -> float:
    n, first, acc = state
    return (1.0 - c) ** (n - 1) * first + acc if n else float("nan")


def _subsample(per: np.ndarray, stride: int) -> np.ndarray:
    """Every ``stride``-th block of ``SUB_BLOCK`` values of each row (all values when stride is 1).

    Blocks rather than single values: copying contiguous runs costs a fraction of a strided
    gather, and a 64-value block is still a fine-grained systematic sample of the tensor.
    """
    if stride <= 1:
        return per.reshape(-1)
    rows, n = per.shape
    period = SUB_BLOCK * stride
    full = n // period
    tail = min(n - full * period, SUB_BLOCK)
    out = np.empty((rows, full * SUB_BLOCK + tail), dtype=per.dtype)
    out[:, :full * SUB_BLOCK].reshape(rows, full, SUB_BLOCK)[...] = \
        per[:, :full * period].reshape(rows, full, stride, SUB_BLOCK)[:, :, 0, :]
    out[:, full * SUB_BLOCK:] = per[:, full * period:full * period + tail]
    return out.reshape(-1)


def _rebin(hist: np.ndarray, shift: int) -> np.ndarray:
    """Counts at ``T`` re-binned to ``T * 2**shift`` (exact: bin ``k`` goes to ``floor(k / 2**shift)``)."""
    if shift <= 0:
        return hist
    k = np.arange(-BINS, BINS, dtype=np.int64) >> min(shift, 62)
    out = np.zeros(2 * BINS, dtype=np.int64)
    np.add.at(out, k + BINS, hist)
    return out


@dataclass(eq=False)  # holds arrays: compare fields explicitly
class TensorStats:
    """Statistics of one tensor over all calibration samples.

    ``hist`` holds int64 counts over :attr:`edges` (``2 * BINS`` bins, symmetric about zero);
    ``exp`` is ``log2(T)``, or None while only zeros were seen.  ``count`` is the number of values,
    ``samples`` the number of samples; ``ma_min`` / ``ma_max`` are moving-average states.  The
    histogram holds every ``stride``-th block of ``SUB_BLOCK`` values of each sample (all values
    when 1); min, max and count always cover every value.
    """

    min: float = math.inf
    max: float = -math.inf
    hist: np.ndarray | None = None
    exp: int | None = None
    count: int = 0
    samples: int = 0
    ma_min: tuple = (0, 0.0, 0.0)
    ma_max: tuple = (0, 0.0, 0.0)
    stride: int = 1  # the histogram holds every stride-th block of values of each sample
    _edges: np.ndarray | None = field(default=None, repr=False, compare=False)

    # -- views -------------------------------------------------------------------------------
    @property
    def absmax(self) -> float:
        if not (math.isfinite(self.min) and math.isfinite(self.max)):
            return 0.0  # nothing seen yet
        return max(abs(self.min), abs(self.max))

    @property
    def threshold(self) -> float:
        """``T``: the histogram covers ``[-T, T)``."""
        return 0.0 if self.exp is None else math.ldexp(1.0, self.exp)

    @property
    def bin_width(self) -> float:
        return self.threshold / BINS

    @property
    def edges(self) -> np.ndarray | None:
        if self.hist is None:
            return None
        if self._edges is None or len(self._edges) != 2 * BINS + 1 or self._edges[-1] != self.threshold:
            t = self.threshold or math.ldexp(1.0, _EXP_MIN)
            self._edges = np.arange(-BINS, BINS + 1, dtype=np.float64) * (t / BINS)
        return self._edges

    def abs_hist(self) -> tuple[np.ndarray, float]:
        """Histogram of ``|x|``: (``BINS`` counts over ``[0, T)``, bin width)."""
        h = self.hist if self.hist is not None else np.zeros(2 * BINS, dtype=np.int64)
        return h[BINS:] + h[BINS - 1::-1], self.bin_width

    def coarse(self, bins: int = 64) -> tuple[np.ndarray, np.ndarray]:
        """At most ``bins`` counts and their edges over the occupied range, for a histogram plot."""
        if self.hist is None or not self.hist.any():
            return np.zeros(0, np.int64), np.zeros(1)
        nz = np.flatnonzero(self.hist)
        a, b = int(nz[0]), int(nz[-1]) + 1
        group = -(-(b - a) // max(1, bins))
        b = a + group * (-(-(b - a) // group))
        h = np.zeros(b - a, np.int64)
        h[:min(b, 2 * BINS) - a] = self.hist[a:min(b, 2 * BINS)]
        k = np.arange(a, b + 1, group)
        return h.reshape(-1, group).sum(axis=1), (k - BINS) * self.bin_width

    def ma_range(self) -> tuple[float, float]:
        return _ma_value(self.ma_min), _ma_value(self.ma_max)

    # -- accumulation ------------------------------------------------------------------------
    def update(self, x: np.ndarray, samples: int = 1, *, stride: int = 1, reduced: tuple | None = None) -> None:
        """Fold one batch holding ``samples`` samples (the leading axis splits them) into the stats.

        The histogram takes every ``stride``-th block of ``SUB_BLOCK`` values of each flattened sample;
        min, max and count cover all values.  ``reduced = (min, max, count)`` of a one-sample batch
        comes precomputed (by onnxruntime).
        """
        x = np.asarray(x)
        per = x.reshape(samples, -1)
        if reduced is not None:
            # through float32, like the values: rounding is monotonic, so the max stays the max
            lo, hi, count = float(np.float32(reduced[0])), float(np.float32(reduced[1])), int(reduced[2])
            mins, maxs = np.array([lo]), np.array([hi])
        else:
            count = int(x.size)
            if count:
                mins, maxs = per.min(axis=1), per.max(axis=1)
                lo, hi = float(np.float32(mins.min())), float(np.float32(maxs.max()))
        sub = _subsample(per, stride)
        if count == 0:
            self.samples += samples
            return
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise NonFiniteError("NaN or Inf values")
        if sub.dtype != np.float32:
            sub = sub.astype(np.float32)
        counts = None
        absmax = max(-lo, hi)
        e = max(math.frexp(absmax)[1], _EXP_MIN) if absmax > 0 else None  # 2**e > absmax, strictly
        if e is not None:
            # floor(x * BINS / T) is exact: the scale is a power of two and |x| < T.
            t_exp = e if self.exp is None else max(e, self.exp)
            y = np.multiply(sub, np.float32(math.ldexp(1.0, _LOG2_BINS - t_exp)), dtype=np.float32)
            np.floor(y, out=y)
            y += BINS
            try:
                with np.errstate(invalid="raise"):  # NaN cannot become an index (onnxruntime's min/max skip it)
                    idx = y.astype(np.int16)
            except FloatingPointError:
                raise NonFiniteError("NaN values") from None
            counts = np.bincount(idx, minlength=2 * BINS)
        elif np.isnan(sub).any():  # an all-zero batch as far as min/max kernels that skip NaN can tell
            raise NonFiniteError("NaN values")
        # Only now that the batch is known good, change the state.
        self.ma_min = _ma_push(self.ma_min, mins)
        self.ma_max = _ma_push(self.ma_max, maxs)
        self.min, self.max = min(self.min, lo), max(self.max, hi)
        self.count += count
        self.samples += samples
        self.stride = stride
        if self.hist is None:
            self.hist = np.zeros(2 * BINS, dtype=np.int64)
        if e is not None:
            if self.exp is None:
                self.exp = e  # zeros seen so far sit in bin BINS at every T
            elif e > self.exp:
                self.hist = _rebin(self.hist, e - self.exp)
                self.exp = e
            self.hist += counts
        else:
            self.hist[BINS] += sub.size

    def merge(self, other: "TensorStats") -> "TensorStats":
        """Statistics of this tensor's samples followed by ``other``'s (a new object)."""
        if other.count == 0 and other.samples == 0:
            return replace(self, hist=None if self.hist is None else self.hist.copy(), _edges=None)
        if self.count == 0 and self.samples == 0:
            return replace(other, hist=None if other.hist is None else other.hist.copy(), _edges=None)
        exps = [e for e in (self.exp, other.exp) if e is not None]
        exp = max(exps) if exps else None
        hists = []
        for s in (self, other):
            if s.hist is not None:
                hists.append(_rebin(s.hist, (exp - s.exp) if (exp is not None and s.exp is not None) else 0))
        hist = sum(hists[1:], hists[0].copy()) if hists else None
        return TensorStats(min(self.min, other.min), max(self.max, other.max), hist, exp,
                           self.count + other.count, self.samples + other.samples,
                           _ma_merge(self.ma_min, other.ma_min), _ma_merge(self.ma_max, other.ma_max),
                           max(self.stride, other.stride))

    @classmethod
    def pooled(cls, stats: list["TensorStats"]) -> "TensorStats":
        """One histogram over all values of several tensors (the ``pooled`` domain policy)."""
        out = cls()
        for s in stats:
            out = out.merge(s)
        return out

    # -- plain-data form for the cache ---------------------------------------------------------
    def to_meta(self) -> dict:
        return {"min": self.min, "max": self.max, "exp": self.exp, "count": self.count,
                "stride": self.stride, "samples": self.samples, "ma_min": list(self.ma_min),
                "ma_max": list(self.ma_max)}

    @classmethod
    def from_meta(cls, meta: dict, hist: np.ndarray | None) -> "TensorStats":
        ma = lambda v: (int(v[0]), float(v[1]), float(v[2]))  # noqa: E731
        if hist is not None and hist.shape != (2 * BINS,):
            raise ValueError("histogram has the wrong number of bins")
        return cls(float(meta["min"]), float(meta["max"]),
                   None if hist is None else hist.astype(np.int64),
                   None if meta["exp"] is None else int(meta["exp"]), int(meta["count"]),
                   int(meta["samples"]), ma(meta["ma_min"]), ma(meta["ma_max"]),
                   int(meta["stride"]))
