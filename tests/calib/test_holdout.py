"""Calibration uses every sample; the fidelity check holds samples back only when there are enough
(DESIGN §3 "Samples"), and --holdout N|FRACTION overrides the automatic rule."""

import json

import numpy as np
import onnx
import pytest

from builders import mul_relu_model
from qtquant.calib import CalibConfig, calibrate
from qtquant.calib.cache import calibrate_cached, cache_paths, cache_key, load_cached, save_cache
from qtquant.calib.engine import CHECK_CAP, split_samples
from qtquant.calib.holdout import CalibConfigError
from qtquant.calib.sources import open_source
from qtquant.cli import build_parser, main
from qtquant.cli.common import calib_config_from_args
from qtquant.model.graph import graph_from_model
from qtquant.model.runtime import input_specs


@pytest.fixture(scope="module")
def graph():
    return graph_from_model(mul_relu_model())


def _folder(path, n, special=None, special_value=50.0):
    """``n`` .npz files, sample i holding the values i - 1, i, i + 0.5, i - 0.25 (so a feed names its
    sample); ``special`` (a file index) gets ``special_value`` as its maximum, like the one photo
    with a confident detection."""
    path.mkdir()
    for i in range(n):
        x = np.array([[i - 1.0, i, i + 0.5, i - 0.25]], np.float32)
        if i == special:
            x[0, 2] = special_value
        np.savez(path / f"s{i:03d}.npz", x=x)
    return str(path)


def _ids(feeds):
    return sorted(int(f["x"][0, 1]) for f in feeds)


def test_seven_samples_all_calibrated_and_checked_in_sample(graph, tmp_path):
    res = calibrate(graph, CalibConfig(source=_folder(tmp_path / "d", 7)))
    assert res.batches == 7 and res.stats["x"].samples == 7 and res.stats["x"].count == 28
    assert res.in_sample is True and res.check_samples == 7 and _ids(res.holdout) == list(range(7))
    assert res.check_description == "7 in-sample samples"
    assert any("calibrating on all 7 samples; the check runs in-sample on them" in n and "32" in n
               for n in res.notes), res.notes


def test_seven_samples_ranges_are_those_of_all_seven(graph, tmp_path):
    # The extreme sample goes where the shuffled order puts the last sample: that is the one a
    # fixed hold-back of the last samples would have removed from calibration.
    probe = _folder(tmp_path / "probe", 7)
    last = open_source(input_specs(graph), CalibConfig(source=probe)).refs[-1]
    special = int(last.file[-7:-4])
    src = _folder(tmp_path / "d", 7, special=special)
    data = np.concatenate([np.load(f"{src}/s{i:03d}.npz")["x"] for i in range(7)])
    res = calibrate(graph, CalibConfig(source=src))
    assert res.ranges["x"] == pytest.approx((data.min(), data.max()))
    assert res.ranges["y"] == pytest.approx((0.0, 3 * data.max()))
    assert res.ranges["x"][1] == pytest.approx(50.0)
    explicit = calibrate(graph, CalibConfig(source=src, holdout=0))
    assert explicit.ranges == res.ranges


def test_forty_samples_hold_back_a_fifth(graph, tmp_path):
    src = _folder(tmp_path / "d", 40)
    res = calibrate(graph, CalibConfig(source=src, count=40))
    assert res.batches == 32 and res.check_samples == 8 and res.in_sample is False
    assert res.check_description == "8 held-out samples"
    held = set(_ids(res.holdout))
    calibrated = sorted(set(range(40)) - held)
    assert len(held) == 8 and res.stats["x"].count == 32 * 4
    assert res.ranges["x"] == pytest.approx((calibrated[0] - 1.0, calibrated[-1] + 0.5))
    # the default --calib-count (16) calibrates on 16 of the 32 left; the same 8 are held out
    small = calibrate(graph, CalibConfig(source=src))
    assert small.batches == 16 and set(_ids(small.holdout)) == held and not small.in_sample


def test_holdout_zero_with_forty_checks_in_sample(graph, tmp_path):
    res = calibrate(graph, CalibConfig(source=_folder(tmp_path / "d", 40), count=40, holdout=0))
    assert res.batches == 40 and res.in_sample and res.check_samples == CHECK_CAP
    assert any("--holdout 0" in n and f"on {CHECK_CAP} of them" in n for n in res.notes), res.notes


