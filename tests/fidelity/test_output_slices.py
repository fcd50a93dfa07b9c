"""Per-slice fidelity of output Concats, the float-output default, and the no-signal sentence."""

import dataclasses
import json
import math

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from builders import conv_node, save
from qtquant.cli import main
from qtquant.fidelity.measure import measure_session
from qtquant.model.graph import graph_from_model
from qtquant.app import open_model
from qtquant.fidelity.metrics import ErrorSums, Figure, sqnr_db
from qtquant.quant.outputs import OutputMode, float_output_tensors, output_reached, output_slices
from qtquant.base.vocab import Blank


def head_model(relabel=True, box_gain=300.0, dead=False) -> onnx.ModelProto:
    """x → box conv ×gain ‖ class conv → Sigmoid → Concat → (Reshape → Transpose) → y.

    The Concat joins a wide tensor (pixels) with a narrow one ([0, 1] scores), as detection heads do.
    ``dead=True`` adds an output z = Relu(conv - 1000): zero on any input.
    """
    inits, nodes = [], []
    nodes.append(conv_node(inits, "x", 3, 4, 3, "boxc", seed=1))
    inits.append(numpy_helper.from_array(np.array(box_gain, np.float32), "gain"))
    nodes.append(helper.make_node("Mul", ["boxc_out", "gain"], ["box"], name="box_mul"))
    nodes.append(conv_node(inits, "x", 3, 2, 3, "clsc", gain=3.0, seed=2))
    nodes.append(helper.make_node("Sigmoid", ["clsc_out"], ["score"], name="sig"))
    cat_out = "cat_out" if relabel else "y"
    nodes.append(helper.make_node("Concat", ["box", "score"], [cat_out], name="head", axis=1))
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if relabel:
        inits.append(numpy_helper.from_array(np.array([1, 6, 64], np.int64), "shp"))
        nodes.append(helper.make_node("Reshape", ["cat_out", "shp"], ["flat"], name="reshape"))
        nodes.append(helper.make_node("Transpose", ["flat"], ["y"], name="transpose", perm=[0, 2, 1]))
    if dead:
        nodes.append(conv_node(inits, "x", 3, 2, 1, "deadc", seed=3))
        inits.append(numpy_helper.from_array(np.array(1000.0, np.float32), "thousand"))
        nodes.append(helper.make_node("Sub", ["deadc_out", "thousand"], ["dead_pre"], name="dead_sub"))
        nodes.append(helper.make_node("Relu", ["dead_pre"], ["z"], name="dead_relu"))
        outs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, None))
    g = helper.make_graph(nodes, "head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          outs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.fixture(scope="module")
def head_path(tmp_path_factory):
    return save(head_model(), tmp_path_factory.mktemp("slices") / "head.onnx")


def test_slices_follow_reshape_and_transpose():
    g = graph_from_model(head_model())
    sl = output_slices(g)["y"]
    assert [s.label for s in sl] == ["y[:, 0:4]", "y[:, 4:6]"]
    assert [s.source for s in sl] == ["box", "score"]
    # the labels land where the values do: check against the float model
    sess = ort.InferenceSession(head_model().SerializeToString(), providers=["CPUExecutionProvider"])
    inner = onnx.helper.make_model(head_model().graph, opset_imports=[helper.make_opsetid("", 17)])
    inner.graph.output.append(onnx.ValueInfoProto(name="score"))
    inner.ir_version = 8
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    y, score = ort.InferenceSession(inner.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        ["y", "score"], {"x": x})
    assert np.array_equal(sl[1].take(y).ravel(), score.reshape(2, 64).T.ravel())
    assert sess.run(["y"], {"x": x})[0].shape == (1, 64, 6)


def test_direct_concat_output_and_reach():
    g = graph_from_model(head_model(relabel=False))
    assert [s.label for s in output_slices(g)["y"]] == ["y[0:4]", "y[4:6]"]
    g2 = graph_from_model(head_model())
    assert output_reached(g2, "cat_out") == "y" and output_reached(g2, "box") is None


def test_worst_slice_is_the_headline_when_quantized(head_path):
    s = open_model(head_path)
    s.run_calibration()
    fid = measure_session(s, output_mode=OutputMode.QUANTIZE)
    out = fid.after["y"]
    box, score = out.slices
    # one int8 scale for pixels and scores: the scores die while the whole looks fine
    assert out.whole.sqnr_db > 25 and box.sqnr_db > 25
    assert score.sqnr_db < 10
    assert out.headline is score and fid.sqnr_db["y"] == score.sqnr_db
    assert fid.headline_text("y").startswith("y[:, 4:6] ")
    assert fid.samples == len(s.calibration.holdout) and fid.samples >= 1
    doc = fid.to_dict()
    json.dumps(doc, allow_nan=False)
    assert [x["label"] for x in doc["outputs"]["y"]["slices"]] == ["y[:, 0:4]", "y[:, 4:6]"]
    assert doc["outputs"]["y"]["headline"] == "y[:, 4:6]" and doc["samples"] == fid.samples


def test_auto_keeps_a_mixed_output_concat_in_float(head_path):
    s = open_model(head_path)
    s.run_calibration()
    keep, why = float_output_tensors(s.graph, s.baseline_domains, OutputMode.AUTO, 1.0)
    assert "cat_out" in keep and "y" in keep and "score" not in keep
    assert why and "score" in why[0].text() and "--quantize-outputs" in why[0].text()
    fid = measure_session(s)  # the default export
    assert fid.after["y"].slices[1].sqnr_db > 25
    assert fid.float_outputs and "stays in float" in fid.float_outputs[0]
    # a narrow gap is shared as before: nothing is kept float
    tame = open_model(save(head_model(box_gain=1.0), head_path.replace("head.onnx", "tame.onnx")))
    tame.run_calibration()
    assert float_output_tensors(tame.graph, tame.baseline_domains, OutputMode.AUTO, 1.0)[0] == frozenset()


def _ship_sqnr(exported, float_path, feeds):
    """The exported file run as a user runs it: default options, CPU."""
    fs = ort.InferenceSession(float_path, providers=["CPUExecutionProvider"])
    qs = ort.InferenceSession(exported, providers=["CPUExecutionProvider"])
    ref = np.concatenate([fs.run(["y"], f)[0].ravel() for f in feeds])
    got = np.concatenate([qs.run(["y"], f)[0].ravel() for f in feeds])
    return sqnr_db(ref, got)


@pytest.mark.parametrize("flag", [[], ["--quantize-outputs"]])
def test_fix_figure_agrees_with_the_exported_file(head_path, tmp_path, capsys, flag):
    out = str(tmp_path / "out.onnx")
    assert main(["fix", head_path, "-o", out, "--no-perf", "--json", *flag]) == 0
    doc = json.loads(capsys.readouterr().out)
    fidd = doc["fidelity"]["outputs"]["y"]
    s = open_model(head_path)
    s.run_calibration()  # the same seed and samples as the CLI's
    feeds = list(s.calibration.holdout)
    assert len(feeds) == doc["fidelity"]["samples"]
    assert abs(_ship_sqnr(out, head_path, feeds) - fidd["whole"]["sqnr_db"]) < 0.5
    assert fidd["sqnr_db"] == min(x["sqnr_db"] for x in fidd["slices"])  # the headline is the worst slice
    assert doc["outputs"]["mode"] == ("quantize" if flag else "auto")


def test_fix_table_names_the_worst_slice(head_path, tmp_path, capsys):
    assert main(["fix", head_path, "-o", str(tmp_path / "o.onnx"), "--no-perf", "--quantize-outputs"]) == 0
    text = capsys.readouterr().out
    assert "SQNR y worst slice (dB)" in text and "y[:, 4:6]" in text and "y[:, 0:4] SQNR dB" in text
    assert "sample" in text


def test_no_signal_gets_a_sentence(tmp_path, capsys):
    p = save(head_model(dead=True), tmp_path / "dead.onnx")
    s = open_model(p)
    s.run_calibration()
    fid = measure_session(s)
    z = fid.after["z"].headline
    assert z.sqnr_db is None and "no signal" in z.no_signal and "representative" in z.no_signal
    assert z.blank is Blank.NO_SIGNAL and z.word == "no signal" and not z.measured
    assert math.isnan(fid.sqnr_db["z"])
    assert fid.to_dict()["outputs"]["z"]["reason"] == z.no_signal
    assert fid.to_dict()["outputs"]["z"]["sqnr_db"] is None
    assert main(["analyze", p, "--no-perf"]) == 0
    text = capsys.readouterr().out
    assert "no signal" in text
    # a reference that varies less than one step of its calibrated scale: no number either
    tiny = [{"x": np.full((1, 3, 8, 8), 1e-6, np.float32)} for _ in range(2)]
    s.set_calibration(dataclasses.replace(s.calibration, holdout=tiny, in_sample=False))
    fid2 = measure_session(s)
    assert fid2.samples == 2 and "held out" in fid2.sample_text
    assert all(p_.no_signal for p_ in fid2.after["y"].slices)


def if_model() -> onnx.ModelProto:
    """y = If(flag, then: Relu(x), else: Neg(x)): the computation, x included, is inside the
    subgraphs, which read x from the outer scope (silero-vad's op18_ifless model is built so)."""
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 4, 4])
    then = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="then_relu")], "then", [], [out])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["y"], name="else_neg")], "else", [], [out])
    g = helper.make_graph(
        [helper.make_node("If", ["flag"], ["y"], name="branch", then_branch=then, else_branch=other)], "if",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 4, 4])], [out],
        [numpy_helper.from_array(np.array(True), "flag")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_an_output_quantization_never_reaches_is_identical_in_words(tmp_path, capsys):
    # It printed "inf / 1.00000" before and after: a number that says nothing a reader can use.
    p = save(if_model(), tmp_path / "if.onnx")
    assert main(["analyze", p, "--no-perf", "--calib-count", "2"]) == 0
    text = capsys.readouterr().out
    assert "inf" not in text
    row = next(line for line in text.splitlines() if line.startswith("y "))
    assert row.split() == ["y", "identical", "identical"]
    assert "y: identical: the quantized model's output equals the float model's on the 2 check sample(s)" in text
    assert main(["analyze", p, "--no-perf", "--calib-count", "2", "--json"]) == 0
    y = json.loads(capsys.readouterr().out)["summary"]["fidelity"]["outputs"]["y"]
    assert y["identical"] is True and y["no_signal"] is False and y["sqnr_db"] is None
    # Nothing runs on the BPU either: said in words, and no "0.0 FPS"
    assert main(["analyze", p, "--calib-count", "2"]) == 0
    assert "latency: nothing for the simulator to price on bayes-e" in capsys.readouterr().out
    assert main(["analyze", p, "--calib-count", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["summary"]["fps"] is None


def test_the_word_is_typed_not_read_from_the_sentence():
    # The word came from the sentence's prefix: a reworded sentence would have changed the JSON.
    sums = ErrorSums()
    sums.add(np.ones(4), np.ones(4))
    f = sums.figure("y", None)
    assert f.blank is Blank.NO_SIGNAL and f.to_dict()["no_signal"] is True
    sums = ErrorSums()
    sums.add(np.arange(4.0), np.arange(4.0))
    f = sums.figure("y", 0.01)
    assert f.blank is Blank.IDENTICAL and f.word == "identical" and f.to_dict()["identical"] is True
    reworded = Figure("y", None, None, 0.0, 1, "the output never sees a quantizer", Blank.IDENTICAL)
    assert reworded.word == "identical" and reworded.to_dict()["identical"] is True
    with pytest.raises(ValueError):
        Figure("y", None, None, 0.0, 1, "a sentence without its word")
    assert Figure("y", 30.0, 1.0, 0.0, 1).measured


def test_kernel_divergence_beyond_tolerance_is_a_finding():
    from qtquant.fidelity.measure import KERNEL_TOLERANCE_DB, OutputFidelity, _kernel_findings
    from qtquant.fidelity.metrics import Figure

    def out(db):
        return {"y": OutputFidelity("y", Figure("y", db, 0.9, 1.0, 4), [Figure("y[0:2]", db, 0.9, 1.0, 4)])}

    assert _kernel_findings(out(20.0), out(20.0 + KERNEL_TOLERANCE_DB / 2), ["y"]) == []
    found = _kernel_findings(out(-1.0), out(12.4), ["y"])
    assert len(found) == 2 and "-1.00 dB" in found[0] and "12.40 dB" in found[0]


def test_cross_check_runs_on_a_real_export(head_path):
    s = open_model(head_path)
    s.run_calibration()
    fid = measure_session(s, cross_check=True)
    # onnxruntime's int8 kernels and Q/DQ in float agree on this small model: no finding
    assert fid.findings == [] and "default session options" in fid.runtime
