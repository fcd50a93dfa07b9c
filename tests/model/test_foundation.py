"""Issue 2: graph model, op registry, scale domains, Concat analysis."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from builders import RESCALING_MARCH, branchy_concat_model, save
from qtquant.calib.engine import CalibConfig, CalibrationResult, TensorStats
from qtquant.quant.domains import build_domains
from qtquant.base.errors import ModelError, QtQuantError, ShapeError, first_line
from qtquant.model.graph import graph_from_model, load_graph
from qtquant.model.ops import Role, handler_for
from qtquant.model.runtime import run_with_outputs
from qtquant.app import Options, Session


def _minmax(graph, n=4, seed=0):
    rng = np.random.default_rng(seed)
    shape = graph.input_shapes["x"]
    mins, maxs = {}, {}
    for _ in range(n):
        v = run_with_outputs(graph, graph.observed_tensors, {"x": rng.random(shape, dtype=np.float32)})
        for k, a in v.items():
            mins[k] = min(mins.get(k, np.inf), float(a.min()))
            maxs[k] = max(maxs.get(k, -np.inf), float(a.max()))
    return {k: (mins[k], maxs[k]) for k in mins}


def test_pass_through_chain_shares_domain():
    g = graph_from_model(branchy_concat_model(chain=True))
    ranges = _minmax(g)
    dm = build_domains(g, ranges)
    # Relu computes (own observer); MaxPool passes its input's quantization on.
    assert dm.of["relu0_out"] == dm.of["pool0_out"]
    # conv0's raw output exists only inside the fused Conv+Relu layer: no observer, no domain
    assert "conv0_out" not in dm.of and not g.is_quantized("conv0_out")
    assert g.observed("relu0_out") and not g.observed("pool0_out")
    assert "pool0_out" not in g.observed_tensors


def test_concat_analysis_counts_rescales_and_bits():
    g = graph_from_model(branchy_concat_model(gains=(1.0, 3.0, 8.0)))
    ranges = {"x": (0.0, 1.0), "conv0_out": (-1.0, 1.0), "conv1_out": (-3.0, 2.0),
              "conv2_out": (-2.0, 8.0), "cat_out": (-3.0, 8.0), "y": (0.0, 8.0)}
    s = Session(g, Options(march=RESCALING_MARCH))  # (bayes-e writes all three branches at the output's scale)
    s.set_calibration(CalibrationResult({k: TensorStats(*v) for k, v in ranges.items()}, ranges, CalibConfig()))
    (c,) = s.concats()
    assert c.node == "cat"
    assert c.ratio == pytest.approx(8.0)
    # conv2 has the output's absmax (8) and so the output's scale: no rescale there.
    assert [m.needs_rescale for m in c.inputs] == [True, True, False]
    assert c.rescales == 2
    assert c.inputs[0].bits_lost_if_shared == pytest.approx(3.0)
    assert c.inputs[1].bits_lost_if_shared == pytest.approx(np.log2(8 / 3))
    # Sharing all of them removes every rescale.
    s.groups.groups.append(type("G", (), {"members": ("conv0_out", "conv1_out", "conv2_out", "cat_out")})())
    s.groups_changed()
    (c2,) = s.concats()
    assert c2.rescales == 0 and c2.ratio == pytest.approx(1.0)
    assert c2.inputs[0].bits_lost_now == pytest.approx(3.0)


def test_registry_roles_and_default():
    assert handler_for("MaxPool").role is Role.PASS
    assert handler_for("Conv").role is Role.COMPUTE
    assert handler_for("Shape").role is Role.NONE
    unk = handler_for("MyFancyOp")
    assert unk.role is Role.COMPUTE and not unk.known


def test_shape_subgraph_is_not_activation():
    # y = Reshape(x, Concat(Shape(x)[0:1], [-1])): the Shape/Gather/Concat chain is shape math.
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "zero"], ["n"], name="gather", axis=0),
        helper.make_node("Unsqueeze", ["n", "axes"], ["n1"], name="unsq"),
        helper.make_node("Concat", ["n1", "minus1"], ["newshape"], name="shape_cat", axis=0),
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Reshape", ["r", "newshape"], ["y"], name="reshape"),
    ]
    inits = [onnx.numpy_helper.from_array(np.array(0, np.int64), "zero"),
             onnx.numpy_helper.from_array(np.array([0], np.int64), "axes"),
             onnx.numpy_helper.from_array(np.array([-1], np.int64), "minus1")]
    gr = helper.make_graph(nodes, "s", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
                           [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(gr, opset_imports=[helper.make_opsetid("", 17)])
    g = graph_from_model(m)
    assert g.tensors["newshape"].kind == "shape"
    assert g.tensors["n"].kind == "shape"
    assert g.concat_nodes() == []  # the shape Concat is not analysed
    assert set(g.observed_tensors) == {"x", "r"}
    assert g.tensors["y"].shape == (2, 12)


def test_dynamic_shapes(tmp_path):
    p = save(branchy_concat_model(dynamic=True), tmp_path / "dyn.onnx")
    with pytest.raises(ShapeError, match="dynamic dimensions"):
        load_graph(p)
    g = load_graph(p, ["x=1x3x20x24"])
    assert g.tensors["cat_out"].shape == (1, 12, 20, 24)
    assert g.input_shapes == {"x": (1, 3, 20, 24)}


@pytest.mark.parametrize("spec,match", [
    (["x=1x4x16x16"], "expects shape"),
    (["y=1x3x16x16"], "unknown input name 'y'"),
    (["x=1x3x16"], "rank"),
    (["x=1xAx16x16"], "integers"),
    (["x=1x3x16x16,x=1x3x8x8"], "input 'x' is given two shapes: 1x3x16x16 and 1x3x8x8"),
    (["x=1x3x16x16", "x=1x3x8x8"], "given two shapes"),
])
def test_bad_shapes(tmp_path, spec, match):
    p = save(branchy_concat_model(), tmp_path / "m.onnx")
    with pytest.raises(ShapeError, match=match):
        load_graph(p, spec)


def test_shape_that_does_not_fit_the_weights(tmp_path):
    p = save(branchy_concat_model(dynamic=True), tmp_path / "m.onnx")
    # 3 channels are fixed by the model; a channel count that conflicts with the conv weights must fail.
    m = branchy_concat_model(dynamic=True)
    m.graph.input[0].type.tensor_type.shape.dim[1].Clear()
    m.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "C"
    p = save(m, tmp_path / "m2.onnx")
    with pytest.raises(QtQuantError):
        load_graph(p, ["x=1x5x16x16"])


def test_bad_files(tmp_path):
    with pytest.raises(ModelError, match="not found"):
        load_graph(tmp_path / "missing.onnx")
    (tmp_path / "junk.onnx").write_bytes(b"\x00\xffnot a protobuf at all" * 10)
    with pytest.raises(ModelError, match="not a readable ONNX model"):
        load_graph(tmp_path / "junk.onnx")
    good = (tmp_path / "good.onnx")
    save(branchy_concat_model(), good)
    data = good.read_bytes()
    (tmp_path / "trunc.onnx").write_bytes(data[: len(data) // 3])
    with pytest.raises(ModelError):
        load_graph(tmp_path / "trunc.onnx")
    with pytest.raises(ModelError, match="folder"):
        load_graph(tmp_path)


def test_old_opsets_are_raised_on_open_and_older_ones_refused(tmp_path, capsys):
    # ONNX's model zoo classics (opset 7-9) were refused ("opset 9 is not supported"); they open raised to 13.
    from qtquant.app import open_model
    from qtquant.app.views.concats import model_info
    from qtquant.cli import main
    from qtquant.export.qdq import build_qdq_model

    path = save(branchy_concat_model(opset=9), tmp_path / "old.onnx")
    s = open_model(path, options=Options(march=RESCALING_MARCH))
    assert s.graph.opset == 13 and s.graph.source_opset == 9
    assert load_graph(save(branchy_concat_model(), tmp_path / "new.onnx")).source_opset is None
    s.run_calibration()
    assert len(s.concats()) == 1 and s.concats()[0].rescales >= 1
    m = build_qdq_model(s).model
    assert next(o.version for o in m.opset_import if o.domain == "") == 13
    onnx.checker.check_model(m, full_check=True)
    assert "opset 13 (raised from 9)" in model_info(s).nodes
    assert main(["analyze", path, "--calib-count", "2"]) == 0
    assert "note: the file is opset 9; it was raised to 13 on open" in capsys.readouterr().out
    with pytest.raises(ModelError, match=r"opset 5 is not supported \(qtquant reads opsets 11 to 23, and raises 6"):
        load_graph(save(branchy_concat_model(opset=5), tmp_path / "older.onnx"))
    # An op the old opset does not have: the checker refuses it before the converter sees it
    bad = branchy_concat_model(opset=9)
    bad.graph.node[0].op_type = "Resize"
    with pytest.raises(ModelError, match="opset 9 could not be raised to 13 .*No Op registered for Resize"):
        load_graph(save(bad, tmp_path / "bad.onnx"))


def test_opset_6_files_open_raised_and_prelu_keeps_its_channel_slopes(tmp_path, capsys):
    """Opset 6 (2017's exporters; onnx's own opset-6 test models) opens raised to 13.  Opset 6's PRelu
    applies a (C,) slope along the channels; onnx's converter kept it (C,), which from opset 7
    broadcasts along the last axis: of the same size here, so the values were silently wrong."""
    import onnxruntime as ort

    from qtquant.cli import main

    path = save(branchy_concat_model(opset=6), tmp_path / "six.onnx")
    assert load_graph(path).source_opset == 6
    assert main(["analyze", path, "--calib-count", "2", "--no-perf"]) == 0
    assert "note: the file is opset 6; it was raised to 13 on open" in capsys.readouterr().out

    slope = np.array([0.1, 0.5, 2.0], np.float32)
    g = helper.make_graph([helper.make_node("PRelu", ["x", "s"], ["y"])], "prelu",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 2, 3]),
                           helper.make_tensor_value_info("s", TensorProto.FLOAT, [3])],  # as old files list them
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 2, 3])],
                          [numpy_helper.from_array(slope, "s")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 6)])
    m.ir_version = 3
    graph = load_graph(save(m, tmp_path / "prelu6.onnx"))
    x = np.random.default_rng(0).standard_normal((1, 3, 2, 3)).astype(np.float32)
    got = ort.InferenceSession(graph.model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    np.testing.assert_allclose(got, np.where(x > 0, x, slope[None, :, None, None] * x), rtol=1e-6)


def test_concat_axis_that_is_not_an_integer_is_one_line(tmp_path):
    # Found by the byte-mutation fuzzer at 2,000 examples: TypeError from int(None) as the graph was built.
    m = branchy_concat_model()
    cat = next(n for n in m.graph.node if n.op_type == "Concat")
    del cat.attribute[:]
    cat.attribute.append(helper.make_attribute("axis", "one"))
    with pytest.raises(ModelError, match="Concat 'cat' has a 'axis' attribute that is not an integer"):
        load_graph(save(m, tmp_path / "axis.onnx"))


def test_cycle_and_dangling(tmp_path):
    nodes = [helper.make_node("Relu", ["b"], ["a"], name="r1"), helper.make_node("Relu", ["a"], ["b"], name="r2"),
             helper.make_node("Add", ["x", "b"], ["y"], name="add")]
    gr = helper.make_graph(nodes, "c", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                           [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    m = helper.make_model(gr, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ModelError, match="cycle"):
        load_graph(save(m, tmp_path / "cyc.onnx"))
    nodes = [helper.make_node("Add", ["x", "ghost"], ["y"], name="add")]
    gr = helper.make_graph(nodes, "d", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                           [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    m = helper.make_model(gr, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ModelError, match="ghost"):
        load_graph(save(m, tmp_path / "dangling.onnx"))


def test_external_data_loads_lazily_and_refuses_escape(tmp_path):
    m = branchy_concat_model()
    expected = onnx.numpy_helper.to_array(next(t for t in m.graph.initializer if t.name == "conv1.w"))
    d = tmp_path / "ext"
    d.mkdir()
    onnx.save(m, str(d / "m.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
              location="m.data", size_threshold=0)
    g = load_graph(d / "m.onnx")
    w = g.initializer("conv1.w")
    np.testing.assert_array_equal(w, expected)
    # A weight whose location escapes the model folder is refused before anything is read.
    m2 = onnx.load(str(d / "m.onnx"), load_external_data=False)
    for t in m2.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = "../../etc/passwd"
    onnx.save(m2, str(d / "evil.onnx"))
    with pytest.raises(ModelError, match="outside the model folder"):
        load_graph(d / "evil.onnx")
    (d / "m.data").unlink()
    with pytest.raises(ModelError, match="missing"):
        load_graph(d / "m.onnx")


def test_small_integer_tensors_in_external_data(tmp_path):
    # Reshape's shape tensor stored externally (size_threshold=0): shape inference still needs its value.
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Reshape", ["r", "shape"], ["y"], name="reshape")]
    inits = [onnx.numpy_helper.from_array(np.array([1, -1], np.int64), "shape")]
    gr = helper.make_graph(nodes, "e", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3])],
                           [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(gr, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(m, str(tmp_path / "m.onnx"), save_as_external_data=True, location="m.data", size_threshold=0)
    g = load_graph(tmp_path / "m.onnx")
    assert g.tensors["y"].shape == (1, 6)


def test_model_bytes_are_made_once(tmp_path, monkeypatch):
    """Encoding holds the GIL (a big graph's window froze for it at every fidelity check):
    the bytes are made once per graph and reused."""
    import qtquant.model.graphmodel as graph_mod

    g = load_graph(save(branchy_concat_model(), tmp_path / "m.onnx"))
    first = g.model_bytes()
    assert onnx.ModelProto.FromString(first) == g.model
    assert g.model_bytes() is first
    monkeypatch.setattr(graph_mod, "KEEP_MODEL_BYTES", 10)  # too big to keep: made each time
    g2 = load_graph(save(branchy_concat_model(), tmp_path / "m2.onnx"))
    assert g2.model_bytes() == g2.model_bytes() and g2.model_bytes() is not g2.model_bytes()


def test_prepare_model_bytes_skips_models_too_big_to_keep(tmp_path, monkeypatch):
    import qtquant.model.graphmodel as graph_mod

    monkeypatch.setattr(graph_mod, "KEEP_MODEL_BYTES", 10)
    g = load_graph(save(branchy_concat_model(), tmp_path / "m.onnx"))  # the inferred bytes not kept either
    monkeypatch.setattr(type(g.model), "SerializeToString", lambda self: pytest.fail("encoded for nothing"),
                        raising=False)
    g.prepare_model_bytes()
    assert g._model_bytes is None


def test_first_line_quotes_another_librarys_error_in_one_line():
    assert first_line(RuntimeError("[ONNXRuntimeError] : 2 : bad shape\n  at frame 1\n  at frame 2")) == \
        "[ONNXRuntimeError] : 2 : bad shape"
    assert first_line(ValueError("  ")) == "ValueError"  # says nothing: its type
    assert first_line(RuntimeError("x" * 400)) == "x" * 299 + "…"  # no space to cut at: cut, and marked
    long = "Type Error: " + "word " * 80
    quoted = first_line(RuntimeError(long), 100)
    assert len(quoted) <= 100 and quoted.endswith("word…") and long.startswith(quoted[:-1])
    # onnxruntime's "Load model from PATH failed:" goes: the caller names the file, and a long path
    # pushed the cause out of the quote
    ort = RuntimeError("[ONNXRuntimeError] : 10 : INVALID_GRAPH : Load model from /a/very/long/path/q.onnx "
                       "failed:This is an invalid model. Error Unrecognized attribute: axis")
    assert first_line(ort) == ("[ONNXRuntimeError] : 10 : INVALID_GRAPH : This is an invalid model. Error "
                               "Unrecognized attribute: axis")


def test_file_digest_is_the_files_sha256_whichever_way_it_is_computed(tmp_path, monkeypatch):
    """Small bytes read already are hashed at once, bigger ones on a thread, a file without its
    bytes from disk: the same digest; a file that cannot be read raises at result()."""
    import hashlib
    from pathlib import Path

    from builders import detector_model
    from qtquant.model import modelcheck

    path = save(detector_model(), tmp_path / "d.onnx")
    data = open(path, "rb").read()
    want = hashlib.sha256(data).hexdigest()
    inline = modelcheck.FileDigest(Path(path), data)
    assert inline._thread is None and inline.result() == want
    monkeypatch.setattr(modelcheck, "INLINE_DIGEST_BYTES", 16)
    threaded = modelcheck.FileDigest(Path(path), data)
    assert threaded._thread is not None and threaded.result() == want
    assert modelcheck.FileDigest(Path(path)).result() == want
    missing = modelcheck.FileDigest(tmp_path / "gone.onnx")
    with pytest.raises(OSError):
        missing.result()
    monkeypatch.undo()
    assert load_graph(path).sha256 == want
