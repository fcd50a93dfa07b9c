"""A float16 model (``model.half()``) is widened to float32 on open, so that the analysis, the check
and the export all see what an int8 compiler quantizes.  Before, its float16 values counted as int8
in the analysis while the export quantized only its float32 ones (ISNet from
@imgly/background-removal-data: 40 Q/DQ pairs and no weight, the check measuring a mostly float16 model)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from builders import RESCALING_MARCH, branchy_concat_model, half_model, save
from ortkit import precise_options
from qtquant.app import Options, open_model
from qtquant.app.views.concats import model_info
from qtquant.cli import main
from qtquant.export.qdq import build_qdq_model
from qtquant.model.graph import load_graph
from qtquant.model.widen import has_float16


def _run(model_or_path, x):
    src = model_or_path if isinstance(model_or_path, str) else model_or_path.SerializeToString()
    sess = ort.InferenceSession(src, precise_options(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})


def test_a_half_model_opens_widened(tmp_path):
    path = save(half_model(), tmp_path / "half.onnx")
    g = load_graph(path)
    assert g.source_dtype == "float16" and not has_float16(g.model, [n.op_type for n in g.model.graph.node])
    assert all(t.data_type == TensorProto.FLOAT for t in g.model.graph.initializer)
    # Casts between floats are identities now; the Cast of an integer shape stays a Cast, to float32
    assert [g.nodes[n].op_type for n in ("to16", "to32", "count32")] == ["Identity"] * 3
    assert g.nodes["shape16"].op_type == "Cast" and g.nodes["shape16"].attrs["to"] == TensorProto.FLOAT
    assert {"conv0", "half1", "cat"} <= set(g.quantized_tensors) and "conv1" not in g.quantized  # (x0.5 folded)
    assert g.tensors["cat"].dtype_name == "float"
    # The widened model computes what the file does, to float16's precision
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    (want, n_want), (got, n_got) = _run(path, x), _run(g.model, x)
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2)
    assert n_got == n_want == 1 + 8 + 8 + 8  # the sum of the shape [1, 8, 8, 8]
    assert load_graph(save(branchy_concat_model(), tmp_path / "f32.onnx")).source_dtype is None


def test_the_export_of_a_half_model_is_int8_throughout(tmp_path):
    s = open_model(save(half_model(), tmp_path / "half.onnx"), options=Options(march=RESCALING_MARCH))
    s.run_calibration()
    assert len(s.concats()) == 1 and s.concats()[0].rescales == 1  # the x0.5 branch has half the range
    build = build_qdq_model(s)
    m = build.model
    onnx.checker.check_model(m, full_check=True)
    assert not has_float16(m, [n.op_type for n in m.graph.node])
    assert not any("non-float32" in n for n in build.notes)
    makers = {o: n for n in m.graph.node for o in n.output}
    for conv in (n for n in m.graph.node if n.op_type == "Conv"):
        assert makers[conv.input[0]].op_type == "DequantizeLinear"  # the activation
        assert makers[conv.input[1]].op_type == "DequantizeLinear"  # the weight, int8 per channel
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    assert np.isfinite(_run(m, x)[0]).all()
    assert model_info(s).model == "half.onnx (float16, read as float32)"
    assert "widened to float32 on open" in model_info(s).model_tip


def test_the_cli_says_it(tmp_path, capsys):
    path = save(half_model(), tmp_path / "half.onnx")
    assert main(["analyze", path, "--calib-count", "2", "--no-perf"]) == 0
    assert "note: the file computes in float16; it was widened to float32 on open" in capsys.readouterr().out
    assert main(["analyze", path, "--calib-count", "2", "--no-perf", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["source_dtype"] == "float16"
    out = tmp_path / "fixed.onnx"
    assert main(["fix", path, "-o", str(out), "--calib-count", "2", "--no-perf"]) == 0
    assert "non-float32" not in capsys.readouterr().out  # (it said "N non-float32 activations left unquantized")
    m = onnx.load(str(out))
    assert not has_float16(m, [n.op_type for n in m.graph.node])
    assert sum(n.op_type == "QuantizeLinear" for n in m.graph.node) >= 4
    f32 = save(branchy_concat_model(), tmp_path / "f32.onnx")
    assert main(["analyze", f32, "--calib-count", "2", "--no-perf", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["source_dtype"] is None


def test_float16_weights_stored_outside_are_read(tmp_path):
    m = half_model()
    onnx.save(m, str(tmp_path / "ext.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
              location="ext.bin", size_threshold=0)
    g = load_graph(str(tmp_path / "ext.onnx"))
    w = g.initializer("w1")
    assert w.dtype == np.float32 and w.shape == (4, 3, 3, 3)
    want = onnx.numpy_helper.to_array(half_model().graph.initializer[2])  # (saving moved m's out)
    assert want.dtype == np.float16
    np.testing.assert_array_equal(w, want.astype(np.float32))


@pytest.mark.parametrize("where", ["input", "constant", "none"])
def test_what_says_float16(where):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT16 if where == "input" else TensorProto.FLOAT, [2])
    nodes = [helper.make_node("Relu", ["x"], ["y"])]
    if where == "constant":
        nodes.append(helper.make_node("ConstantOfShape", ["s"], ["z"],
                                      value=helper.make_tensor("v", TensorProto.FLOAT16, [1], [1.0])))
    m = helper.make_model(helper.make_graph(nodes, "g", [x], [helper.make_tensor_value_info("y", 1, None)]))
    assert has_float16(m, [n.op_type for n in m.graph.node]) is (where != "none")


def cast_chain_model(qdq: bool = False) -> onnx.ModelProto:
    """x → Conv c0 → Cast(to float32, its own type) → Conv c1 → y, and a Shape cast to float (a
    Cast that stays one); ``qdq``: the Cast's output carries the file's Q/DQ pair (a QDQ file)."""
    rng = np.random.default_rng(5)
    inits = [onnx.numpy_helper.from_array(rng.standard_normal((3, 3, 3, 3)).astype(np.float32) / 5, f"w{i}")
             for i in range(2)]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], name="c0", pads=[1, 1, 1, 1]),
             helper.make_node("Cast", ["c0"], ["same"], name="same_cast", to=TensorProto.FLOAT),
             helper.make_node("Conv", ["same_dq" if qdq else "same", "w1"], ["y"], name="c1", pads=[1, 1, 1, 1]),
             helper.make_node("Shape", ["y"], ["shp"], name="shape"),
             helper.make_node("Cast", ["shp"], ["dims"], name="int_cast", to=TensorProto.FLOAT)]
    if qdq:
        inits += [onnx.numpy_helper.from_array(np.array(0.04, np.float32), "s"),
                  onnx.numpy_helper.from_array(np.array(0, np.int8), "z")]
        nodes[2:2] = [helper.make_node("QuantizeLinear", ["same", "s", "z"], ["same_q"], name="q"),
                      helper.make_node("DequantizeLinear", ["same_q", "s", "z"], ["same_dq"], name="dq")]
    g = helper.make_graph(nodes, "casts", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, 8]),
                           helper.make_tensor_value_info("dims", TensorProto.FLOAT, [4])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_a_cast_to_its_own_type_passes_the_scale_on(tmp_path):
    # silero-vad casts float32 to float32 three times: the Cast's output got no observer, so the
    # next Conv's input had no Q/DQ, and a QDQ file's pair on such a Cast was dropped on export.
    s = open_model(save(cast_chain_model(), tmp_path / "casts.onnx"), cut="y")
    g = s.graph
    assert g.nodes["same_cast"].op_type == "Identity" and "int_cast" not in g.nodes  # (cut at y)
    assert g.cut == ("y",) and {"c0", "same"} <= set(g.quantized)
    s.run_calibration()
    m = build_qdq_model(s).model
    makers = {o: n for n in m.graph.node for o in n.output}
    c1 = next(n for n in m.graph.node if n.name == "c1")
    assert makers[c1.input[0]].op_type == "DequantizeLinear"
    full = load_graph(save(cast_chain_model(), tmp_path / "whole.onnx"))
    assert full.nodes["int_cast"].op_type == "Cast" and "dims" not in full.quantized  # (folded: a constant)

    path = save(cast_chain_model(qdq=True), tmp_path / "qdq.onnx")
    out = tmp_path / "fixed.onnx"
    assert main(["fix", path, "-o", str(out), "--no-perf"]) == 0
    fixed = onnx.load(str(out))
    scales = [onnx.numpy_helper.to_array(t) for t in fixed.graph.initializer if t.name.endswith("scale")]
    assert any(np.isclose(v, 0.04) for v in scales)  # the file's pair on the Cast's output is kept
    x = np.random.default_rng(2).standard_normal((1, 3, 8, 8)).astype(np.float32)
    want, got = _run(path, x)[0], _run(str(out), x)[0]
    np.testing.assert_allclose(got, want, atol=0.05)


@pytest.mark.int8host
def test_a_float16_qdq_file_keeps_its_scales(tmp_path):
    # NVIDIA ModelOpt writes QDQ files in float16 (opset 19+: Q/DQ with float16 scales): widened on
    # open, its scales are read exactly (float16 values widen exactly) and its export runs.
    rng = np.random.default_rng(0)
    h = lambda v: onnx.numpy_helper.from_array(np.asarray(v[1], np.float16), v[0])  # noqa: E731
    inits = [onnx.numpy_helper.from_array(rng.integers(-127, 128, (3, 3, 3, 3)).astype(np.int8), "w_q"),
             h(("w_s", np.full(3, 0.01))), onnx.numpy_helper.from_array(np.zeros(3, np.int8), "w_z"),
             h(("x_s", 0.02)), h(("c_s", 0.05)), onnx.numpy_helper.from_array(np.array(0, np.int8), "z")]
    nodes = [helper.make_node("Cast", ["x"], ["x16"], to=TensorProto.FLOAT16, name="in16"),
             helper.make_node("QuantizeLinear", ["x16", "x_s", "z"], ["xq"], name="qx"),
             helper.make_node("DequantizeLinear", ["xq", "x_s", "z"], ["xd"], name="dqx"),
             helper.make_node("DequantizeLinear", ["w_q", "w_s", "w_z"], ["wd"], name="dqw", axis=0),
             helper.make_node("Conv", ["xd", "wd"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("QuantizeLinear", ["c", "c_s", "z"], ["cq"], name="qc"),
             helper.make_node("DequantizeLinear", ["cq", "c_s", "z"], ["cd"], name="dqc"),
             helper.make_node("Cast", ["cd"], ["y"], to=TensorProto.FLOAT, name="out32")]
    g = helper.make_graph(nodes, "qdq16", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, 8])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    m.ir_version = 9
    path = save(m, tmp_path / "qdq16.onnx")
    s = open_model(path)
    assert s.quantized_file and s.graph.source_dtype == "float16"
    assert s.domains.domain_of("c").scale == float(np.float16(0.05))
    out = tmp_path / "fixed.onnx"
    assert main(["fix", path, "-o", str(out), "--no-perf"]) == 0
    fixed = onnx.load(str(out))
    onnx.checker.check_model(fixed, full_check=True)
    assert not has_float16(fixed, [n.op_type for n in fixed.graph.node])
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    # at most one output step (0.05) apart: the file computes its Conv in float16, the export in float32,
    np.testing.assert_allclose(_run(str(out), x)[0], _run(path, x)[0], atol=0.05 + 2 ** -8)  # (+ float16 rounding at 4)


def test_float16_inside_a_local_function_is_widened(tmp_path):
    body = [helper.make_node("Cast", ["a"], ["a16"], to=TensorProto.FLOAT16),
            helper.make_node("Relu", ["a16"], ["r16"]),
            helper.make_node("Cast", ["r16"], ["b"], to=TensorProto.FLOAT)]
    fn = helper.make_function("local", "Half", ["a"], ["b"], body, [helper.make_opsetid("", 17)])
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
                           helper.make_node("Half", ["c"], ["y"], name="half", domain="local")], "f",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [onnx.numpy_helper.from_array(np.ones((3, 3, 3, 3), np.float32) / 27, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
                          functions=[fn])
    graph = load_graph(save(m, tmp_path / "fn16.onnx"))
    assert graph.source_dtype == "float16"
    assert sorted(n.op_type for n in graph.nodes.values()) == ["Conv", "Identity", "Identity", "Relu"]
    assert all(t.elem_type == TensorProto.FLOAT for t in graph.tensors.values())