def test_holdout_count_and_fraction(graph, tmp_path):
    src = _folder(tmp_path / "d", 40)
    five = calibrate(graph, CalibConfig(source=src, count=40, holdout=5))
    assert (five.batches, five.check_samples, five.in_sample) == (35, 5, False)
    half = calibrate(graph, CalibConfig(source=src, count=40, holdout=0.5))
    assert (half.batches, half.check_samples, half.in_sample) == (20, 20, False)
    assert half.stats["x"].count == 20 * 4
    # a fraction of a small set still holds back (explicit), but always leaves one to calibrate on
    refs = open_source(input_specs(graph), CalibConfig(source=src)).refs
    split = split_samples(refs[:7], CalibConfig(source=src, holdout=0.5))
    assert (len(split.calib), len(split.held), split.in_sample) == (4, 3, False)
    one = split_samples(refs[:1], CalibConfig(source=src, holdout=3))
    assert (len(one.calib), len(one.held), one.in_sample, one.check) == (1, 0, True, refs[:1]) and one.notes
    # more asked than can be held back: the note says what was asked and why it is less
    seven = split_samples(refs[:7], CalibConfig(source=src, holdout=10))
    assert (len(seven.calib), len(seven.held)) == (1, 6)
    assert seven.notes == [f"{src} has 7 samples: calibrating on 1, holding back 6 (not the 10 --holdout asked "
                           "for: one sample at least is calibrated on)"]


def test_holdout_rule_edges(graph, tmp_path):
    src = _folder(tmp_path / "d", 32)
    refs = open_source(input_specs(graph), CalibConfig(source=src)).refs
    cfg = CalibConfig(source=src, count=100)
    assert len(split_samples(refs[:31], cfg).held) == 0
    s32 = split_samples(refs, cfg)
    assert (len(s32.calib), len(s32.held)) == (26, 6) and s32.held == refs[26:]
    big = split_samples(refs * 10, CalibConfig(source=src, count=1000, holdout=100))
    assert len(big.held) == 100 and len(big.check) == CHECK_CAP and any(f"{CHECK_CAP} of them" in n
                                                                          for n in big.notes)


def test_strings_are_normalised_and_bad_values_refused():
    assert CalibConfig(holdout="auto").holdout is None and CalibConfig().holdout is None
    assert CalibConfig(holdout="5").holdout == 5 and CalibConfig(holdout=np.int64(3)).holdout == 3
    assert CalibConfig(holdout="0.25").holdout == 0.25 and CalibConfig(holdout=0).holdout == 0
    assert CalibConfig().count == 16
    for bad in (-1, 1.5, 1.0, 0.0, "abc", True, float("nan"), [2]):
        with pytest.raises(CalibConfigError, match="--holdout"):
            CalibConfig(holdout=bad)


def test_cli_option_maps_to_the_config():
    parse = lambda *a: calib_config_from_args(build_parser().parse_args(["analyze", "m.onnx", *a]))  # noqa: E731
    assert parse().holdout is None and parse().count == 16
    assert parse("--holdout", "auto").holdout is None
    assert parse("--holdout", "0").holdout == 0 and parse("--holdout", "5").holdout == 5
    assert parse("--holdout", "0.2").holdout == 0.2


@pytest.fixture
def model_file(tmp_path):
    p = tmp_path / "m.onnx"
    onnx.save(mul_relu_model(), str(p))
    return str(p)


@pytest.mark.parametrize("value,code,says", [("-1", 2, "0 or more"), ("1.5", 2, "between 0 and 1"),
                                             ("abc", 2, "a count or a fraction")])
def test_cli_invalid_holdout(model_file, capsys, value, code, says):
    try:
        rc = main(["analyze", model_file, "--holdout", value, "--no-perf", "--no-fidelity"])
    except SystemExit as e:  # argparse usage errors leave through SystemExit
        rc = e.code
    err = capsys.readouterr().err
    assert rc == code
    assert "Traceback" not in err and "--holdout" in err and says in err
    assert len([ln for ln in err.splitlines() if ln.startswith("qtquant: error")]) == 1


