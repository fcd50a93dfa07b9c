"""Raising an old model's opset for the export keeps the wiring the Q/DQ rewrite follows
(qtquant.export.opset): PP-OCRv4's recognizer (opset 12, Softmaxes fed by shapes onnx's
inference cannot follow) exported a file onnxruntime refused ('Duplicate definition of name')."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from builders import conv_node, save
from ortkit import precise_options
from qtquant.app import open_model
from qtquant.cli import main as cli_main
from qtquant.export.opset import convert_opset, rewiring
from qtquant.export.qdq import build_qdq_model, export_qdq
from qtquant.fidelity.measure import sqnr_db


def softmax_model(axis: int, opset: int = 12) -> onnx.ModelProto:
    """x -> Conv -> Reshape to (1, 8, 16) by a shape onnx cannot work out (a Slice whose bounds go
    through Abs, which its data propagation does not) -> Softmax(axis) -> y, a model output."""
    inits = []
    conv = conv_node(inits, "x", 3, 8, 3, "conv", gain=4.0)
    for name, v in (("lo", [0]), ("hi", [2]), ("rest", [-1])):
        inits.append(numpy_helper.from_array(np.array(v, np.int64), name))
    nodes = [
        conv,
        helper.make_node("Shape", ["conv_out"], ["shp"], name="shape"),
        helper.make_node("Abs", ["lo"], ["lo_abs"], name="abs_lo"),
        helper.make_node("Abs", ["hi"], ["hi_abs"], name="abs_hi"),
        helper.make_node("Slice", ["shp", "lo_abs", "hi_abs"], ["lead"], name="slice"),
        helper.make_node("Concat", ["lead", "rest"], ["target"], name="target_shape", axis=0),
        helper.make_node("Reshape", ["conv_out", "target"], ["flat"], name="reshape"),
        helper.make_node("Softmax", ["flat"], ["y"], name="softmax", axis=axis),
    ]
    g = helper.make_graph(nodes, "softmax", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _session(tmp_path, axis):
    s = open_model(save(softmax_model(axis), tmp_path / f"sm{axis}.onnx"))
    s.run_calibration()
    return s


def _feed():
    return {"x": np.random.default_rng(0).random((1, 3, 4, 4), dtype=np.float32)}


def test_the_model_hides_the_rank_from_onnx_but_not_from_the_graph(tmp_path):
    s = _session(tmp_path, 2)
    vi = {v.name: v for v in s.graph.model.graph.value_info}
    assert not vi["flat"].type.tensor_type.HasField("shape")  # what made the converter rewrite
    assert s.graph.tensors["flat"].shape == (1, 8, 16)


@pytest.mark.int8host
def test_last_axis_softmax_keeps_its_node_when_raised_to_opset_13(tmp_path):
    s = _session(tmp_path, 2)
    out = tmp_path / "fixed.onnx"
    res = export_qdq(s, out)
    assert res.build.opset == 13 and any("opset raised from 12 to 13" in n for n in res.build.notes)
    m = onnx.load(str(out))
    onnx.checker.check_model(m, full_check=True)
    ops = [n.op_type for n in m.graph.node]
    assert "Flatten" not in ops and ops.count("Softmax") == 1
    sm = next(n for n in m.graph.node if n.op_type == "Softmax")
    producer = {o: n for n in m.graph.node for o in n.output}
    # the Softmax reads the quantized Reshape output, and its own output is quantized before y
    assert producer[sm.input[0]].op_type == "DequantizeLinear"
    assert producer["y"].op_type == "DequantizeLinear"
    assert [n.name for n in m.graph.node if "y" in n.output] == [producer["y"].name]
    got = ort.InferenceSession(str(out), precise_options(), providers=["CPUExecutionProvider"]).run(None, _feed())[0]
    ref = ort.InferenceSession(s.graph.model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, _feed())[0]
    assert got.shape == (1, 8, 16) and sqnr_db(ref, got) > 20


@pytest.mark.int8host
def test_a_rewiring_conversion_falls_back_to_per_tensor_weights(tmp_path):
    # Softmax over axis 1 of (1, 8, 16): opset 12 normalises over the 128 values of the flattened
    # rest, opset 13 over the 8 of axis 1, so the converter wraps it in Flatten/Reshape.
    s = _session(tmp_path, 1)
    with pytest.raises(Exception, match="no longer made by Softmax node softmax"):
        convert_opset(s.graph, 13)
    b = build_qdq_model(s)
    assert b.opset == 12 and any("could not raise opset 12 to 13" in n and "per tensor" in n for n in b.notes)
    assert next(o.version for o in b.model.opset_import if o.domain == "") == 12
    onnx.checker.check_model(b.model, full_check=True)
    got = ort.InferenceSession(b.model.SerializeToString(), precise_options(),
                               providers=["CPUExecutionProvider"]).run(None, _feed())[0]
    ref = ort.InferenceSession(s.graph.model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, _feed())[0]
    assert sqnr_db(ref, got) > 20


def test_rewiring_names_what_the_export_could_not_follow(tmp_path):
    s = _session(tmp_path, 2)
    m = onnx.ModelProto.FromString(s.graph.model.SerializeToString())
    assert rewiring(s.graph, m) == ""
    sm = next(n for n in m.graph.node if n.op_type == "Softmax")
    m.graph.node.append(helper.make_node("Identity", [sm.input[0]], ["extra"], name="spy"))
    assert rewiring(s.graph, m) == "the readers of flat changed (spy)"


def test_int16_export_of_a_rewiring_conversion_is_one_line(tmp_path, capsys):
    path = save(softmax_model(1), tmp_path / "sm1.onnx")
    rc = cli_main(["fix", path, "--calib", "synthetic", "--calib-count", "4", "--int16", "conv_out",
                   "-o", str(tmp_path / "out.onnx")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 3 and len(err) == 1
    assert "cannot export int16: raising opset 12 to 21 failed" in err[0] and "no longer made by" in err[0]
    assert not (tmp_path / "out.onnx").exists()
