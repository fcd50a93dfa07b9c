"""Streaming statistics and observers against references computed here with plain numpy."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from qtquant.calib.observers import observe
from qtquant.calib.stats import BINS, MA_CONSTANT, TensorStats


def _stats(x, chunks=1):
    s = TensorStats()
    for part in np.array_split(np.asarray(x, np.float32), chunks):
        s.update(part)
    return s


def _uniform(n=200_000, seed=0):
    return np.random.default_rng(seed).uniform(-1.0, 3.0, n).astype(np.float32)


def _gauss_outliers(n=400_000, seed=1):
    rng = np.random.default_rng(seed)
    x = rng.normal(0.0, 1.0, n)
    x[rng.choice(n, 40, replace=False)] = rng.choice([-30.0, 25.0], 40)  # a few far outliers
    return x.astype(np.float32)


DISTS = {"uniform": _uniform, "gauss+outliers": _gauss_outliers}


def _hist_ref(x, s):
    """The histogram built independently with np.histogram over the same power-of-two edges."""
    t = 2.0 ** max(math.frexp(float(np.abs(x).max()))[1], -100)  # below 2**-100 counts as zero
    edges = np.linspace(-t, t, 2 * BINS + 1)
    return np.histogram(x.astype(np.float64), bins=edges)[0], t


# -- statistics and the merge law ---------------------------------------------------------------
@pytest.mark.parametrize("dist", DISTS)
def test_histogram_matches_numpy(dist):
    x = DISTS[dist]()
    s = _stats(x, chunks=7)
    ref, t = _hist_ref(x, s)
    assert s.threshold == t and s.threshold > s.absmax >= t / 2
    np.testing.assert_array_equal(s.hist, ref)
    assert s.count == x.size and s.min == x.min() and s.max == x.max()
    np.testing.assert_allclose(s.edges[[0, BINS, -1]], [-t, 0.0, t])


def test_merge_law_exact():
    rng = np.random.default_rng(3)
    a = rng.normal(0, 0.01, 5000).astype(np.float32)  # small range first: B forces a re-bin
    b = rng.normal(0, 50.0, 7000).astype(np.float32)
    zeros = np.zeros(100, np.float32)
    seq = _stats(zeros)
    for part in (a, b):
        seq.update(part)
    at_once = _stats(np.concatenate([zeros, a, b]))
    merged = _stats(zeros).merge(_stats(a)).merge(_stats(b))
    reverse = _stats(b).merge(_stats(a)).merge(_stats(zeros))
    for s in (seq, merged, reverse):
        np.testing.assert_array_equal(s.hist, at_once.hist)
        assert (s.min, s.max, s.count, s.exp) == (at_once.min, at_once.max, at_once.count, at_once.exp)
    assert merged.samples == 3 and at_once.samples == 1


@settings(max_examples=40, deadline=None)
# Subnormal negatives can underflow to -0.0 when scaled and land in the [0, w) bin: harmless, excluded.
@given(hnp.arrays(np.float32, st.integers(1, 300),
                  elements=st.floats(-1e4, 1e4, width=32, allow_subnormal=False)),
       st.integers(1, 5))
def test_merge_law_property(x, chunks):
    parts = np.array_split(x, chunks)
    merged = TensorStats()
    for p in parts:
        one = TensorStats()
        one.update(p)
        merged = merged.merge(one)
    whole = _stats(x)
    np.testing.assert_array_equal(merged.hist, whole.hist)
    assert merged.hist.sum() == x.size and (merged.min, merged.max) == (whole.min, whole.max)
    if np.abs(x).max() > 0:
        np.testing.assert_array_equal(whole.hist, _hist_ref(x, whole)[0])


@pytest.mark.parametrize("n", [1, 63, 64, 65, 511, 512, 513, 1000, 5000])
@pytest.mark.parametrize("stride", [3, 8])
def test_strided_histogram_takes_every_nth_block(n, stride):
    rng = np.random.default_rng(n)
    x = rng.normal(0, 1, (2, n)).astype(np.float32)
    s = TensorStats()
    s.update(x, samples=2, stride=stride)
    keep = (np.arange(n) // 64) % stride == 0
    ref, _ = _hist_ref(x, s)
    np.testing.assert_array_equal(s.hist, np.histogram(x[:, keep].astype(np.float64), bins=s.edges)[0])
    assert (s.min, s.max, s.count, s.samples, s.stride) == (x.min(), x.max(), 2 * n, 2, stride)
    one = TensorStats()
    one.update(x[0], stride=stride)
    two = TensorStats()
    two.update(x[1], stride=stride)
    np.testing.assert_array_equal(one.merge(two).hist, s.hist)  # the merge law holds with a stride too


def test_nan_is_refused():
    s = TensorStats()
    with pytest.raises(ValueError):
        s.update(np.array([1.0, np.nan], np.float32))
    with pytest.raises(ValueError):
        s.update(np.array([np.inf], np.float32))
    with pytest.raises(ValueError):  # a NaN beside zeros only (no histogram window to index into)
        s.update(np.array([0.0, np.nan], np.float32))
    with pytest.raises(ValueError):  # a NaN outside the strided subsample still counts
        s.update(np.concatenate([np.ones(64, np.float32), [np.nan]]), stride=8)
    assert s.count == 0 and s.hist is None  # a refused batch leaves no trace


def test_per_sample_min_max_from_a_batch():
    x = np.stack([np.full(10, v, np.float32) for v in (1.0, -2.0, 3.0)])
    s = TensorStats()
    s.update(x, samples=3)
    assert s.samples == 3 and s.ma_min[0] == 3


# -- observers vs numpy references --------------------------------------------------------------
def _fake_quant_sym(x, t):
    d = t / 127.0
    return np.clip(np.round(x / d), -128, 127) * d


def _fake_quant_asym(x, lo, hi):
    d = (hi - lo) / 255.0
    zp = np.round(-lo / d)
    return (np.clip(np.round(x / d) + zp, 0, 255) - zp) * d


def _mse(x, q):
    return float(np.mean((x.astype(np.float64) - q) ** 2))


@pytest.mark.parametrize("dist", DISTS)
def test_minmax_both_schemes(dist):
    x = DISTS[dist]()
    s = _stats(x, chunks=5)
    for scheme in ("sym", "asym"):
        assert observe(s, "minmax", scheme) == (float(x.min()), float(x.max()))


@pytest.mark.parametrize("dist", DISTS)
@pytest.mark.parametrize("pct", [99.99, 99.9, 99.0])
def test_percentile_sym_and_asym(dist, pct):
    x = DISTS[dist]()
    s = _stats(x, chunks=3)
    w = s.bin_width
    lo, hi = observe(s, "percentile", "sym", pct)
    t = np.percentile(np.abs(x), pct)
    assert abs(max(-lo, hi) - t) <= 2 * w
    assert lo >= x.min() and hi <= x.max()
    cut = (100 - pct) / 2
    ref_lo, ref_hi = np.percentile(x, [cut, 100 - cut])
    lo, hi = observe(s, "percentile", "asym", pct)
    assert abs(lo - ref_lo) <= 2 * w and abs(hi - ref_hi) <= 2 * w


def test_percentile_cuts_outliers():
    x = _gauss_outliers()
    lo, hi = observe(_stats(x), "percentile", "sym", 99.9)
    assert 3.0 < hi < 4.0 and -4.0 < lo < -3.0  # the outliers at -30/25 are cut


@pytest.mark.parametrize("dist", DISTS)
def test_mse_sym_near_brute_force_optimum(dist):
    x = DISTS[dist]()[:100_000]
    s = _stats(x)
    lo, hi = observe(s, "mse", "sym")
    t = max(-lo, hi)
    grid = np.linspace(0.05, 1.0, 400) * s.absmax
    errs = [_mse(x, _fake_quant_sym(x, g)) for g in grid]
    best = min(errs)
    assert _mse(x, _fake_quant_sym(x, t)) <= best * 1.05
    assert 2.5 < t <= s.absmax


@pytest.mark.parametrize("dist", DISTS)
def test_mse_asym_near_brute_force_optimum(dist):
    x = DISTS[dist]()[:20_000]
    s = _stats(x)
    lo, hi = observe(s, "mse", "asym")
    assert lo <= 0 <= hi
    los = np.linspace(min(x.min(), 0), 0, 31)[:-1]
    his = np.linspace(0, x.max(), 31)[1:]
    best = min(_mse(x, _fake_quant_asym(x, a, b)) for a in los for b in his)
    assert _mse(x, _fake_quant_asym(x, lo, hi)) <= best * 1.05


def _kl_reference(x):
    """NVIDIA pytorch-quantization's entropy search, candidate by candidate, on an |x| histogram."""
    ax = np.abs(x).astype(np.float64)
    t = 2.0 ** math.frexp(float(ax.max()))[1]
    hist, edges = np.histogram(ax, bins=BINS, range=(0, t))
    n = int(np.flatnonzero(hist)[-1]) + 1
    bins = hist[:n].astype(np.float64)
    bins[0] = bins[1]
    best, arg = np.inf, None
    for i in range(128, n + 1):
        p = bins[:i].copy()
        p[-1] += bins[i:].sum()
        chunk = np.digitize(np.arange(i), np.linspace(0, i, 129)) - 1
        sums = np.bincount(chunk, weights=bins[:i], minlength=128)
        nz = np.bincount(chunk, weights=(bins[:i] > 0), minlength=128)
        q = np.where(bins[:i] > 0, sums[chunk] / np.maximum(nz[chunk], 1), 0.0)
        p, q = p / p.sum(), q / q.sum()
        if np.any((p > 0) & (q == 0)):
            kl = np.inf
        else:
            m = p > 0
            kl = float(np.sum(p[m] * np.log(p[m] / q[m])))
        if kl <= best:  # the last minimum wins, as in the reference
            best, arg = kl, i
    return edges[arg]