def test_cli_holdout_end_to_end(model_file, tmp_path, capsys):
    src = _folder(tmp_path / "d", 40)
    rc = main(["analyze", model_file, "--calib", src, "--calib-count", "40", "--holdout", "5", "--no-perf",
               "--no-fidelity", "--json"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert json.loads(out.out)["calibration"]["samples"] == 35
    rc = main(["analyze", model_file, "--calib", src, "--calib-count", "40", "--no-perf", "--no-fidelity"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert "calibrated with minmax on 32 samples" in out.out and "8 held out for the check" in out.out


def test_cache_round_trip_keeps_the_check(graph, tmp_path):
    src = _folder(tmp_path / "d", 7)
    cfg = CalibConfig(source=src)
    res = calibrate(graph, cfg)
    save_cache(graph, res, tmp_path / "c")
    back = load_cached(graph, cfg, tmp_path / "c")
    assert back is not None and back.in_sample is True and back.batches == 7
    assert back.check_description == "7 in-sample samples" and back.notes == res.notes
    for a, b in zip(res.holdout, back.holdout):
        np.testing.assert_array_equal(a["x"], b["x"])
    # another holdout setting is another entry, never this one reinterpreted
    assert load_cached(graph, CalibConfig(source=src, holdout=2), tmp_path / "c") is None
    held = CalibConfig(source=_folder(tmp_path / "e", 40), count=40)
    a = calibrate_cached(graph, held, tmp_path / "c")
    b = calibrate_cached(graph, held, tmp_path / "c")
    assert a.in_sample is False and b.in_sample is False and b.check_samples == 8 and _ids(a.holdout) == _ids(b.holdout)
    # an entry without the flag (an older qtquant's, or damaged) is a miss
    jpath, _ = cache_paths(tmp_path / "c", cache_key(graph, cfg))
    doc = json.loads(jpath.read_text())
    del doc["in_sample"]
    jpath.write_text(json.dumps(doc))
    assert load_cached(graph, cfg, tmp_path / "c") is None
    doc["in_sample"], doc["format"] = True, 1
    jpath.write_text(json.dumps(doc))
    assert load_cached(graph, cfg, tmp_path / "c") is None


def test_recompute_and_merge_keep_the_check(graph, tmp_path):
    res = calibrate(graph, CalibConfig(source=_folder(tmp_path / "d", 7)))
    again = res.recompute(observer="percentile", scheme="asym")
    assert again.in_sample and _ids(again.holdout) == _ids(res.holdout) and again.batches == 7
    with pytest.raises(CalibConfigError, match="holdout"):
        res.recompute(holdout=2)
    other = calibrate(graph, CalibConfig(source=_folder(tmp_path / "e", 40), count=40))
    merged = res.merge(other)
    assert merged.in_sample and merged.batches == 39 and _ids(merged.holdout) == _ids(res.holdout)
    merged = other.merge(res)
    assert not merged.in_sample and merged.check_samples == 8


def test_synthetic_follows_the_rule(graph):
    small = calibrate(graph, CalibConfig(count=5))
    assert (small.batches, small.check_samples, small.in_sample) == (5, 5, True)
    big = calibrate(graph, CalibConfig(count=40))
    assert (big.batches, big.check_samples, big.in_sample) == (40, 10, False)  # 20% of 50 generated
    explicit = calibrate(graph, CalibConfig(count=4, holdout=3))
    assert (explicit.batches, explicit.check_samples, explicit.in_sample) == (4, 3, False)
    half = calibrate(graph, CalibConfig(count=6, holdout=0.5))
    assert (half.batches, half.check_samples) == (6, 6)


@pytest.mark.slow
def test_jobs_keep_the_in_sample_check(graph, tmp_path):
    src = _folder(tmp_path / "d", 7)
    one = calibrate(graph, CalibConfig(source=src))
    two = calibrate(graph, CalibConfig(source=src, jobs=2))
    assert two.in_sample and two.batches == 7 and _ids(two.holdout) == _ids(one.holdout)
    assert two.ranges == one.ranges
