"""Issue 2: reading scales from an already-quantized QDQ model."""

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from builders import branchy_concat_model, save
from ortkit import ort_qdq_file
from qtquant.app import open_model
from qtquant.model.scales import Scheme


def _quantize(tmp_path, symmetric: bool):
    src = save(branchy_concat_model(gains=(1.0, 3.0, 8.0)), tmp_path / "f.onnx")
    return ort_qdq_file(src, str(tmp_path / ("q_sym.onnx" if symmetric else "q_asym.onnx")), symmetric=symmetric)


def _dq_scales_into(model, node_name):
    """Independent read: the DequantizeLinear scale initializer feeding each input of a node."""
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    prod = {o: n for n in model.graph.node for o in n.output}
    node = next(n for n in model.graph.node if n.name == node_name)
    out = []
    for i in node.input:
        dq = prod[i]
        assert dq.op_type == "DequantizeLinear"
        out.append(float(inits[dq.input[1]]))
    return out


@pytest.mark.parametrize("symmetric", [True, False])
def test_qdq_scales_match_dequantize_initializers(tmp_path, symmetric):
    q = _quantize(tmp_path, symmetric)
    s = open_model(q)
    assert s.quantized_file and s.ready
    assert s.options.scheme is (Scheme.SYMMETRIC_INT8 if symmetric else Scheme.ASYMMETRIC_UINT8)
    (c,) = s.concats()
    expected = _dq_scales_into(onnx.load(q), "cat")
    got = [m.scale for m in c.inputs]
    assert got == pytest.approx(expected, rel=1e-6)
    assert len(set(np.round(expected, 9))) > 1  # the test model really has mismatched scales
    assert c.rescales >= 2
    # the float view has no Q/DQ left and keeps the model's output name
    assert not any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in s.graph.nodes.values())
    assert s.graph.outputs == ["y"]


def test_if_bodies_that_read_a_dequantized_value_keep_reading_it(tmp_path):
    # onnxruntime quantizes around an If whose bodies read outer values by name (silero-vad's decoder):
    # the float view renamed the DQ output its main graph read, not the bodies', whose input then vanished.
    from onnx import TensorProto, helper

    from qtquant.cli import main

    out_vi = helper.make_tensor_value_info("t", TensorProto.FLOAT, None)
    then = helper.make_graph([helper.make_node("Relu", ["cd"], ["t"], name="then_relu")], "then", [], [out_vi])
    other = helper.make_graph([helper.make_node("Neg", ["cd"], ["t"], name="else_neg")], "else", [], [out_vi])
    w = np.random.default_rng(0).integers(-127, 128, (3, 3, 3, 3)).astype(np.int8)
    inits = [numpy_helper.from_array(w, "w_q"), numpy_helper.from_array(np.full(3, 0.01, np.float32), "w_s"),
             numpy_helper.from_array(np.array(0.05, np.float32), "s"),
             numpy_helper.from_array(np.array(0, np.int8), "z"),
             numpy_helper.from_array(np.array(True), "flag")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"], name="qx"),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"], name="dqx"),
             helper.make_node("DequantizeLinear", ["w_q", "w_s"], ["wd"], name="dqw", axis=0),
             helper.make_node("Conv", ["xd", "wd"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("QuantizeLinear", ["c", "s", "z"], ["cq"], name="qc"),
             helper.make_node("DequantizeLinear", ["cq", "s", "z"], ["cd"], name="dqc"),
             helper.make_node("If", ["flag"], ["y"], name="branch", then_branch=then, else_branch=other)]
    g = helper.make_graph(nodes, "if_qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, 8])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m, full_check=True)
    path = save(m, tmp_path / "if_qdq.onnx")
    s = open_model(path)
    assert s.quantized_file and s.domains.domain_of("c").scale == pytest.approx(0.05)
    body = next(n for n in s.graph.model.graph.node if n.op_type == "If").attribute[0].g
    assert list(body.node[0].input) == ["c"]  # the body reads the float view's value
    assert main(["fix", path, "-o", str(tmp_path / "out.onnx"), "--no-perf", "--calib-count", "2"]) == 0
    onnx.checker.check_model(str(tmp_path / "out.onnx"), full_check=True)


@pytest.mark.parametrize("bad", [np.inf, np.nan, -0.5])
def test_a_scale_that_is_not_a_finite_non_negative_number_is_one_line(tmp_path, capsys, bad):
    # (found by the CLI fuzz run: an infinite weight scale opened, numpy's warnings on stderr)
    from qtquant.cli import main

    q = onnx.load(_quantize(tmp_path, True))
    dq = next(n for n in q.graph.node if n.op_type == "DequantizeLinear")
    init = next(t for t in q.graph.initializer if t.name == dq.input[1])
    init.CopyFrom(numpy_helper.from_array(np.full(numpy_helper.to_array(init).shape, bad, np.float32), init.name))
    path = save(q, tmp_path / "bad_scale.onnx")
    assert main(["analyze", path, "--no-perf"]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "finite, non-negative" in err[0] and "Warning" not in err[0]