@pytest.mark.parametrize("dist", DISTS)
def test_kl_matches_reference(dist):
    x = DISTS[dist]()
    s = _stats(x, chunks=4)
    lo, hi = observe(s, "kl", "sym")
    ref = min(_kl_reference(x), s.absmax)
    assert max(-lo, hi) == pytest.approx(ref, rel=1e-9)
    alo, ahi = observe(s, "kl", "asym")  # asym: the same threshold clips both sides
    assert (alo, ahi) == (max(float(x.min()), -ref), min(float(x.max()), ref))
    if dist == "gauss+outliers":
        assert 2.0 < ref < 15.0


def test_ma_minmax_matches_pytorch_formula():
    rng = np.random.default_rng(5)
    samples = [rng.normal(0, 1 + k % 3, 1000).astype(np.float32) for k in range(40)]
    lo = hi = None
    for x in samples:  # torch.ao MovingAverageMinMaxObserver, one sample per forward
        if lo is None:
            lo, hi = float(x.min()), float(x.max())
        else:
            lo += MA_CONSTANT * (float(x.min()) - lo)
            hi += MA_CONSTANT * (float(x.max()) - hi)
    seq = TensorStats()
    for x in samples:
        seq.update(x)
    halves = [TensorStats(), TensorStats()]
    for k, x in enumerate(samples):
        halves[k >= 13].update(x)
    merged = halves[0].merge(halves[1])
    for s in (seq, merged):
        for scheme in ("sym", "asym"):
            got = observe(s, "ma-minmax", scheme)
            assert got == pytest.approx((lo, hi), rel=1e-9)
    assert observe(seq, "minmax")[1] > hi  # the average lags behind the extreme


def test_empty_and_constant_tensors():
    assert observe(TensorStats(), "percentile") is None
    z = _stats(np.zeros(100))
    for obs in ("minmax", "ma-minmax", "percentile", "mse", "kl"):
        for scheme in ("sym", "asym"):
            assert observe(z, obs, scheme) == (0.0, 0.0)
    c = _stats(np.full(1000, 2.5))
    for obs in ("minmax", "percentile", "mse", "kl"):
        lo, hi = observe(c, obs, "sym")
        assert hi == pytest.approx(2.5, abs=c.bin_width * 2) and lo == hi


def test_coarse_histogram_for_plots():
    x = _gauss_outliers()
    s = _stats(x)
    counts, edges = s.coarse(64)
    assert 0 < len(counts) <= 64 and len(edges) == len(counts) + 1 and counts.sum() == x.size
    assert edges[0] <= x.min() and edges[-1] >= x.max()
    ref = np.histogram(x.astype(np.float64), bins=edges)[0]
    np.testing.assert_array_equal(counts, ref)
    assert TensorStats().coarse()[0].size == 0
