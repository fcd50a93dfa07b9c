"""The sensitivity estimate's runs from the cuts give what runs of the whole gated model give."""

import numpy as np
import onnx
import pytest
from builders import save, spiky_chain_model, yolov8n

from qtquant.fidelity.accuracy import gatedruns
from qtquant.fidelity.accuracy.check import Bench
from qtquant.fidelity.accuracy.gatedruns import GatedRunner, plan_cuts
from qtquant.fidelity.accuracy.sensitivity import _gate, estimate, gated_model, units_of
from qtquant.fidelity.accuracy.tensors import dequantized_names, tensor_errors
from qtquant.app import open_model
from qtquant.model.runtime import make_session


def _make(m):
    return make_session(m, None, spinning=False, level="basic")


def _setup(path):
    s = open_model(path, [])
    s.run_calibration()
    bench = Bench(s)
    units = units_of(bench.graph, s.domains, tensor_errors(bench), bench.export_float)
    model = bench.build(s.domains).model
    return bench, units, gated_model(model, dequantized_names(model), units)


def test_runs_from_the_cuts_equal_runs_of_the_whole_model(tmp_path, monkeypatch):
    # a detector: residual skips and the neck's long ones cross the cuts, and it has three outputs
    bench, units, gated = _setup(save(yolov8n(size=64, nc=4), tmp_path / "y.onnx"))
    names = [_gate(k) for k in range(len(units))]
    feeds = bench.feeds[:2]
    cuts = plan_cuts(gated, names)
    assert len(cuts) == gatedruns.MAX_CUTS and all(0 < c.crossing.__len__() <= gatedruns.MAX_CROSS for c in cuts)
    monkeypatch.setattr(gatedruns, "MIN_SAVED_S", 0.0)  # cut even a model this small
    runner = GatedRunner(gated, names, bench.outs, feeds, _make)
    whole = _make(gated)
    ones = dict.fromkeys(names, np.array(True))
    for i, feed in enumerate(feeds):
        for a, b in zip(runner.run(i, ones), whole.run(bench.outs, {**feed, **ones})):
            assert np.array_equal(a, b)
    started = 0
    for k, g in enumerate(names):
        gates = {**ones, g: np.array(False)}
        for i, feed in enumerate(feeds):
            got, want = runner.run(i, gates, g), whole.run(bench.outs, {**feed, **gates})
            for a, b in zip(got, want):
                np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4 * float(np.abs(b).max()))
        started += g in runner._start
    assert runner.suffixes == len(cuts)
    # every unit past the first cut starts at a cut: most of them
    assert started > len(names) // 2


def test_a_light_model_is_not_cut(tmp_path):
    bench, units, gated = _setup(save(spiky_chain_model(), tmp_path / "c.onnx"))
    names = [_gate(k) for k in range(len(units))]
    runner = GatedRunner(gated, names, bench.outs, bench.feeds[:2], _make)
    ones = dict.fromkeys(names, np.array(True))
    runner.run(0, ones)
    runner.run(1, ones)
    runner.run(0, {**ones, names[-1]: np.array(False)}, names[-1])
    assert runner.suffixes == 0  # the runs a cut saves are worth less than a session


def test_a_graph_with_subgraphs_is_not_cut():
    from onnx import TensorProto, helper

    then = helper.make_graph([helper.make_node("Identity", ["x"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", TensorProto.FLOAT, [1])])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["r"]),
                           helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=then),
                           helper.make_node("Where", ["qtq_gate_0", "r", "y"], ["z"])], "g",
                          [helper.make_tensor_value_info(n, t, [1]) for n, t in
                           (("x", TensorProto.FLOAT), ("c", TensorProto.BOOL), ("qtq_gate_0", TensorProto.BOOL))],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1])])
    assert plan_cuts(helper.make_model(g), ["qtq_gate_0"]) == []


def test_estimate_is_the_same_with_the_cuts(tmp_path, monkeypatch):
    bench, units, _ = _setup(save(yolov8n(size=64, nc=4), tmp_path / "y.onnx"))
    monkeypatch.setattr(gatedruns, "MIN_SAVED_S", float("inf"))
    base, per = estimate(bench, units)
    monkeypatch.setattr(gatedruns, "MIN_SAVED_S", 0.0)
    base2, per2 = estimate(bench, units)
    assert base2 == base
    assert per2.keys() == per.keys()
    for node in per:
        assert per2[node][1] == per[node][1] and per2[node][0] == pytest.approx(per[node][0], abs=0.01), node


