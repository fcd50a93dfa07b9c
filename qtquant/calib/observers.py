"""Range observers: turn a tensor's :class:`~qtquant.calib.stats.TensorStats` into a range.

Every observer works for both activation schemes:

* ``sym`` (int8, zero point 0): the observer picks a threshold ``t`` on ``|x|``; the range returned
  is ``[min, max]`` clipped to ``[-t, t]``, so its absmax is ``t`` and the sign information stays.
* ``asym`` (uint8 with zero point): the observer picks ``[lo, hi]`` on the signed values.

The observers read only the statistics, never the raw data, so switching observer or scheme on a
finished (or cached) calibration costs no model run.
"""

from __future__ import annotations

import math

import numpy as np

from ..base.vocab import DEFAULT_OBSERVER, DEFAULT_PERCENTILE, OBSERVERS, SCHEME_NAMES, Observer
from .stats import TensorStats

__all__ = ["OBSERVERS", "SCHEMES", "observe", "abs_percentile", "signed_quantile", "mse_threshold",
           "mse_range_asym", "kl_threshold"]

SCHEMES = SCHEME_NAMES
_KL_LEVELS = 128  # int8 magnitude levels (TensorRT / pytorch-quantization "entropy")
_MSE_CANDIDATES = 256  # per side for the asymmetric (lo, hi) search


def observe(stats: TensorStats, observer: str = DEFAULT_OBSERVER, scheme: str = "sym",
            percentile: float = DEFAULT_PERCENTILE) -> tuple[float, float] | None:
    """The range ``observer`` picks for one tensor; None when the tensor held no values."""
    if stats.count == 0:
        return None
    if observer == Observer.MINMAX:
        return float(stats.min), float(stats.max)
    if observer == Observer.MA_MINMAX:
        lo, hi = stats.ma_range()
        return float(lo), float(hi)
    sym = scheme == "sym"
    if observer == Observer.PERCENTILE:
        if sym:
            return _clip_sym(stats, abs_percentile(stats, percentile))
        cut = (100.0 - percentile) / 200.0
        return _clip(stats, signed_quantile(stats, cut), signed_quantile(stats, 1.0 - cut))
    if observer == Observer.MSE:
        return _clip_sym(stats, mse_threshold(stats)) if sym else _clip(stats, *mse_range_asym(stats))
    if observer == Observer.KL:
        # TensorRT's entropy calibration is defined on |x|; for asym the threshold clips both sides.
        return _clip_sym(stats, kl_threshold(stats))
    raise ValueError(f"unknown observer {observer!r}")


def _clip(stats, lo, hi):
    lo, hi = max(float(lo), stats.min), min(float(hi), stats.max)
    return (lo, hi) if lo <= hi else (stats.min, stats.max)


def _clip_sym(stats, t):
    return _clip(stats, -t, t)


def _quantile(counts: np.ndarray, start: float, width: float, q: float) -> float:
    """Value below which a fraction ``q`` of the counts lies, linear inside the bin."""
    cum = np.cumsum(counts)
    total = int(cum[-1]) if len(cum) else 0
    if total == 0:
        return start
    target = min(max(q, 0.0), 1.0) * total
    i = min(int(np.searchsorted(cum, target, side="left")), len(counts) - 1)
    prev = int(cum[i - 1]) if i else 0
    frac = (target - prev) / counts[i] if counts[i] else 1.0
    return start + (i + min(max(frac, 0.0), 1.0)) * width


def abs_percentile(stats: TensorStats, percentile: float) -> float:
    h, w = stats.abs_hist()
    return min(_quantile(h, 0.0, w, percentile / 100.0), stats.absmax)


def signed_quantile(stats: TensorStats, q: float) -> float:
    return _quantile(stats.dense_counts(), -stats.threshold, stats.bin_width, q)


def _prefix(h: np.ndarray, centers: np.ndarray):
    z = np.zeros(1)
    hf = h.astype(np.float64)
    return (np.concatenate([z, np.cumsum(hf)]), np.concatenate([z, np.cumsum(hf * centers)]),
            np.concatenate([z, np.cumsum(hf * centers * centers)]))


def mse_threshold(stats: TensorStats) -> float:
    """Symmetric int8 threshold minimising the expected quantization MSE over the |x| histogram.

    Error model per bin (center ``c``, step ``d = t/127``): clipped values cost ``(c - t)^2``;
    values that round to zero cost ``c^2``; the rest cost the uniform rounding noise ``d^2/12``.
    Candidates are every bin edge up to the absmax, found in one vectorised pass with prefix sums.
    """
    h, w = stats.abs_hist()
    nz = np.flatnonzero(h)
    if not len(nz) or stats.absmax <= 0:
        return stats.absmax
    n = int(nz[-1]) + 1
    h = h[:n]
    c = (np.arange(n) + 0.5) * w
    p0, p1, p2 = _prefix(h, c)
    j = np.arange(n)
    t = (j + 1) * w
    t[-1] = stats.absmax  # the last bin's values all lie below absmax
    d = t / 127.0
    out = (p2[n] - p2[j + 1]) - 2 * t * (p1[n] - p1[j + 1]) + t * t * (p0[n] - p0[j + 1])
    m = np.clip(np.ceil(d / (2 * w) - 0.5), 0, j + 1).astype(np.int64)
    err = out + p2[m] + (p0[j + 1] - p0[m]) * d * d / 12.0
    return float(t[int(np.argmin(err))])


def _pick(idx: np.ndarray, k: int) -> np.ndarray:
    if len(idx) <= k:
        return idx
    return idx[np.unique(np.linspace(0, len(idx) - 1, k).round().astype(np.int64))]


