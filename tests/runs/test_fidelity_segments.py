"""A big export's shipped-model check runs the file as segments cut at int8 hand-over tensors
(shipped.shipped_session): every output bit as one default session of the whole file gives, and the
report says so.  An in-sample check takes its float reference from calibration's own run."""

import dataclasses

import numpy as np
import onnx
import pytest

from builders import detector_model, save, synthetic_model
from qtquant.model import runtime
from qtquant.runs import segments, shipped
from qtquant.app import open_model
from qtquant.app.options import Options
from qtquant.calib import CalibConfig
from qtquant.export.qdq import build_qdq_model
from qtquant.fidelity.measure import measure_session
from qtquant.fidelity.checkruns import _shape_of


@pytest.fixture(scope="module")
def conv_session(tmp_path_factory):
    s = open_model(save(synthetic_model(150, seed=5), tmp_path_factory.mktemp("seg") / "syn.onnx"),
                   options=Options(calib=CalibConfig(count=4)))
    s.run_calibration(keep_check_values=True)  # as qtquant analyze calibrates
    return s


def _chained(model, segs):
    sessions = [runtime.make_session(m, level="default") for m in segs]
    return segments.ChainedSession([([i.name for i in m.graph.input], [o.name for o in m.graph.output])
                                   for m in segs], sessions)


@pytest.mark.parametrize("parts", [2, 3])
def test_segments_give_the_whole_files_outputs_bit_for_bit(conv_session, parts):
    model = build_qdq_model(conv_session).model
    segs = segments.split_model(model, parts, _shape_of(conv_session.graph))
    assert segs is not None and len(segs) == parts
    # Every node in exactly one segment; only int8 hand-overs (and the model input) cross.
    assert sorted(n.name for m in segs for n in m.graph.node) == sorted(n.name for n in model.graph.node)
    producers = {o: n for n in model.graph.node for o in n.output}
    for m in segs[1:]:
        crossing = [i for i in m.graph.input if i.name not in {x.name for x in model.graph.input}]
        assert crossing
        for i in crossing:
            assert producers[i.name].op_type == "QuantizeLinear"
            assert i.type.tensor_type.elem_type == onnx.TensorProto.INT8
    names = [o.name for o in model.graph.output]
    whole = runtime.make_session(model, level="default")
    chained = _chained(model, segs)
    for feed in conv_session.calibration.holdout:
        for a, b in zip(whole.run(names, feed), chained.run(names, feed)):
            assert a.dtype == b.dtype and np.array_equal(a, b)


def test_a_model_with_no_cut_runs_whole(tmp_path):
    s = open_model(save(detector_model(), tmp_path / "det.onnx"), options=Options(calib=CalibConfig(count=2)))
    s.run_calibration()
    model = build_qdq_model(s).model
    assert segments.split_model(model, 2, lambda name: None) is None  # no known shapes: no hand-over
    assert segments.split_model(model, 1, _shape_of(s.graph)) is None


def _fresh(s, calibration):
    other = open_model(s.graph.path, options=s.options)
    other.set_calibration(calibration)
    return other


def test_big_check_runs_segments_and_says_so(conv_session, monkeypatch):
    small = measure_session(_fresh(conv_session, conv_session.calibration), cross_check=True)
    assert "segments" not in small.runtime
    monkeypatch.setattr(shipped, "SPLIT_NODES", 10)
    monkeypatch.setattr(shipped, "SEGMENT_NODES", 200)
    made = []
    real = segments.iter_segments

    def spy(*a, **k):
        segs = real(*a, **k)
        made.append(None if segs is None else list(segs))
        return None if segs is None else iter(made[-1])

    monkeypatch.setattr(shipped, "iter_segments", spy)
    big = measure_session(_fresh(conv_session, conv_session.calibration), cross_check=True)
    assert made and made[0] is not None and len(made[0]) > 1
    assert f"ran as {len(made[0])} segments" in big.runtime and "bit-identical" in big.runtime
    assert big.to_dict()["outputs"] == small.to_dict()["outputs"]  # the same figures, bit for bit
    # That big, the cross-check's session is left out, and the report says so.
    assert "no cross-check" in big.runtime and "no cross-check" not in small.runtime
    assert big.findings == []


def _float_runs(monkeypatch) -> list[str]:
    """The optimisation level of every session the fidelity check makes from now on ("basic": a
    float run)."""
    runs = []
    real = runtime.make_session

    def spy(model, *a, **k):
        runs.append(k.get("level", "basic"))
        return real(model, *a, **k)

    monkeypatch.setattr("qtquant.fidelity.checkruns.make_session", spy)
    return runs


