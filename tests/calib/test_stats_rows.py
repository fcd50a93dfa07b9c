"""update_rows (many small tensors reduced at once) ends in the very state TensorStats.update gives."""

import numpy as np
import pytest

from qtquant.calib.stats import BINS, MINMAX_BINS, NonFiniteError, TensorStats, update_rows


def _state(s: TensorStats):
    return (s.min, s.max, s.exp, s.count, s.samples, s.ma_min, s.ma_max, s.stride, s.bins, s.lo, s.total,
            None if s.counts is None else (s.counts.dtype.str, s.counts.tolist()))


@pytest.mark.parametrize("bins,stride", [(MINMAX_BINS, 8), (BINS, 1), (MINMAX_BINS, 1)])
def test_rows_equal_one_by_one(bins, stride):
    rng = np.random.default_rng(7)
    k, n = 40, 8 * 8 * 8
    one = [TensorStats(bins=bins) for _ in range(k)]
    rows = [TensorStats(bins=bins) for _ in range(k)]
    for sample in range(5):
        # Ranges that grow and shrink from sample to sample (re-binning), one-signed rows, tiny
        # and huge magnitudes, and rows update_rows must leave to update (all zeros).
        gain = rng.choice([1e-3, 0.5, 3.0, 1e4], size=(k, 1)).astype(np.float32) * (sample + 1)
        x = (rng.standard_normal((k, n)) * gain).astype(np.float32)
        x[3] = np.abs(x[3])
        x[4] = -np.abs(x[4])
        x[5] = 0.0
        if sample == 2:
            x[6] = 0.0
        for s, v in zip(one, x):
            s.update(v.reshape(1, 8, 8, 8), stride=stride)
        left = update_rows(rows, x, stride)
        assert 5 in left and all(r in (5, 6) for r in left)
        for r in left:
            rows[r].update(x[r].reshape(1, 8, 8, 8), stride=stride)
    for a, b in zip(one, rows):
        assert _state(a) == _state(b)


def test_rows_with_nan_are_left_for_update_to_raise():
    stats = [TensorStats(bins=MINMAX_BINS) for _ in range(3)]
    x = np.ones((3, 64), np.float32)
    x[1, 5] = np.nan
    assert update_rows(stats, x, 1) == [1]
    assert stats[1].count == 0 and stats[0].count == 64  # row 1 untouched, the others folded in
    with pytest.raises(NonFiniteError):
        stats[1].update(x[1], stride=1)
