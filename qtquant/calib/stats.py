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

Why the counts are stored compactly (20,000 tensors' dense int64 histograms were 658 MB):

* Only the occupied window of bins is kept (``counts`` from bin ``lo`` on), in the narrowest
  unsigned type that holds the histogram's total (a bin never exceeds it): uint8, uint16, uint32.
  The dense :attr:`TensorStats.hist` is rebuilt on demand, bit for bit.
* The number of bins per sign (``bins``) is a power of two chosen by the configuration: the MinMax
  observers read only min and max, so their histogram (plots, the ``pooled`` policy) has
  :data:`MINMAX_BINS`.  Fewer bins at the same ``T`` are exactly neighbour groups of more bins, so
  merging statistics with different ``bins`` coarsens to the smaller one with no approximation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

__all__ = ["TensorStats", "BINS", "MINMAX_BINS", "MA_CONSTANT", "NonFiniteError", "count_dtype", "update_rows"]

BINS = 2048  # bins per sign; T is at most 2*absmax, so at least 1024 bins cover [0, absmax]
MINMAX_BINS = 256  # bins per sign of the MinMax observers' histogram (plots and pooled ranges only)
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



# (dtype, its max), narrowest first: made once, since count_dtype runs per tensor and sample
# (20,000-node CNN: 62,000 calls, where building the three np.iinfo each time cost 0.13 s).
_COUNT_TYPES = tuple((np.dtype(t), int(np.iinfo(t).max)) for t in (np.uint8, np.uint16, np.uint32))
_U64 = np.dtype(np.uint64)


def count_dtype(total: int) -> np.dtype:
    """The narrowest unsigned type holding ``total`` (every bin of a histogram is at most its total)."""
    for t, top in _COUNT_TYPES:
        if total <= top:
            return t
    return _U64


def _log2(bins: int) -> int:
    k = int(bins).bit_length() - 1
    if bins < 2 or bins != 1 << k or bins > 8192:  # int16 bin indices: 2 * bins must fit
        raise ValueError(f"histogram bins per sign must be a power of two from 2 to 8192, got {bins!r}")
    return k


def _rebin(counts: np.ndarray, lo: int, bins: int, shift: int, new_bins: int) -> tuple[np.ndarray, int]:
    """Window ``counts`` (bins ``lo``.. of ``2 * bins``) re-binned ``shift`` steps coarser onto
    ``2 * new_bins`` bins: signed bin ``k`` goes to ``k >> shift``, exactly (neighbour groups add)."""
    if shift <= 0 or not len(counts):
        return counts, lo
    k = (np.arange(lo, lo + len(counts), dtype=np.int64) - bins) >> min(shift, 62)
    starts = np.flatnonzero(np.diff(k, prepend=k[0] - 1))
    # A group's sum is at most the total, so it fits the dtype.
    return np.add.reduceat(counts, starts, dtype=counts.dtype), int(k[0]) + new_bins


def _add_window(acc: np.ndarray | None, lo: int, c: np.ndarray, a: int, total: int) -> tuple[np.ndarray, int]:
    """Window ``acc`` (from bin ``lo``) plus window ``c`` (from bin ``a``); ``total`` is the sum."""
    dt = count_dtype(total)
    if acc is None or not len(acc):
        return c.astype(dt, copy=True), a
    start, end = min(lo, a), max(lo + len(acc), a + len(c))
    if start == lo and end == lo + len(acc) and acc.dtype == dt:
        out = acc  # in place: the common case once the range is known
    else:
        out = np.zeros(end - start, dt)
        out[lo - start:lo - start + len(acc)] = acc
    seg = out[a - start:a - start + len(c)]
    np.add(seg, c.astype(dt, copy=False), out=seg)
    return out, start


@dataclass(eq=False, slots=True)  # holds arrays: compare fields explicitly; slots: 20,000 of them
class TensorStats:
    """Statistics of one tensor over all calibration samples.

    :attr:`hist` gives the counts over :attr:`edges` (``2 * bins`` bins, symmetric about zero),
    kept as the occupied window ``counts`` starting at bin ``lo``; ``exp`` is ``log2(T)``, or None
    while only zeros were seen.  ``count`` is the number of values, ``samples`` the number of
    samples; ``ma_min`` / ``ma_max`` are moving-average states.  The histogram holds every
    ``stride``-th block of ``SUB_BLOCK`` values of each sample (all values when 1); min, max and
    count always cover every value.
    """

    min: float = math.inf
    max: float = -math.inf
    counts: np.ndarray | None = None  # None: no values seen (not even zeros)
    exp: int | None = None
    count: int = 0
    samples: int = 0
    ma_min: tuple = (0, 0.0, 0.0)
    ma_max: tuple = (0, 0.0, 0.0)
    stride: int = 1  # the histogram holds every stride-th block of values of each sample
    bins: int = BINS  # bins per sign
    lo: int = 0  # the bin index of counts[0]
    total: int = field(default=0, repr=False)  # sum of counts

    def __post_init__(self):
        _log2(self.bins)

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
        return self.threshold / self.bins

    @property
    def hist(self) -> np.ndarray | None:
        """The dense int64 counts over :attr:`edges` (made on each call: keep it if you reuse it)."""
        return None if self.counts is None else self.dense_counts()

    def dense_counts(self) -> np.ndarray:
        """:attr:`hist`, all zeros where nothing was counted."""
        out = np.zeros(2 * self.bins, dtype=np.int64)
        if self.counts is not None:
            out[self.lo:self.lo + len(self.counts)] = self.counts
        return out

    @property
    def nbytes(self) -> int:
        """Bytes held by the histogram."""
        return 0 if self.counts is None else int(self.counts.nbytes)

    @property
    def edges(self) -> np.ndarray | None:
        if self.counts is None:
            return None
        t = self.threshold or math.ldexp(1.0, _EXP_MIN)
        return np.arange(-self.bins, self.bins + 1, dtype=np.float64) * (t / self.bins)

    def abs_hist(self) -> tuple[np.ndarray, float]:
        """Histogram of ``|x|``: (``bins`` counts over ``[0, T)``, bin width)."""
        h = self.dense_counts()
        return h[self.bins:] + h[self.bins - 1::-1], self.bin_width

    def coarse(self, bins: int = 64) -> tuple[np.ndarray, np.ndarray]:
        """At most ``bins`` counts and their edges over the occupied range, for a histogram plot."""
        if self.counts is None or not self.total:
            return np.zeros(0, np.int64), np.zeros(1)
        hist, nb = self.dense_counts(), 2 * self.bins
        nz = np.flatnonzero(hist)
        a, b = int(nz[0]), int(nz[-1]) + 1
        group = -(-(b - a) // max(1, bins))
        b = a + group * (-(-(b - a) // group))
        h = np.zeros(b - a, np.int64)
        h[:min(b, nb) - a] = hist[a:min(b, nb)]
        k = np.arange(a, b + 1, group)
        return h.reshape(-1, group).sum(axis=1), (k - self.bins) * self.bin_width

    def ma_range(self) -> tuple[float, float]:
        return _ma_value(self.ma_min), _ma_value(self.ma_max)

    def copy(self) -> "TensorStats":
        return TensorStats(self.min, self.max, None if self.counts is None else self.counts.copy(), self.exp,
                           self.count, self.samples, self.ma_min, self.ma_max, self.stride, self.bins, self.lo,
                           self.total)

    # -- accumulation ------------------------------------------------------------------------
    def update(self, x: np.ndarray, samples: int = 1, *, stride: int = 1) -> None:
        """Fold one batch holding ``samples`` samples (the leading axis splits them) into the stats.

        The histogram takes every ``stride``-th block of ``SUB_BLOCK`` values of each flattened sample;
        min, max and count cover all values.
        """
        x = np.asarray(x)
        per = x.reshape(samples, -1)
        count = int(x.size)
        if count:
            # numpy's min/max propagate NaN, so the finiteness check below sees any NaN in the batch
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
        bins = self.bins
        counts, first = None, bins
        absmax = max(-lo, hi)
        e = max(math.frexp(absmax)[1], _EXP_MIN) if absmax > 0 else None  # 2**e > absmax, strictly
        if e is not None:
            # floor(x * bins / T) is exact: the scale is a power of two and |x| < T.  The batch's
            # window of bins runs from the bin of its min to that of its max (the same scaling).
            t_exp = e if self.exp is None else max(e, self.exp)
            scale = math.ldexp(1.0, _log2(bins) - t_exp)
            first = math.floor(lo * scale) + bins
            width = math.floor(hi * scale) + bins + 1 - first
            y = np.multiply(sub, np.float32(scale), dtype=np.float32)
            np.floor(y, out=y)
            y += bins - first
            counts = np.bincount(y.astype(np.int16), minlength=width)
        self._fold(lo, hi, count, samples, stride, mins, maxs, counts, first, e, int(sub.size))

    def _fold(self, lo, hi, count, samples, stride, mins, maxs, counts, first, e, n_sub) -> None:
        """Fold a checked batch into the state (:meth:`update` and :func:`update_rows`)."""
        bins = self.bins
        self.ma_min = _ma_push(self.ma_min, mins)
        self.ma_max = _ma_push(self.ma_max, maxs)
        self.min, self.max = min(self.min, lo), max(self.max, hi)
        self.count += count
        self.samples += samples
        self.stride = stride
        if counts is None:  # zeros only: bin `bins` at every T
            counts = np.array([n_sub], dtype=np.int64)
        elif self.counts is not None and self.exp is not None and e > self.exp:
            self.counts, self.lo = _rebin(self.counts, self.lo, bins, e - self.exp, bins)
        if e is not None and (self.exp is None or e > self.exp):
            self.exp = e
        self.total += n_sub
        self.counts, self.lo = _add_window(self.counts, self.lo, counts, first, self.total)

    def merge(self, other: "TensorStats") -> "TensorStats":
        """Statistics of this tensor's samples followed by ``other``'s (a new object).  Different
        ``bins`` merge onto the smaller number (exact)."""
        if other.count == 0 and other.samples == 0:
            return self.copy()
        if self.count == 0 and self.samples == 0:
            return other.copy()
        exps = [e for e in (self.exp, other.exp) if e is not None]
        exp = max(exps) if exps else None
        bins = min(self.bins, other.bins)
        counts, lo, total = None, 0, 0
        for s in (self, other):
            if s.counts is None:
                continue
            shift = ((exp - s.exp) if (exp is not None and s.exp is not None) else 0) + _log2(s.bins) - _log2(bins)
            c, a = _rebin(s.counts, s.lo, s.bins, shift, bins)
            total += s.total
            counts, lo = _add_window(counts, lo, c, a, total)  # the first call copies
        return TensorStats(min(self.min, other.min), max(self.max, other.max), counts, exp,
                           self.count + other.count, self.samples + other.samples,
                           _ma_merge(self.ma_min, other.ma_min), _ma_merge(self.ma_max, other.ma_max),
                           max(self.stride, other.stride), bins, lo, total)

    @classmethod
    def pooled(cls, stats: list["TensorStats"]) -> "TensorStats":
        """One histogram over all values of several tensors (the ``pooled`` domain policy)."""
        out = cls(bins=min((s.bins for s in stats), default=BINS))
        for s in stats:
            out = out.merge(s)
        return out

    # -- plain-data form for files -------------------------------------------------------------
    def to_meta(self) -> dict:
        return {"min": self.min, "max": self.max, "exp": self.exp, "count": self.count,
                "stride": self.stride, "samples": self.samples, "ma_min": list(self.ma_min),
                "ma_max": list(self.ma_max), "bins": self.bins, "lo": self.lo}

    @classmethod
    def from_meta(cls, meta: dict, counts: np.ndarray | None) -> "TensorStats":
        """Statistics from :meth:`to_meta` and the ``counts`` window; a window that does not fit
        its ``bins`` raises ValueError."""
        ma = lambda v: (int(v[0]), float(v[1]), float(v[2]))  # noqa: E731
        bins, lo = int(meta.get("bins", BINS)), int(meta.get("lo", 0))
        total = 0
        if counts is not None:
            if counts.ndim != 1 or counts.dtype.kind not in "ui" or lo < 0 or lo + len(counts) > 2 * bins:
                raise ValueError("histogram window does not fit its bins")
            if counts.dtype.kind == "i" and len(counts) and int(counts.min()) < 0:
                raise ValueError("negative histogram counts")
            total = int(counts.sum(dtype=np.uint64))
            counts = counts.astype(count_dtype(total), copy=False)
        return cls(float(meta["min"]), float(meta["max"]), counts,
                   None if meta["exp"] is None else int(meta["exp"]), int(meta["count"]),
                   int(meta["samples"]), ma(meta["ma_min"]), ma(meta["ma_max"]),
                   int(meta["stride"]), bins, lo, total)


_ROWS_CELLS = 1 << 22  # bincount cells per chunk of rows in update_rows (32 MB of int64)


def update_rows(stats: list[TensorStats], values: np.ndarray, stride: int = 1) -> list[int]:
    """``stats[k].update(values[k], stride=stride)`` for every row (one sample of each of many
    tensors of one size, float32), computed for all rows at once; the state each ends in is
    bit for bit the one :meth:`TensorStats.update` gives.

    A 20,000-node CNN with 8x8x8 activations has 15,000 such tensors: one update each was some
    60 us of numpy calls per tensor and sample, mostly call overhead, and calibration waited on
    it.  Rows this does not handle (all zeros, NaN or Inf) are left untouched and their indices
    returned, for :meth:`TensorStats.update` to handle (and to raise for) one by one.
    """
    values = np.asarray(values, dtype=np.float32)
    k_rows = values.shape[0]
    if not k_rows:
        return []
    per = values.reshape(k_rows, -1)
    mins, maxs = per.min(axis=1), per.max(axis=1)
    absmax = np.maximum(-mins, maxs)
    ok = np.isfinite(mins) & np.isfinite(maxs) & (absmax > 0)
    rows = np.flatnonzero(ok)
    left = np.flatnonzero(~ok).tolist()
    if not len(rows):
        return left
    by_bins: dict[int, list[int]] = {}
    for r in rows.tolist():
        by_bins.setdefault(stats[r].bins, []).append(r)
    sub_all = _subsample(per, stride).reshape(k_rows, -1)
    for bins, group in by_bins.items():
        log2b = _log2(bins)
        step = max(1, _ROWS_CELLS // (2 * bins))
        for a in range(0, len(group), step):
            idx_rows = np.asarray(group[a:a + step])
            lo64 = mins[idx_rows].astype(np.float64)
            hi64 = maxs[idx_rows].astype(np.float64)
            e = np.maximum(np.frexp(absmax[idx_rows].astype(np.float64))[1], _EXP_MIN)
            cur = np.array([stats[r].exp if stats[r].exp is not None else -(1 << 30) for r in idx_rows.tolist()])
            t_exp = np.maximum(e, cur)
            scale = np.ldexp(1.0, log2b - t_exp)  # float64, a power of two
            first = np.floor(lo64 * scale).astype(np.int64) + bins
            width = np.floor(hi64 * scale).astype(np.int64) + bins + 1 - first
            y = np.multiply(sub_all[idx_rows], scale.astype(np.float32)[:, None], dtype=np.float32)
            np.floor(y, out=y)
            y += (bins - first).astype(np.float32)[:, None]
            idx = y.astype(np.int64)
            low = idx.min(axis=1)
            high = idx.max(axis=1)
            # A negative index only comes from a min that was not the values' min: not here, but
            # should it, the row goes the one-by-one way.
            good = low >= 0
            cells = 2 * bins
            flat = (idx + (np.arange(len(idx_rows), dtype=np.int64) * cells)[:, None]).ravel()
            counts = np.bincount(flat[np.repeat(good, idx.shape[1])], minlength=len(idx_rows) * cells)
            counts = counts.reshape(len(idx_rows), cells)
            n_sub = int(sub_all.shape[1])
            for j, r in enumerate(idx_rows.tolist()):
                if not good[j]:
                    left.append(r)
                    continue
                w = max(int(width[j]), int(high[j]) + 1)  # as bincount's minlength
                s = stats[r]
                s._fold(float(lo64[j]), float(hi64[j]), per.shape[1], 1, stride, mins[r:r + 1], maxs[r:r + 1],
                        counts[j, :w], int(first[j]), int(e[j]), n_sub)
    return sorted(left)
