"""The calibration engine on small onnx.helper models: statistics, progress, cancel, jobs, cache."""

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from qtquant.calib import CalibConfig, calibrate
from qtquant.calib.cache import cache_paths, calibrate_cached, load_cached, save_cache
from qtquant.calib.observers import observe
from qtquant.base.errors import CalibrationDataError, Cancelled
from qtquant.model.graph import graph_from_model


def _single_input_model():
    """x -> Mul(2) -> Sub(1) -> Relu -> Concat with Sigmoid(x); observed: x, mul, sub, relu, sig, cat."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    inits = [helper.make_tensor("two", TensorProto.FLOAT, [], [2.0]),
             helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])]
    nodes = [helper.make_node("Mul", ["x", "two"], ["m"], name="mul"),
             helper.make_node("Sub", ["m", "one"], ["s"], name="sub"),
             helper.make_node("Relu", ["s"], ["r"], name="relu"),
             helper.make_node("Sigmoid", ["x"], ["g"], name="sig"),
             helper.make_node("Concat", ["r", "g"], ["y"], name="cat", axis=1)]
    g = helper.make_graph(nodes, "single", [x], [y], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _two_input_model():
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 4])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 2])
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, None)
    nodes = [helper.make_node("Tanh", ["a"], ["ta"], name="tanh"),
             helper.make_node("Exp", ["b"], ["eb"], name="exp"),
             helper.make_node("Concat", ["ta", "eb"], ["out"], name="cat", axis=1)]
    g = helper.make_graph(nodes, "two", [a, b], [out])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def graph():
    return graph_from_model(_single_input_model())


def _expected_minmax(feeds):
    """The model evaluated in numpy, min/max per tensor over ``feeds``."""
    vals = {}
    for f in feeds:
        x = f["x"].astype(np.float64)
        r = np.maximum(x * 2 - 1, 0)
        g = 1 / (1 + np.exp(-x))
        for k, v in {"x": x, "m": x * 2, "s": x * 2 - 1, "r": r, "g": g, "y": np.concatenate([r, g], 1)}.items():
            lo, hi = vals.get(k, (np.inf, -np.inf))
            vals[k] = (min(lo, v.min()), max(hi, v.max()))
    return vals


def test_minmax_matches_numpy_and_holdout_is_held_back(graph, tmp_path):
    rng = np.random.default_rng(0)
    data = rng.normal(0, 1, (10, 3, 4, 6)).astype(np.float32)
    data += np.arange(10, dtype=np.float32)[:, None, None, None] * 0.5  # each sample its own range
    np.save(tmp_path / "d.npy", data)
    res = calibrate(graph, CalibConfig(source=str(tmp_path / "d.npy"), count=7, holdout=3))
    assert set(res.stats) == set(graph.observed_tensors) == {"x", "m", "s", "r", "g", "y"}
    assert res.batches == 7 and len(res.holdout) == 3
    held = {float(f["x"].mean()) for f in res.holdout}
    used = [{"x": data[i:i + 1]} for i in range(10) if float(data[i].mean()) not in held]
    assert len(used) == 7
    exp = _expected_minmax(used)
    for name, (lo, hi) in exp.items():
        assert res.ranges[name] == pytest.approx((lo, hi), rel=1e-5, abs=1e-6)
        assert res.stats[name].count == 7 * (144 if name == "y" else 72)
    assert res.stats["x"].samples == 7


def test_progress_after_each_batch(graph):
    calls = []
    res = calibrate(graph, CalibConfig(count=5), progress=lambda d, t: calls.append((d, t)))
    assert calls == [(i, 5) for i in range(1, 6)] and res.batches == 5


def test_cancel_between_batches(graph):
    calls = []
    with pytest.raises(Cancelled):
        calibrate(graph, CalibConfig(count=50), progress=lambda d, t: calls.append(d),
                  cancel=lambda: len(calls) >= 2)
    assert calls == [1, 2]  # stopped at the next batch boundary
    with pytest.raises(Cancelled):
        calibrate(graph, CalibConfig(count=5), cancel=lambda: True)


def test_observers_and_schemes_through_the_engine(graph):
    base = calibrate(graph, CalibConfig(count=6, observer="minmax", hist_stride=1))
    for obs in ("ma-minmax", "percentile", "mse", "kl"):
        for scheme in ("sym", "asym"):
            res = calibrate(graph, CalibConfig(count=6, observer=obs, scheme=scheme))
            for name, s in res.stats.items():
                assert res.ranges[name] == observe(s, obs, scheme, 99.99)
                lo, hi = res.ranges[name]
                assert base.ranges[name][0] <= lo <= hi <= base.ranges[name][1]
            # the same statistics, re-observed without a model run
            again = base.recompute(observer=obs, scheme=scheme)
            assert again.ranges == res.ranges


def test_multi_input_npz(tmp_path):
    g = graph_from_model(_two_input_model())
    rng = np.random.default_rng(1)
    a = rng.uniform(-3, 3, (6, 4)).astype(np.float32)
    b = rng.uniform(-1, 2, (6, 2)).astype(np.float32)
    np.savez(tmp_path / "ab.npz", a=a, b=b)
    res = calibrate(g, CalibConfig(source=str(tmp_path / "ab.npz"), count=6, holdout=0))
    assert res.ranges["a"] == pytest.approx((a.min(), a.max()))
    assert res.ranges["b"] == pytest.approx((b.min(), b.max()))
    assert res.ranges["eb"] == pytest.approx((np.exp(b).min(), np.exp(b).max()), rel=1e-5)
    assert res.ranges["out"] == pytest.approx((np.tanh(a).min(), np.exp(b).max()), rel=1e-5)
    np.savez(tmp_path / "bad.npz", a=a)
    with pytest.raises(CalibrationDataError, match="bad.npz.*'b'"):
        calibrate(g, CalibConfig(source=str(tmp_path / "bad.npz")))


@pytest.mark.parametrize("observer", ["minmax", "percentile"])
def test_nan_activation_names_tensor_and_sample(tmp_path, observer):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    m = helper.make_model(helper.make_graph([helper.make_node("Log", ["x"], ["y"], name="log")], "g", [x], [y]),
                          opset_imports=[helper.make_opsetid("", 17)])
    np.save(tmp_path / "neg.npy", -np.ones((2, 4), np.float32))
    with pytest.raises(CalibrationDataError, match="'y'.*neg.npy"):
        calibrate(graph_from_model(m), CalibConfig(source=str(tmp_path / "neg.npy"), holdout=0, observer=observer))


def test_image_folder_end_to_end(graph, tmp_path):
    from PIL import Image

    for k in range(4):
        Image.new("RGB", (12, 8), (60 * k, 255 - 60 * k, 128)).save(tmp_path / f"{k}.png")
    res = calibrate(graph, CalibConfig(source=str(tmp_path), count=3, holdout=1, mean="0.5,0.5,0.5",
                                       std="0.5,0.5,0.5"))
    lo, hi = res.ranges["x"]
    assert -1.0 <= lo < hi <= 1.0 and res.batches == 3 and res.holdout[0]["x"].shape == (1, 3, 4, 6)


@pytest.mark.slow
def test_jobs_merge_equals_single_process(graph):
    one = calibrate(graph, CalibConfig(count=9, observer="ma-minmax"))
    calls = []
    two = calibrate(graph, CalibConfig(count=9, observer="ma-minmax", jobs=2),
                    progress=lambda d, t: calls.append((d, t)))
    assert calls[-1] == (9, 9) and len(calls) == 9
    for name in one.stats:
        a, b = one.stats[name], two.stats[name]
        np.testing.assert_array_equal(a.hist, b.hist)
        assert (a.min, a.max, a.count) == (b.min, b.max, b.count)
        assert two.ranges[name] == pytest.approx(one.ranges[name], rel=1e-12)


@pytest.mark.parametrize("cpus, jobs, want", [(16, 1, 8), (16, 2, 4), (16, 4, 2), (16, 8, 1), (2, 2, 1), (2, 1, 1)])
def test_jobs_workers_split_the_cores_over_their_lanes(graph, monkeypatch, cpus, jobs, want):
    """Each --jobs worker runs LANES samples at once: its sessions get the cores over jobs x LANES,
    never more in flight than the machine has (cpu_count // jobs a session doubled them)."""
    from qtquant.base import childproc
    from qtquant.calib import parallel, runner
    from qtquant.calib.stats import TensorStats

    monkeypatch.setattr(runner.os, "cpu_count", lambda: cpus)
    assert runner.session_threads(jobs) == want
    sent = []

    def run_all(workers, requests, **kw):
        sent.extend(r[5] for r in requests)  # the threads field of each worker's request
        return [{n: TensorStats() for n in names} for _ in requests]

    names = ["x", "g"]
    monkeypatch.setattr(childproc, "run_all", run_all)
    parallel.run_parallel(graph, names, None, list(range(jobs * 3)), jobs)
    assert sent == [want] * jobs


@pytest.mark.slow
def test_isolated_calibration_equals_in_process(graph, monkeypatch):
    from qtquant.calib import parallel

    monkeypatch.setattr(parallel, "_PART", 2)  # several parts per worker, merged back
    one = calibrate(graph, CalibConfig(count=5, observer="percentile"))
    iso = calibrate(graph, CalibConfig(count=5, observer="percentile"), isolate=True)
    assert list(iso.stats) == list(one.stats) and len(one.stats) > 2
    for name in one.stats:
        np.testing.assert_array_equal(one.stats[name].hist, iso.stats[name].hist)
        assert iso.ranges[name] == one.ranges[name]
    assert iso.batches == one.batches and len(iso.holdout) == len(one.holdout)


def test_jobs_cancel_and_worker_errors(graph, tmp_path):
    calls = []
    with pytest.raises(Cancelled):
        calibrate(graph, CalibConfig(count=400, jobs=2), progress=lambda d, t: calls.append(d),
                  cancel=lambda: len(calls) >= 3)
    assert 3 <= len(calls) < 400
    a = np.zeros((6, 3, 4, 6), np.float32)
    a[5] = np.nan
    np.save(tmp_path / "n.npy", a)
    with pytest.raises(CalibrationDataError, match="n.npy"):
        calibrate(graph, CalibConfig(source=str(tmp_path / "n.npy"), count=6, holdout=0, jobs=2))



def test_merge_results(graph, tmp_path):
    np.save(tmp_path / "a.npy", np.random.default_rng(2).normal(0, 1, (4, 3, 4, 6)).astype(np.float32))
    np.save(tmp_path / "b.npy", np.random.default_rng(3).normal(0, 9, (4, 3, 4, 6)).astype(np.float32))
    (tmp_path / "ab").mkdir()
    for n in "ab":
        (tmp_path / "ab" / f"{n}.npy").write_bytes((tmp_path / f"{n}.npy").read_bytes())
    cfg = dict(count=8, holdout=0, observer="percentile")
    ra = calibrate(graph, CalibConfig(source=str(tmp_path / "a.npy"), **cfg))
    rb = calibrate(graph, CalibConfig(source=str(tmp_path / "b.npy"), **cfg))
    rab = calibrate(graph, CalibConfig(source=str(tmp_path / "ab"), **cfg))
    merged = ra.merge(rb)
    assert merged.batches == 8
    for name in rab.stats:
        np.testing.assert_array_equal(merged.stats[name].hist, rab.stats[name].hist)
        assert merged.ranges[name] == rab.ranges[name]


def test_pooled_range(graph):
    res = calibrate(graph, CalibConfig(count=4, holdout=0, observer="percentile"))
    lo, hi = res.pooled_range(["r", "g", "not-a-tensor"], 100.0)
    assert hi == pytest.approx(max(res.ranges["r"][1], res.ranges["g"][1]))
    assert lo == pytest.approx(-hi) or lo >= min(res.ranges["r"][0], res.ranges["g"][0])
    assert res.pooled_range(["nope"], 99.9) is None
    p = res.pooled_range(["r", "g"], 50.0)
    assert p[1] < hi


def test_cache_round_trip(graph, tmp_path):
    np.save(tmp_path / "d.npy", np.random.default_rng(4).normal(0, 1, (6, 3, 4, 6)).astype(np.float32))
    cfg = CalibConfig(source=str(tmp_path / "d.npy"), count=4, holdout=2, observer="percentile")
    cache = tmp_path / "cache"
    assert load_cached(graph, cfg, cache) is None
    res = calibrate(graph, cfg)
    jpath = save_cache(graph, res, cache)
    assert jpath.suffix == ".json" and cache_paths(cache, json.loads(jpath.read_text())["key"])[1].is_file()
    back = load_cached(graph, cfg, cache)
    assert back is not None and back.batches == res.batches
    for name, s in res.stats.items():
        t = back.stats[name]
        np.testing.assert_array_equal(s.hist, t.hist)
        assert (s.min, s.max, s.exp, s.count, s.ma_min) == (t.min, t.max, t.exp, t.count, t.ma_min)
    assert back.ranges == res.ranges
    for fa, fb in zip(res.holdout, back.holdout):
        np.testing.assert_array_equal(fa["x"], fb["x"])
    # observer and scheme are not part of the key: ranges are recomputed from the cached statistics
    kl = load_cached(graph, CalibConfig(source=cfg.source, count=4, holdout=2, observer="kl", scheme="asym"), cache)
    assert kl.ranges == calibrate(graph, CalibConfig(source=cfg.source, count=4, holdout=2, observer="kl",
                                                     scheme="asym")).ranges
    # other data configuration, changed data, or a damaged file: a miss, never an error
    assert load_cached(graph, CalibConfig(source=cfg.source, count=3, holdout=2, observer="mse"), cache) is None
    # minmax observers keep a subsampled histogram (stride 8), so they do not share entries with the others
    assert load_cached(graph, CalibConfig(source=cfg.source, count=4, holdout=2), cache) is None
    jpath.write_text("{broken")
    assert load_cached(graph, cfg, cache) is None
    save_cache(graph, res, cache)
    np.save(tmp_path / "d.npy", np.zeros((6, 3, 4, 6), np.float32))
    assert load_cached(graph, cfg, cache) is None
    assert not list(cache.glob("*.npz"))[0].read_bytes().count(b"pickle")


def test_calibrate_cached_runs_once(graph, tmp_path):
    calls = []
    cfg = CalibConfig(count=3)
    a = calibrate_cached(graph, cfg, tmp_path, progress=lambda d, t: calls.append(d))
    b = calibrate_cached(graph, cfg, tmp_path, progress=lambda d, t: calls.append(d))
    assert calls == [1, 2, 3] and a.ranges == b.ranges


def test_cli_analyze_with_image_folder(tmp_path, capsys):
    from PIL import Image

    from qtquant.cli import main

    model = tmp_path / "m.onnx"
    onnx.save(_single_input_model(), str(model))
    (tmp_path / "imgs").mkdir()
    for k in range(3):
        Image.new("RGB", (8, 8), (80 * k, 20, 200)).save(tmp_path / "imgs" / f"{k}.jpg")
    rc = main(["analyze", str(model), "--calib", str(tmp_path / "imgs"), "--observer", "percentile",
               "--mean", "0.5,0.5,0.5", "--std", "0.2,0.2,0.2", "--no-perf", "--no-fidelity", "--json"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    doc = json.loads(out.out)
    assert doc["calibration"]["observer"] == "percentile" and doc["calibration"]["samples"] == 3  # all 3 images
    rc = main(["analyze", str(model), "--calib", str(tmp_path / "nothing"), "--no-perf"])
    assert rc == 3 and "not found" in capsys.readouterr().err


def test_minmax_histogram_stride(graph, tmp_path):
    data = np.random.default_rng(7).normal(0, 1, (3, 3, 4, 6)).astype(np.float32)
    np.save(tmp_path / "d.npy", data)
    res = calibrate(graph, CalibConfig(source=str(tmp_path / "d.npy"), count=3, holdout=0))
    assert res.config.stride == 8
    for name, fn in (("x", lambda x: x), ("m", lambda x: x * 2)):
        s = res.stats[name]
        flat = [fn(data[i].astype(np.float64)).reshape(-1) for i in range(3)]
        sub = np.concatenate([f[(np.arange(f.size) // 64) % 8 == 0] for f in flat])  # every 8th block of 64
        assert s.stride == 8 and s.count == data.size and s.hist.sum() == sub.size
        np.testing.assert_array_equal(s.hist, np.histogram(sub, bins=s.edges)[0])
        assert (s.min, s.max) == pytest.approx((fn(data).min(), fn(data).max()))  # exact over all values
    full = calibrate(graph, CalibConfig(source=str(tmp_path / "d.npy"), count=3, holdout=0, observer="kl"))
    assert full.config.stride == 1 and full.stats["x"].hist.sum() == data.size


@pytest.mark.parametrize("observer", ["minmax", "kl"])
def test_float16_model(tmp_path, observer):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT16, None)
    nodes = [helper.make_node("Tanh", ["x"], ["t"], name="tanh"), helper.make_node("Relu", ["t"], ["y"], name="relu")]
    m = helper.make_model(helper.make_graph(nodes, "f16", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])
    data = np.linspace(-3, 3, 40, dtype=np.float16).reshape(5, 8)
    np.save(tmp_path / "h.npy", data)
    res = calibrate(graph_from_model(m), CalibConfig(source=str(tmp_path / "h.npy"), count=5, holdout=0,
                                                     observer=observer))
    assert res.stats["t"].count == 40 and res.stats["x"].count == 40
    assert (res.stats["x"].min, res.stats["x"].max) == (-3.0, 3.0)
    t = np.tanh(data.astype(np.float32)).astype(np.float16)
    assert res.stats["t"].min == pytest.approx(float(t.min()), abs=1e-3)
    assert res.stats["t"].max == pytest.approx(float(t.max()), abs=1e-3)


def test_augmented_model_only_adds_outputs_and_lanes_do_not_change_statistics(graph, tmp_path, monkeypatch):
    """The augmented model is the model with the observed tensors as outputs (numpy takes min and
    max).  Statistics are bit for bit the same with one lane or two, and whether small tensors of
    one size are reduced together (update_rows) or one by one."""
    from qtquant.calib import augment as aug
    from qtquant.calib import runner

    names = [n for n in graph.observed_tensors if n != "x"]
    m, plan = aug.augment(graph.model, names)
    assert [n.name for n in m.graph.node] == [n.name for n in graph.model.graph.node]
    assert plan.fetch == plan.tensors == tuple(names) and set(names) <= {o.name for o in m.graph.output}
    rng = np.random.default_rng(3)
    np.save(tmp_path / "d.npy", rng.normal(0, 2, (9, 3, 4, 6)).astype(np.float32))
    runs = {}
    for lanes, rows_min in ((1, 10**9), (2, 10**9), (2, 1), (1, 1)):  # (1, 1): every size batched
        monkeypatch.setattr(runner, "LANES", lanes)
        monkeypatch.setattr(runner, "ROWS_MIN", rows_min)
        for observer in ("minmax", "percentile"):
            cfg = CalibConfig(source=str(tmp_path / "d.npy"), count=9, holdout=0, observer=observer)
            runs[lanes, rows_min, observer] = calibrate(graph, cfg).stats
    for (lanes, rows_min, observer), stats in runs.items():
        want = runs[1, 10**9, observer]
        for name, w in want.items():
            got = stats[name]
            assert (got.min, got.max, got.count, got.samples, got.ma_min, got.ma_max, got.exp, got.lo) == \
                (w.min, w.max, w.count, w.samples, w.ma_min, w.ma_max, w.exp, w.lo), (lanes, rows_min, name)
            assert np.array_equal(got.hist, w.hist), (lanes, rows_min, name)


def test_in_sample_check_feeds_come_from_the_run_without_a_second_load(graph, tmp_path, monkeypatch):
    """An in-sample check's feeds are copies of what the calibration run loaded: every sample is
    loaded once, and the feeds equal the data (a held-out check still loads its samples itself)."""
    from qtquant.calib import sources

    data = np.random.default_rng(4).normal(0, 1, (5, 3, 4, 6)).astype(np.float32)
    np.save(tmp_path / "d.npy", data)
    loaded = []
    real = sources.ArraySource.feeds

    def counting(self, refs):
        for ref, feed in real(self, refs):
            loaded.append(ref)
            yield ref, feed

    monkeypatch.setattr(sources.ArraySource, "feeds", counting)
    res = calibrate(graph, CalibConfig(source=str(tmp_path / "d.npy"), count=5, holdout=0))
    assert res.in_sample and len(res.holdout) == 5 and sorted(loaded) == sorted(set(loaded)) and len(loaded) == 5
    got = sorted(f["x"].tobytes() for f in res.holdout)
    assert got == sorted(row[None].tobytes() for row in data)
    assert all(f["x"].base is None or f["x"].base.size == f["x"].size for f in res.holdout)  # copies, not views
    loaded.clear()
    held = calibrate(graph, CalibConfig(source=str(tmp_path / "d.npy"), count=3, holdout=2))
    assert not held.in_sample and len(held.holdout) == 2 and len(loaded) == 5
