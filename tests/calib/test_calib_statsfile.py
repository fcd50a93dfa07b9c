"""Statistics files (qtquant calibrate --stats-out / --stats / --merge) and compact statistics."""

import json
import zipfile

import numpy as np
import onnx
import pytest
from builders import branchy_concat_model, save

from qtquant.app import open_model
from qtquant.calib import CalibConfig, calibrate
from qtquant.calib.observers import observe
from qtquant.calib.stats import BINS, MINMAX_BINS, TensorStats
from qtquant.calib.statsfile import load_stats, merge_stats, read_stats_header, write_stats
from qtquant.cli import main
from qtquant.base.errors import StatsFileError


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = tmp_path_factory.mktemp("statsfile")
    return save(branchy_concat_model(shape=(1, 3, 8, 8)), d / "m.onnx")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Two disjoint .npy shards and a folder holding both."""
    d = tmp_path_factory.mktemp("data")
    rng = np.random.default_rng(5)
    a = rng.normal(0, 1, (5, 3, 8, 8)).astype(np.float32)
    b = rng.normal(0, 4, (4, 3, 8, 8)).astype(np.float32)  # wider: merging re-bins A's histograms
    np.save(d / "a.npy", a)
    np.save(d / "b.npy", b)
    (d / "ab").mkdir()
    np.save(d / "ab" / "a.npy", a)
    np.save(d / "ab" / "b.npy", b)
    return d


def _graph(model):
    return open_model(model).graph


def _same_stats(x: dict, y: dict):
    assert list(x) == list(y) and x
    for n in x:
        s, t = x[n], y[n]
        np.testing.assert_array_equal(s.hist, t.hist)  # bit for bit
        assert (s.min, s.max, s.count, s.exp, s.bins) == (t.min, t.max, t.count, t.exp, t.bins)


@pytest.mark.parametrize("observer", ["minmax", "percentile"])
def test_round_trip(model, data, tmp_path, observer):
    g = _graph(model)
    cfg = CalibConfig(source=str(data / "a.npy"), count=4, holdout=1, observer=observer)
    res = calibrate(g, cfg)
    out = write_stats(tmp_path / "s.stats", g, res)
    assert out == tmp_path / "s.stats"  # the name given, no suffix appended
    with zipfile.ZipFile(out) as z:
        assert not any(b"pickle" in z.read(n) for n in z.namelist())
    back = load_stats(out, g, cfg)
    _same_stats(res.stats, back.stats)
    assert back.ranges == res.ranges and back.batches == 4 and back.in_sample == res.in_sample
    assert len(back.holdout) == 1
    np.testing.assert_array_equal(back.holdout[0]["x"], res.holdout[0]["x"])
    # another observer chosen on the same statistics: the ranges the file's statistics give, said in a note
    other = load_stats(out, g, CalibConfig(observer="ma-minmax"), explicit={"observer"})
    assert other.ranges == res.recompute(observer="ma-minmax").ranges and other.config.observer == "ma-minmax"
    assert other.notes[-1] == f"ranges by --observer ma-minmax; s.stats was calibrated with {res.config.observer}" + (
        " 99.99" if observer == "percentile" else "")
    # not chosen: the file's observer, whatever the config's default says
    same = load_stats(out, g, CalibConfig(observer="ma-minmax"))
    assert same.config.observer == observer and same.ranges == res.ranges
    assert not same.notes[-1].startswith("ranges by")


def test_merge_equals_calibrating_on_the_union(model, data, tmp_path):
    g = _graph(model)
    kw = dict(count=9, holdout=0, observer="percentile")
    for part in ("a", "b"):
        write_stats(tmp_path / f"{part}.stats", g, calibrate(g, CalibConfig(source=str(data / f"{part}.npy"), **kw)))
    whole = calibrate(g, CalibConfig(source=str(data / "ab"), **kw))
    header = merge_stats([tmp_path / "a.stats", tmp_path / "b.stats"], tmp_path / "ab.stats")
    assert header.batches == 9 and len(header.shards) == 2
    merged = load_stats(tmp_path / "ab.stats", g)
    _same_stats(merged.stats, whole.stats)
    assert merged.ranges == whole.ranges  # percentile ranges from bit-identical histograms
    # What the merged statistics rest on, said of them (not the first file's own split notes,
    # "calibrating on all 5 samples; the check runs in-sample on them"):
    a, b = str(data / "a.npy"), str(data / "b.npy")
    assert merged.sources == (a, b) and merged.data_label() == f"{a}, {b}"
    assert merged.data_label(short=True) == "a.npy, b.npy"
    assert not any(n.startswith("calibrating on") for n in merged.notes), merged.notes
    assert f"merged from 2 statistics files (2 shards: 5 samples of {a}; 4 samples of {b})" in merged.notes
    # The check pools the files' own samples, as one run over both keeps all 9 of its own
    assert "the check runs on 9 in-sample samples (from a.stats, b.stats)" in merged.notes
    assert merged.in_sample and merged.check_samples == whole.check_samples == 9
    parts = [load_stats(tmp_path / f"{part}.stats", g).holdout for part in ("a", "b")]
    assert [f["x"].tobytes() for f in merged.holdout] == [f["x"].tobytes() for f in parts[0] + parts[1]]
    assert sorted(f["x"].tobytes() for f in merged.holdout) == sorted(f["x"].tobytes() for f in whole.holdout)
    single = load_stats(tmp_path / "a.stats", g)
    assert single.sources == () and single.data_label() == a
    # the same shard twice is not disjoint data
    with pytest.raises(StatsFileError, match="repeats the data"):
        merge_stats([tmp_path / "a.stats", tmp_path / "a.stats"], tmp_path / "aa.stats")
    assert not (tmp_path / "aa.stats").exists()
    # another histogram layout (a MinMax calibration) does not merge with a percentile one
    write_stats(tmp_path / "m.stats", g, calibrate(g, CalibConfig(source=str(data / "b.npy"), count=4, holdout=0)))
    with pytest.raises(StatsFileError, match="histogram layout"):
        merge_stats([tmp_path / "a.stats", tmp_path / "m.stats"], tmp_path / "x.stats")


def test_merged_check_prefers_held_out_samples_and_keeps_the_cap(model, data, tmp_path, monkeypatch):
    """Held-out samples are the fairer check: a merge with any keeps those only, and says which
    in-sample ones it left out; the pool stops at CHECK_CAP, first samples first, as one run does."""
    from qtquant.calib import statsfile

    g = _graph(model)
    a, b = tmp_path / "a.stats", tmp_path / "b.stats"
    held = calibrate(g, CalibConfig(source=str(data / "a.npy"), count=9, holdout=2))
    write_stats(a, g, held)
    write_stats(b, g, calibrate(g, CalibConfig(source=str(data / "b.npy"), count=9, holdout=0)))
    for order in ([a, b], [b, a]):
        merge_stats(order, tmp_path / "ab.stats")
        merged = load_stats(tmp_path / "ab.stats", g)
        assert not merged.in_sample and merged.check_samples == 2
        assert [f["x"].tobytes() for f in merged.holdout] == [f["x"].tobytes() for f in held.holdout]
        assert ("the check runs on 2 held-out samples (from a.stats); the in-sample check samples of b.stats "
                "are left out (held-out ones are the fairer check)") in merged.notes
    # in-sample files only, over the cap: the first samples in merge order
    write_stats(a, g, calibrate(g, CalibConfig(source=str(data / "a.npy"), count=9, holdout=0)))
    monkeypatch.setattr(statsfile, "CHECK_CAP", 6)
    merge_stats([a, b], tmp_path / "ab.stats")
    merged = load_stats(tmp_path / "ab.stats", g)
    assert merged.in_sample and merged.check_samples == 6
    firsts = load_stats(a, g).holdout + load_stats(b, g).holdout[:1]
    assert [f["x"].tobytes() for f in merged.holdout] == [f["x"].tobytes() for f in firsts]
    assert ("the check runs on 6 in-sample samples (from a.stats, b.stats) "
            "(the first 6 of 9: at most 6 are kept)") in merged.notes


def test_minmax_merge_is_exact(model, data, tmp_path):
    g = _graph(model)
    kw = dict(count=9, holdout=0)  # minmax: coarse, subsampled histogram; min and max exact
    for part in ("a", "b"):
        write_stats(tmp_path / f"{part}.stats", g, calibrate(g, CalibConfig(source=str(data / f"{part}.npy"), **kw)))
    merge_stats([tmp_path / "a.stats", tmp_path / "b.stats"], tmp_path / "ab.stats")
    whole = calibrate(g, CalibConfig(source=str(data / "ab"), **kw))
    merged = load_stats(tmp_path / "ab.stats", g)
    _same_stats(merged.stats, whole.stats)
    assert merged.ranges == whole.ranges


def test_mismatches_are_one_line_errors(model, data, tmp_path):
    g = _graph(model)
    cfg = CalibConfig(source=str(data / "a.npy"), count=3, holdout=0)
    path = write_stats(tmp_path / "s.stats", g, calibrate(g, cfg))
    other = _graph(save(branchy_concat_model(gains=(1.0, 2.0, 5.0), shape=(1, 3, 8, 8)), tmp_path / "o.onnx"))
    checks = [
        (lambda: load_stats(path, other), "another model"),
        (lambda: load_stats(path, g, CalibConfig(source=str(data / "b.npy"), count=3), explicit={"source"}),
         "was calibrated with --calib"),
        (lambda: load_stats(path, g, CalibConfig(count=5), explicit={"count"}), "--calib-count 3, not 5"),
        (lambda: load_stats(path, g, CalibConfig(observer="kl"), explicit={"observer"}),
         "coarse histograms of a MinMax"),
        (lambda: load_stats(tmp_path / "missing.stats", g), "not found"),
        (lambda: load_stats(model, g), "not a qtquant statistics file"),
    ]
    for call, words in checks:
        with pytest.raises(StatsFileError) as e:
            call()
        assert words in str(e.value) and "\n" not in str(e.value), str(e.value)
    # data settings the user did not choose come from the file
    assert load_stats(path, g, CalibConfig(source=str(data / "b.npy"), count=9)).batches == 3
    # a damaged header
    header = read_stats_header(path).model_dump(mode="json")
    header["version"] = 99
    blob = np.frombuffer(json.dumps(header).encode(), np.uint8)
    with zipfile.ZipFile(path) as z:
        arrays = {n[:-4]: np.load(z.open(n)) for n in z.namelist() if n != "header.npy"}
    np.savez(tmp_path / "new.npz", header=blob, **arrays)
    with pytest.raises(StatsFileError, match="newer qtquant"):
        load_stats(tmp_path / "new.npz", g)
    # the statistics file never overwrites the model
    with pytest.raises(Exception, match="overwrite the input"):
        write_stats(model, g, calibrate(g, cfg))
    assert onnx.load(model) is not None


def test_cli_calibrate_then_stats(model, data, tmp_path, capsys):
    out = tmp_path / "cli.stats"
    rc = main(["calibrate", model, "--calib", str(data / "ab"), "--calib-count", "6", "--holdout", "2",
               "--stats-out", str(out), "--quiet"])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    assert "calibrated 6 samples" in cap.out and out.is_file()
    rc = main(["analyze", model, "--stats", str(out), "--json", "--no-perf"])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    doc = json.loads(cap.out)
    assert doc["calibration"]["samples"] == 6
    rc = main(["analyze", model, "--stats", str(out), "--calib-count", "7", "--no-perf"])
    err = capsys.readouterr().err
    assert rc == 3 and "--calib-count 6, not 7" in err and err.count("\n") == 1
    # The file's observer is the one used unless --observer names another (the laptop step of the
    # README's two-step use came back MinMax after a percentile calibration on the cluster)
    pct = tmp_path / "pct.stats"
    assert main(["calibrate", model, "--calib", str(data / "ab"), "--calib-count", "6", "--observer", "percentile",
                 "--stats-out", str(pct), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["analyze", model, "--stats", str(pct), "--json", "--no-perf"]) == 0
    assert json.loads(capsys.readouterr().out)["calibration"]["observer"] == "percentile"
    # A file of another model whose input has another name: the other model is the error, not
    # the input name its shapes bring ("unknown input name 'inp'")
    renamed = onnx.load(model)
    renamed.graph.input[0].name = "inp"
    for n in renamed.graph.node:
        n.input[:] = ["inp" if i == "x" else i for i in n.input]
    other = save(renamed, tmp_path / "other.onnx")
    assert main(["analyze", other, "--stats", str(pct), "--no-perf"]) == 3
    err = capsys.readouterr().err
    assert "pct.stats holds the statistics of another model" in err and "other.onnx has" in err, err
    assert main(["analyze", model, "--stats", str(pct), "--observer", "minmax", "--json", "--no-perf"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["calibration"]["observer"] == "minmax"  # named, even as the default: it replaces the file's
    a, b = tmp_path / "a.stats", tmp_path / "b.stats"
    for part, p in (("a", a), ("b", b)):
        assert main(["calibrate", model, "--calib", str(data / f"{part}.npy"), "--holdout", "0",
                     "--stats-out", str(p), "--quiet"]) == 0
    rc = main(["calibrate", "--merge", str(a), str(b), "--stats-out", str(tmp_path / "ab.stats")])
    cap = capsys.readouterr()
    assert rc == 0 and "9 samples" in cap.out, cap.err
    assert "; the check runs on 9 in-sample samples (from a.stats, b.stats)" in cap.out  # what it rests on
    assert main(["perf", model, "--stats", str(tmp_path / "ab.stats")]) == 0
    rc = main(["calibrate", "--merge", str(a), "--stats-out", str(tmp_path / "x.stats")])
    assert rc == 2 and "two or more" in capsys.readouterr().err  # a usage error (DESIGN §6)


# -- compact statistics --------------------------------------------------------------------------
def _dense_reference(x, bins):
    """The histogram built with np.histogram over the same power-of-two edges."""
    t = 2.0 ** np.frexp(np.float64(np.abs(x).max()))[1]
    return np.histogram(x.astype(np.float64), bins=np.linspace(-t, t, 2 * bins + 1))[0]


@pytest.mark.parametrize("bins", [MINMAX_BINS, BINS])
def test_compact_counts_are_the_dense_histogram(bins):
    rng = np.random.default_rng(1)
    parts = [rng.normal(0, s, 3000).astype(np.float32) for s in (0.1, 1.0, 30.0, 0.5)]
    s = TensorStats(bins=bins)
    for p in parts:
        s.update(p)
    x = np.concatenate(parts)
    np.testing.assert_array_equal(s.hist, _dense_reference(x, bins))
    assert s.counts.dtype == np.uint16 and s.nbytes <= 2 * 2 * bins  # 12,000 values: 16-bit counts


def test_coarse_bins_are_exact_groups_of_fine_ones():
    x = np.random.default_rng(2).gamma(2.0, 1.0, 20000).astype(np.float32)
    fine, coarse = TensorStats(bins=BINS), TensorStats(bins=MINMAX_BINS)
    fine.update(x)
    coarse.update(x)
    np.testing.assert_array_equal(coarse.hist, fine.hist.reshape(-1, BINS // MINMAX_BINS).sum(axis=1))
    np.testing.assert_array_equal(fine.merge(TensorStats(bins=MINMAX_BINS)).hist, fine.hist)
    both = fine.merge(coarse)  # different bins merge onto the coarser layout, exactly
    assert both.bins == MINMAX_BINS
    np.testing.assert_array_equal(both.hist, 2 * coarse.hist)


@pytest.mark.parametrize("observer", ["minmax", "ma-minmax", "percentile", "mse", "kl"])
@pytest.mark.parametrize("scheme", ["sym", "asym"])
def test_compact_observer_agreement(observer, scheme):
    """The observers see the same histogram as the old dense int64 one, so results are unchanged;
    and the compact MinMax layout gives the exact MinMax ranges."""
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.normal(0.5, 1, 40000), rng.choice([-20.0, 15.0], 30)]).astype(np.float32)
    s = TensorStats()
    for p in np.array_split(x, 5):
        s.update(p)
    dense = _dense_reference(x, BINS)
    got = observe(s, observer, scheme, 99.9)
    ref = TensorStats.from_meta({**s.to_meta(), "lo": 0}, dense.astype(np.int64))  # the old int64 layout
    assert got == observe(ref, observer, scheme, 99.9)
    if observer == "minmax":
        c = TensorStats(bins=MINMAX_BINS)
        for p in np.array_split(x, 5):
            c.update(p, stride=8)
        assert observe(c, observer, scheme) == (float(x.min()), float(x.max()))


def test_twenty_thousand_tensors_fit_in_100_mb():
    """MinMax (the default) statistics of 20,000 tensors of 8x8x8 activations over 16 samples."""
    rng = np.random.default_rng(4)
    samples = [rng.normal(0, 1, 512).astype(np.float32) for _ in range(16)]
    one = TensorStats(bins=MINMAX_BINS)
    for x in samples:
        one.update(x, stride=8)
    assert one.nbytes <= 2 * MINMAX_BINS  # at most 512 one-byte counts (128 values in the histogram)
    assert 20_000 * (one.nbytes + 1000) < 100e6  # + a generous per-object allowance


def test_a_dynamic_model_opens_with_the_shapes_of_its_statistics(tmp_path, capsys):
    """The laptop side of a cluster run: `qtquant analyze model.onnx --stats model.stats` with no
    --input-shape, for a model with dynamic dims, uses the shapes the statistics were made at."""
    model = save(branchy_concat_model(shape=(1, 3, 8, 8), dynamic=True), tmp_path / "dyn.onnx")
    out = tmp_path / "dyn.stats"
    assert main(["calibrate", str(model), "--input-shape", "x=1x3x12x12", "--calib", "synthetic",
                 "--calib-count", "3", "--stats-out", str(out), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["analyze", str(model), "--stats", str(out), "--no-perf"]) == 0
    assert "x=1x3x12x12" in capsys.readouterr().out
    # shapes given explicitly are still checked against the file
    rc = main(["analyze", str(model), "--stats", str(out), "--input-shape", "x=1x3x16x16", "--no-perf"])
    err = capsys.readouterr().err
    assert rc == 3 and "calibrated with input shapes x=1x3x12x12" in err and err.count("\n") == 1
    # and without statistics the dynamic dims still need them
    assert main(["analyze", str(model), "--calib", "synthetic", "--no-perf"]) == 3
    assert "dynamic dimensions" in capsys.readouterr().err


def test_statistics_of_a_cut_model_say_which_cut(model, tmp_path, capsys):
    out = tmp_path / "cut.stats"
    cut = "conv1_out" if "conv1_out" in _graph(model).tensors else _graph(model).nodes["conv1"].outputs[0]
    assert main(["calibrate", model, "--cut", cut, "--calib", "synthetic", "--calib-count", "3",
                 "--stats-out", str(out), "--quiet"]) == 0
    assert read_stats_header(out).cut == (cut,)
    capsys.readouterr()
    assert main(["analyze", model, "--stats", str(out), "--no-perf"]) == 3
    err = capsys.readouterr().err
    assert f"it was calibrated on the model cut at {cut}: give --cut {cut}" in err and err.count("\n") == 1
    assert main(["analyze", model, "--stats", str(out), "--cut", cut, "--no-perf"]) == 0


def test_a_qdq_file_with_statistics_is_refused_in_one_line(model, tmp_path, capsys):
    """A QDQ file's scales are its own: statistics for it are refused by the app layer, before any
    mismatch of input names or shapes with the file could be reported instead."""
    stats, qdq = tmp_path / "m.stats", tmp_path / "m_qdq.onnx"
    assert main(["calibrate", model, "--calib", "synthetic", "--calib-count", "3", "--stats-out", str(stats),
                 "--quiet"]) == 0
    assert main(["fix", model, "--stats", str(stats), "-o", str(qdq), "--no-perf"]) == 0
    capsys.readouterr()
    for shapes in ([], ["--input-shape", "other=1x3x8x8"]):
        assert main(["analyze", str(qdq), "--stats", str(stats), "--no-perf", *shapes]) == 3
        err = capsys.readouterr().err
        assert "already quantized (QDQ); a statistics file is for float models" in err and err.count("\n") == 1
    with pytest.raises(Exception, match="a statistics file is for float models"):
        open_model(qdq, stats=stats)
    assert open_model(qdq).quantized_file  # without statistics it opens as before