def mse_range_asym(stats: TensorStats) -> tuple[float, float]:
    """Asymmetric uint8 ``[lo, hi]`` (``lo <= 0 <= hi``) minimising the expected quantization MSE.

    Same error model as :func:`mse_threshold`, step ``(hi - lo)/255``; a joint search over up to
    256 x 256 candidate pairs on bin edges, evaluated as one broadcast array expression.
    """
    h = stats.hist
    w = stats.bin_width
    BINS = stats.bins  # bins per sign, as in the formulas
    if h is None or stats.absmax <= 0:
        return stats.min, stats.max
    nzi = np.flatnonzero(h)
    a, b = int(nzi[0]), int(nzi[-1]) + 1  # occupied bins [a, b)
    nb = 2 * BINS
    c = (np.arange(nb) - BINS + 0.5) * w
    p0, p1, p2 = _prefix(h, c)
    # hi candidates: bin edges k (bins >= k lie above hi); the last one is the max itself.
    if stats.max > 0:
        khi = _pick(np.arange(BINS + 1, b + 1), _MSE_CANDIDATES)
        hi = (khi - BINS) * w
        hi[khi == b] = stats.max
    else:
        khi, hi = np.array([b]), np.array([0.0])
    if stats.min < 0:
        klo = _pick(np.arange(a, BINS), _MSE_CANDIDATES)
        lo = (klo - BINS) * w
        lo[klo == a] = stats.min
    else:
        klo, lo = np.array([a]), np.array([0.0])
    right = (p2[nb] - p2[khi]) - 2 * hi * (p1[nb] - p1[khi]) + hi * hi * (p0[nb] - p0[khi])
    left = p2[klo] - 2 * lo * p1[klo] + lo * lo * p0[klo]
    d = (hi[None, :] - lo[:, None]) / 255.0
    m = np.maximum(np.ceil(d / (2 * w) - 0.5), 0).astype(np.int64)
    mp = np.minimum(m, (khi - BINS)[None, :])
    mn = np.minimum(m, (BINS - klo)[:, None])
    small_s = (p2[BINS + mp] - p2[BINS]) + (p2[BINS] - p2[BINS - mn])
    small_n = (p0[BINS + mp] - p0[BINS]) + (p0[BINS] - p0[BINS - mn])
    inside = p0[khi][None, :] - p0[klo][:, None]
    err = right[None, :] + left[:, None] + small_s + (inside - small_n) * d * d / 12.0
    i, j = np.unravel_index(int(np.argmin(err)), err.shape)
    return float(lo[i]), float(hi[j])


def kl_threshold(stats: TensorStats, levels: int = _KL_LEVELS) -> float:
    """TensorRT-style entropy threshold (as in NVIDIA pytorch-quantization's ``_compute_amax_entropy``).

    For each candidate bin count ``i`` (``levels`` .. occupied bins), the reference ``p`` is the
    |x| histogram cut at ``i`` with the outliers added to its last bin, the candidate ``q`` merges
    ``p`` into ``levels`` quantized bins spread back over their non-empty bins, and the threshold
    with the smallest KL(p||q) wins (the last one on ties).  Where the reference loops per
    candidate, this evaluates every candidate at once from prefix sums:
    ``sum_{j in chunk} p_j log q_j = S_k log(S_k / nz_k)``.
    """
    h, w = stats.abs_hist()
    nz = np.flatnonzero(h)
    if not len(nz) or stats.absmax <= 0:
        return stats.absmax
    n = int(nz[-1]) + 1
    if n <= levels:
        return stats.absmax
    bins = h[:n].astype(np.float64)
    bins[0] = bins[1]  # the zero bin (ReLU zeros) would dominate; pytorch-quantization does the same
    total = bins.sum()
    cs = np.concatenate([[0.0], np.cumsum(bins)])
    cnz = np.concatenate([[0], np.cumsum(bins > 0)])
    with np.errstate(divide="ignore", invalid="ignore"):
        blog = np.where(bins > 0, bins * np.log(np.where(bins > 0, bins, 1.0)), 0.0)
    hcum = np.concatenate([[0.0], np.cumsum(blog)])
    i = np.arange(levels, n + 1)
    k = np.arange(levels + 1)
    bounds = -((-k[None, :] * i[:, None]) // levels)  # ceil(k*i/levels): first bin of chunk k
    s = cs[bounds[:, 1:]] - cs[bounds[:, :-1]]
    nzc = cnz[bounds[:, 1:]] - cnz[bounds[:, :-1]]
    with np.errstate(divide="ignore", invalid="ignore"):
        chunk = np.where(s > 0, s * np.log(np.where(s > 0, s, 1.0) / np.maximum(nzc, 1)), 0.0).sum(axis=1)
        outl = total - cs[i]
        last = bins[i - 1]
        p_last = last + outl
        plogp = hcum[i - 1] + np.where(p_last > 0, p_last * np.log(np.where(p_last > 0, p_last, 1.0)), 0.0)
        q_last = np.where(last > 0, s[:, -1] / np.maximum(nzc[:, -1], 1), 0.0)
        out_term = np.where(outl > 0, outl * np.log(np.where(q_last > 0, q_last, 1.0)), 0.0)
        q_total = total - outl
        kl = (plogp - chunk - out_term) / total - math.log(total) + np.log(q_total)
        kl = np.where((outl > 0) & (q_last <= 0), np.inf, kl)
    best = len(kl) - 1 - int(np.argmin(kl[::-1]))
    return float(min(i[best] * w, stats.absmax))