def test_suffix_is_a_valid_model(tmp_path):
    bench, units, gated = _setup(save(yolov8n(size=64, nc=4), tmp_path / "y.onnx"))
    names = [_gate(k) for k in range(len(units))]
    cut = plan_cuts(gated, names)[1]
    types = {t: onnx.helper.make_tensor_value_info(t, onnx.TensorProto.FLOAT, ["n"]) for t in cut.crossing}
    consts = gatedruns._scan(gated, names).consts
    m = gatedruns._suffix(gated, cut, types, bench.outs, consts)
    onnx.checker.check_model(m)
    assert len([k for k in range(cut.at, len(gated.graph.node)) if k not in consts]) < len(m.graph.node) \
        < len(gated.graph.node) - cut.at + len(consts)  # the suffix's own nodes and the constants it reads
    assert {i.name for i in m.graph.input} >= set(cut.crossing)


def _gated_chain(n: int = 24):
    """x -> n blocks h = Where(g_k, 1.25 * relu(h), relu(h)) + 0.5; an output early on, and x read again at the end
    (a model input that crosses every cut)."""
    from onnx import TensorProto, helper

    nodes, inits = [], [onnx.numpy_helper.from_array(np.array(1.25, np.float32), "k"),
                        onnx.numpy_helper.from_array(np.array(0.5, np.float32), "c")]
    h = "x"
    for i in range(n):
        nodes += [helper.make_node("Relu", [h], [f"r{i}"]), helper.make_node("Mul", [f"r{i}", "k"], [f"m{i}"]),
                  helper.make_node("Where", [f"qtq_gate_{i}", f"m{i}", f"r{i}"], [f"w{i}"]),
                  helper.make_node("Sub", [f"w{i}", "c"], [f"h{i}"])]
        h = f"h{i}"
    nodes.append(helper.make_node("Add", [h, "x"], ["y"]))
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])]
    inputs += [helper.make_tensor_value_info(f"qtq_gate_{i}", TensorProto.BOOL, []) for i in range(n)]
    outputs = [helper.make_tensor_value_info(t, TensorProto.FLOAT, [1, 4]) for t in ("y", "h1")]
    g = helper.make_graph(nodes, "chain", inputs, outputs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), [f"qtq_gate_{i}" for i in range(n)]


def test_early_outputs_and_late_inputs(monkeypatch):
    model, names = _gated_chain()
    cuts = plan_cuts(model, names)
    assert cuts and all("x" in c.crossing for c in cuts)  # the model input the last node reads
    assert all("h1" in c.outputs_before for c in cuts)  # an output made before every cut
    monkeypatch.setattr(gatedruns, "MIN_SAVED_S", 0.0)
    feeds = [{"x": np.array([[1.0, -2.0, 3.0, 0.25]], np.float32)}, {"x": np.full((1, 4), 2.0, np.float32)}]
    runner = GatedRunner(model, names, ["y", "h1"], feeds, _make)
    whole = _make(model)
    ones = dict.fromkeys(names, np.array(True))
    for i in range(len(feeds)):
        runner.run(i, ones)
    for g in names:
        gates = {**ones, g: np.array(False)}
        for i, feed in enumerate(feeds):
            for a, b in zip(runner.run(i, gates, g), whole.run(["y", "h1"], {**feed, **gates})):
                assert np.array_equal(a, b), g
    assert runner.suffixes == len(cuts) and len(runner._start) > len(names) // 2


def test_what_crosses_stays_within_its_budget(monkeypatch):
    model, names = _gated_chain()
    monkeypatch.setattr(gatedruns, "MIN_SAVED_S", 0.0)
    monkeypatch.setattr(gatedruns, "VALUES_BUDGET", 2 * 16)  # two samples: one float32 [1, 4] value each
    feeds = [{"x": np.ones((1, 4), np.float32)}, {"x": np.ones((1, 4), np.float32)}]
    runner = GatedRunner(model, names, ["y"], feeds, _make)
    ones = dict.fromkeys(names, np.array(True))
    for i in range(2):
        runner.run(i, ones)
    runner.run(0, {**ones, names[-1]: np.array(False)}, names[-1])
    # each cut keeps the chain's value (16 bytes a sample; x, a model input, is in the feed): one cut fits
    assert runner.suffixes == 1