def test_in_sample_check_takes_calibrations_float_values(conv_session, monkeypatch):
    cal = conv_session.calibration
    assert cal.in_sample and len(cal.check_values) == len(cal.holdout)
    for kept, feed in zip(cal.check_values, cal.holdout):
        for name, value in feed.items():
            assert np.array_equal(kept[name], value)
    runs = _float_runs(monkeypatch)
    kept = measure_session(_fresh(conv_session, cal))
    assert "basic" not in runs  # no float run: calibration's values are the reference
    without = measure_session(_fresh(conv_session, dataclasses.replace(cal, check_values=[])))
    assert "basic" in runs  # the float run, as before
    assert kept.to_dict() == without.to_dict()


def test_held_out_check_keeps_no_values(tmp_path):
    s = open_model(save(synthetic_model(40, seed=1), tmp_path / "h.onnx"),
                   options=Options(calib=CalibConfig(count=3, holdout=2)))
    res = s.run_calibration(keep_check_values=True)
    assert not res.in_sample and res.check_values == []
    s2 = open_model(s.graph.path, options=Options(calib=CalibConfig(count=3)))
    assert s2.run_calibration().check_values == []  # only kept when asked (they live as long as the result)
    assert s2.run_calibration(keep_check_values=True).check_values


def test_kept_values_past_the_budget_keep_outputs_and_concat_tensors_first(conv_session, monkeypatch):
    """Past the budget calibration keeps the inputs, then (calib.keep's rule, shared with the fidelity
    prefetch) the outputs and Concat tensors, then the rest while they fit, instead of nothing; the
    check still takes no float run, with the same figures."""
    from qtquant.calib import keep
    from qtquant.calib.keep import keep_order

    graph = conv_session.graph
    full = conv_session.calibration.check_values  # everything fits the real budget
    concat = {t for n in graph.nodes_of("Concat") for t in (*n.inputs, *n.outputs)} & set(graph.observed_tensors)
    first = {*graph.inputs, *graph.outputs, *concat}
    nbytes = lambda names: sum(d[t].nbytes for d in full for t in names)  # noqa: E731
    budget = nbytes(first) + nbytes(set(full[0]) - first) // 3
    monkeypatch.setattr(keep, "VALUES_BUDGET", budget)
    cal = _fresh(conv_session, None).run_calibration(keep_check_values=True)
    kept = cal.check_values
    assert len(kept) == len(cal.holdout) and all(d.keys() == kept[0].keys() for d in kept)
    assert nbytes(kept[0]) <= budget
    order = [t for t in keep_order(graph, graph.observed_tensors) if t not in graph.inputs]
    got = [t for t in kept[0] if t not in graph.inputs]
    assert set(graph.inputs) <= set(kept[0]) and concat and first - set(graph.inputs) <= set(got)
    assert len(got) < len(order)
    assert got == [t for t in order if t in got]  # in the rule's order
    runs = _float_runs(monkeypatch)
    with_kept = measure_session(_fresh(conv_session, cal))
    assert "basic" not in runs
    without = measure_session(_fresh(conv_session, dataclasses.replace(cal, check_values=[])))
    assert with_kept.to_dict() == without.to_dict()


def test_big_augmented_model_calibrates_as_segments_bit_for_bit(tmp_path, monkeypatch):
    """Above calib.runner.SPLIT_NODES calibration's augmented model runs as segments cut where only
    observed tensors (its outputs) cross: the statistics and the kept check values are those of one
    session of the whole model, bit for bit."""
    from qtquant.calib import runner

    path = save(synthetic_model(150, seed=5), tmp_path / "syn.onnx")
    opts = Options(calib=CalibConfig(count=3))
    whole = open_model(path, options=opts).run_calibration(keep_check_values=True)
    monkeypatch.setattr(runner, "SPLIT_NODES", 10)
    monkeypatch.setattr(runner, "SEGMENT_NODES", 30)
    made = []
    real = runner.chained_session

    def spy(segs, make):
        made.append(real(segs, make))
        return made[-1]

    monkeypatch.setattr(runner, "chained_session", spy)
    split = open_model(path, options=opts).run_calibration(keep_check_values=True)
    assert made and made[0].segments > 2
    assert split.ranges == whole.ranges and split.stats.keys() == whole.stats.keys()
    for name, a in whole.stats.items():
        b = split.stats[name]
        assert (a.min, a.max, a.count, a.lo, a.exp, a.total, a.ma_min, a.ma_max) == \
            (b.min, b.max, b.count, b.lo, b.exp, b.total, b.ma_min, b.ma_max), name
        assert np.array_equal(a.counts, b.counts), name
    assert len(split.check_values) == len(whole.check_values) == 3
    for a, b in zip(whole.check_values, split.check_values):
        assert a.keys() == b.keys() and all(np.array_equal(a[n], b[n]) for n in a)
