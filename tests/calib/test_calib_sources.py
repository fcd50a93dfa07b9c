"""Calibration data sources: every error case, .npy/.npz layouts, image preprocessing, shuffling."""

import numpy as np
import pytest
from PIL import Image

from qtquant.calib import CalibConfig
from qtquant.calib.engine import split_samples
from qtquant.calib.holdout import CalibConfigError
from qtquant.calib.sources import LETTERBOX_FILL, open_source
from qtquant.base.errors import BadInputError, CalibrationDataError

IMG = {"x": ((1, 3, 4, 6), np.dtype(np.float32))}  # NCHW, H=4, W=6
TWO = {"a": ((1, 4), np.dtype(np.float32)), "b": ((1, 2), np.dtype(np.float32))}


def _cfg(source, **kw):
    return CalibConfig(source=str(source), **kw)


def _feeds(src, refs=None):
    return [f for _, f in src.feeds(src.refs if refs is None else refs)]


def _png(path, size, color):
    Image.new("RGB", size, color).save(path)
    return path


# -- errors --------------------------------------------------------------------------------------
def _err(specs, source, **kw):
    with pytest.raises(CalibrationDataError) as e:
        src = open_source(specs, _cfg(source, **kw))
        _feeds(src)
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def test_missing_path(tmp_path):
    assert "not found" in _err(IMG, tmp_path / "nope")


def test_empty_folder(tmp_path):
    (tmp_path / "README.txt").write_text("hi")
    msg = _err(IMG, tmp_path)
    assert "no images" in msg and str(tmp_path) in msg


def test_mixed_folder(tmp_path):
    _png(tmp_path / "a.png", (6, 4), "red")
    np.save(tmp_path / "b.npy", np.zeros((1, 3, 4, 6), np.float32))
    assert "mixes" in _err(IMG, tmp_path)


def test_unreadable_image(tmp_path):
    (tmp_path / "broken.png").write_bytes(b"not a png at all")
    msg = _err(IMG, tmp_path)  # the only file: nothing readable is left
    assert "no readable image" in msg and "broken.png" in msg


def test_unsupported_file(tmp_path):
    f = tmp_path / "data.csv"
    f.write_text("1,2")
    assert "expected an image folder" in _err(IMG, f)


def test_npy_shape_mismatch_names_file_input_and_shapes(tmp_path):
    f = tmp_path / "bad.npy"
    np.save(f, np.zeros((1, 3, 5, 5), np.float32))
    msg = _err(IMG, f)
    assert "bad.npy" in msg and "'x'" in msg and "1x3x4x6" in msg and "1x3x5x5" in msg


def test_npy_dtype_mismatch(tmp_path):
    f = tmp_path / "u8.npy"
    np.save(f, np.zeros((1, 3, 4, 6), np.uint8))
    msg = _err(IMG, f)
    assert "u8.npy" in msg and "float32" in msg and "uint8" in msg


def test_npy_with_pickled_objects(tmp_path):
    f = tmp_path / "obj.npy"
    np.save(f, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    assert "obj.npy" in _err(IMG, f)


def test_nan_and_inf_name_the_file(tmp_path):
    a = np.zeros((2, 3, 4, 6), np.float32)
    a[1, 0, 0, 0] = np.nan
    np.save(tmp_path / "nan.npy", a)
    msg = _err(IMG, tmp_path / "nan.npy", holdout=0)
    assert "nan.npy" in msg and "NaN or Inf" in msg
    np.savez(tmp_path / "inf.npz", a=np.full((1, 4), np.inf, np.float32), b=np.zeros((1, 2), np.float32))
    msg = _err(TWO, tmp_path / "inf.npz")
    assert "inf.npz" in msg and "'a'" in msg


def test_npz_missing_key_and_uneven_counts(tmp_path):
    np.savez(tmp_path / "m.npz", a=np.zeros((1, 4), np.float32))
    msg = _err(TWO, tmp_path / "m.npz")
    assert "m.npz" in msg and "'b'" in msg
    np.savez(tmp_path / "u.npz", a=np.zeros((3, 4), np.float32), b=np.zeros((2, 2), np.float32))
    assert "different numbers of samples" in _err(TWO, tmp_path / "u.npz")


def test_npz_shape_mismatch_names_input(tmp_path):
    np.savez(tmp_path / "s.npz", a=np.zeros((1, 4), np.float32), b=np.zeros((1, 3), np.float32))
    msg = _err(TWO, tmp_path / "s.npz")
    assert "s.npz" in msg and "'b'" in msg and "1x2" in msg and "1x3" in msg


def test_npy_for_multi_input_model(tmp_path):
    np.save(tmp_path / "a.npy", np.zeros((1, 4), np.float32))
    assert "2 inputs" in _err(TWO, tmp_path / "a.npy")


def test_images_need_a_single_image_input(tmp_path):
    _png(tmp_path / "a.png", (6, 4), "red")
    assert "one input" in _err(TWO, tmp_path)
    assert "not an image input" in _err({"v": ((1, 10), np.dtype(np.float32))}, tmp_path)
    assert "--layout nhwc" in _err({"x": ((1, 4, 6, 3), np.dtype(np.float32))}, tmp_path)


def test_bad_options_are_one_line_errors():
    for kw in ({"observer": "avg"}, {"percentile": 0}, {"mean": "a,b,c"}, {"std": "0,1,1"}, {"count": 0},
               {"mean": "1,2"}, {"scheme": "int4"}, {"resize": "squash"}, {"jobs": 0}):
        with pytest.raises(BadInputError) as e:
            CalibConfig(**kw)
        assert "\n" not in str(e.value)
    with pytest.raises(ValueError):  # also a ValueError for the project loader
        CalibConfig(layout="chw")
    assert CalibConfig(mean="0.5, 0.5,0.5", std=[0.25] * 3).mean == (0.5, 0.5, 0.5)
    assert isinstance(CalibConfigError("x"), BadInputError)


# -- arrays --------------------------------------------------------------------------------------
def test_npy_layouts(tmp_path):
    rng = np.random.default_rng(0)
    stacked = rng.random((5, 3, 4, 6), dtype=np.float32)  # N along the batch axis
    np.save(tmp_path / "rows.npy", stacked)
    np.save(tmp_path / "stack.npy", stacked[:, None])  # N x full input shape
    np.save(tmp_path / "one.npy", stacked[:1])
    np.save(tmp_path / "nobatch.npy", stacked[0])
    for name, n in (("rows", 5), ("stack", 5), ("one", 1), ("nobatch", 1)):
        src = open_source(IMG, _cfg(tmp_path / f"{name}.npy"))
        feeds = {r.index: f["x"] for r, f in src.feeds(sorted(src.refs))}
        assert len(feeds) == n
        for i, arr in feeds.items():
            assert arr.shape == (1, 3, 4, 6) and arr.dtype == np.float32
            np.testing.assert_array_equal(arr[0], stacked[i])


def test_npz_multi_input_and_folder(tmp_path):
    (tmp_path / "d").mkdir()
    for k in range(3):
        np.savez(tmp_path / "d" / f"{k}.npz", a=np.full((2, 4), k, np.float32), b=np.full((2, 2), -k, np.float64))
    src = open_source(TWO, _cfg(tmp_path / "d"))
    assert len(src.refs) == 6
    got = sorted((float(f["a"][0, 0]), float(f["b"][0, 0])) for f in _feeds(src))
    assert got == sorted((k, -k) for k in range(3) for _ in range(2))
    assert all(f["b"].dtype == np.float32 and f["b"].shape == (1, 2) for f in _feeds(src))
    np.savez(tmp_path / "single.npz", np.zeros((2, 1, 3, 4, 6), np.float32))  # key arr_0
    assert len(open_source(IMG, _cfg(tmp_path / "single.npz")).refs) == 2


def test_seeded_shuffling_and_holdout(tmp_path):
    np.save(tmp_path / "d.npy", np.arange(20, dtype=np.float32).reshape(20, 1, 1) * np.ones((20, 1, 4), np.float32))
    specs = {"a": ((1, 4), np.dtype(np.float32))}
    order = lambda seed: [r.index for r in open_source(specs, _cfg(tmp_path / "d.npy", seed=seed)).refs]  # noqa
    assert order(0) == order(0) and order(0) != order(1) and sorted(order(0)) == list(range(20))
    src = open_source(specs, _cfg(tmp_path / "d.npy"))
    calib, hold, notes = split_samples(src.refs, _cfg(tmp_path / "d.npy", count=8, holdout=3))
    assert len(calib) == 8 and len(hold) == 3 and not set(calib) & set(hold) and not notes
    calib2, hold2, _ = split_samples(src.refs, _cfg(tmp_path / "d.npy", count=12, holdout=3))
    assert hold2 == hold  # the holdout does not move with --calib-count
    few = src.refs[:2]
    calib, hold, notes = split_samples(few, _cfg(tmp_path / "d.npy", count=16, holdout=2))
    assert len(calib) == 1 and len(hold) == 1 and notes  # a small dataset keeps one sample to calibrate


def test_synthetic_is_seeded_and_shaped():
    specs = {"a": ((1, 4), np.dtype(np.float32)), "ids": ((1, 3), np.dtype(np.int64))}
    one = _feeds(open_source(specs, _cfg("synthetic", count=3, holdout=1)))
    two = _feeds(open_source(specs, _cfg("synthetic", count=3, holdout=1)))
    other = _feeds(open_source(specs, _cfg("synthetic", count=3, holdout=1, seed=7)))
    assert len(one) == 4 and one[0]["a"].shape == (1, 4) and one[0]["ids"].dtype == np.int64
    np.testing.assert_array_equal(one[2]["a"], two[2]["a"])
    assert not np.array_equal(one[2]["a"], other[2]["a"])
    assert 0 <= one[0]["a"].min() and one[0]["a"].max() < 1


# -- images --------------------------------------------------------------------------------------
def test_image_stretch_rgb_bgr_ranges_mean_std(tmp_path):
    _png(tmp_path / "c.png", (13, 7), (200, 100, 50))
    x = _feeds(open_source(IMG, _cfg(tmp_path)))[0]["x"]
    assert x.shape == (1, 3, 4, 6)
    np.testing.assert_allclose(x[0, :, 0, 0], np.array([200, 100, 50]) / 255, rtol=1e-6)
    x = _feeds(open_source(IMG, _cfg(tmp_path, color="bgr", pixel_range="0-255")))[0]["x"]
    np.testing.assert_allclose(x[0, :, 2, 3], [50, 100, 200])
    x = _feeds(open_source(IMG, _cfg(tmp_path, mean="0.5,0.5,0.5", std="0.25,0.5,1")))[0]["x"]
    np.testing.assert_allclose(x[0, :, 1, 1], [(200 / 255 - 0.5) / 0.25, (100 / 255 - 0.5) / 0.5, 50 / 255 - 0.5],
                               rtol=1e-5)
    nhwc = {"x": ((1, 4, 6, 3), np.dtype(np.float32))}
    x = _feeds(open_source(nhwc, _cfg(tmp_path, layout="nhwc", pixel_range="0-255")))[0]["x"]
    assert x.shape == (1, 4, 6, 3)
    np.testing.assert_allclose(x[0, 3, 5], [200, 100, 50])


def test_image_letterbox_and_center_crop(tmp_path):
    im = Image.new("RGB", (6, 2))
    for col, color in enumerate([(255, 0, 0)] * 2 + [(0, 255, 0)] * 2 + [(0, 0, 255)] * 2):
        for row in range(2):
            im.putpixel((col, row), color)
    im.save(tmp_path / "bands.png")
    square = {"x": ((1, 3, 6, 6), np.dtype(np.float32))}
    x = _feeds(open_source(square, _cfg(tmp_path, resize="letterbox", pixel_range="0-255")))[0]["x"][0]
    assert np.all(x[:, :2, :] == LETTERBOX_FILL) and np.all(x[:, 4:, :] == LETTERBOX_FILL)  # gray bars
    np.testing.assert_array_equal(x[:, 2, 0], [255, 0, 0])
    np.testing.assert_array_equal(x[:, 3, 5], [0, 0, 255])
    small = {"x": ((1, 3, 2, 2), np.dtype(np.float32))}
    x = _feeds(open_source(small, _cfg(tmp_path, resize="center-crop", pixel_range="0-255")))[0]["x"][0]
    np.testing.assert_array_equal(x[:, :, :].reshape(3, -1).T, [[0, 255, 0]] * 4)  # the green center


def test_image_grayscale_input_and_subfolders(tmp_path):
    (tmp_path / "cls_a").mkdir()
    (tmp_path / "cls_b").mkdir()
    _png(tmp_path / "cls_a" / "1.png", (8, 8), (255, 255, 255))
    _png(tmp_path / "cls_b" / "2.jpg", (8, 8), (0, 0, 0))
    gray = {"g": ((1, 1, 4, 4), np.dtype(np.float32))}
    src = open_source(gray, _cfg(tmp_path))
    assert len(src.refs) == 2
    vals = sorted(float(f["g"].mean()) for f in _feeds(src))
    assert vals[0] < 0.05 and vals[1] > 0.95
    with pytest.raises(CalibrationDataError):
        _feeds(open_source(gray, _cfg(tmp_path, mean="0.5,0.5,0.5")))
