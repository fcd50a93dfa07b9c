"""Placing a compile log on a graph (qtquant.horizon.match): cut names by unique suffix,
ambiguous and missing names listed, another model's log refused, thresholds per tensor."""

from __future__ import annotations

import onnx
import pytest

from builders import branchy_concat_model, detector_model
from hblogs import LogSpec, render_compile_log
from qtquant.errors import CompileLogError
from qtquant.graph import graph_from_model
from qtquant.horizon.log import parse_compile_log
from qtquant.horizon.match import MissKind, match_compile_log

END = "/a_rather/long/module/path/that_the/compiler_cuts/Conv"


def _named(model: onnx.ModelProto, names: dict[str, str]) -> onnx.ModelProto:
    """``model`` with nodes renamed (old -> new) and their outputs named ``<new>_output_0``."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    renamed = {}
    for n in m.graph.node:
        if n.name in names:
            new = names[n.name]
            renamed[n.output[0]] = new + "_output_0"
            n.name, n.output[0] = new, new + "_output_0"
    for n in m.graph.node:
        for i, t in enumerate(n.input):
            if t in renamed:
                n.input[i] = renamed[t]
    return m


def _match(model, spec=None, graph_model=None, **kw):
    log = parse_compile_log(render_compile_log(model, spec or LogSpec()).encode(), "hb.log")
    return match_compile_log(graph_from_model(graph_model or model), log, **kw)


def test_exact_names_thresholds_and_requantize():
    model = branchy_concat_model(chain=True)
    m = _match(model, LogSpec(requantize=("conv1_out",), thresholds={"x": 1.1, "relu0_out": 9.0, "pool0_out": 4.0,
                                                                      "cat_out": 6.0}))
    assert set(m.nodes) == {n.name for n in model.graph.node} and not m.unmatched
    assert m.compiler_rows == ("HZ_PREPROCESS_FOR_x",) and not m.shape_differs
    assert m.requantized == ("conv1_out",) and dict(m.requantized_for) == {"cat": ("conv1_out",)}
    th = m.thresholds
    assert th["x"].threshold == 1.1 and th["x"].node == "conv0" and th["x"].scale == pytest.approx(1.1 / 127)
    assert th["relu0_out"].threshold == 9.0 and th["pool0_out"].threshold == 4.0  # the Concat prints its first input
    assert "conv0_out" not in th  # fused into its Relu: not a quantized tensor
    assert th["cat_out"].range == (-6.0, 6.0)
    # conv2_out is read only as a Concat input and no row prints it; the log does not requantize
    # it, so it enters cat on cat's output threshold.  conv1_out is requantized: no threshold.
    assert th["conv2_out"].inferred and th["conv2_out"].threshold == 6.0 and th["conv2_out"].node == "cat"
    assert "conv1_out" not in th and m.inferred == ("conv2_out",)
    bare = _match(model, LogSpec(requantize=("conv1_out",), thresholds={"cat_out": 6.0}), infer=False)
    assert "conv2_out" not in bare.thresholds and not bare.inferred
    assert m.ranges()["relu0_out"] == (-9.0, 9.0)
    ranked = m.cosine_ranking()
    assert [c for _, c in zip(range(3), (r.cosine for _, r in ranked))] == sorted(r.cosine for _, r in ranked)[:3]


def test_int16_bits_from_the_producer():
    model = branchy_concat_model(chain=True)
    m = _match(model, LogSpec(int16=("relu0",), thresholds={"relu0_out": 9.0}))
    assert m.thresholds["relu0_out"].bits == 16 and m.thresholds["relu0_out"].scale == pytest.approx(9.0 / 32767)
    assert m.int16_tensors == ("relu0_out",) and m.thresholds["pool0_out"].bits == 8


def test_cut_names_match_by_unique_suffix():
    model = _named(branchy_concat_model(chain=True), {"conv1": "/model.22" + END})
    m = _match(model, LogSpec(requantize=("/model.22" + END + "_output_0",)))
    assert "/model.22" + END in m.nodes and m.nodes["/model.22" + END].cut
    assert m.requantized == ("/model.22" + END + "_output_0",) and not m.unmatched


def test_ambiguous_cut_names_are_listed_not_guessed():
    base = branchy_concat_model(chain=True)
    model = _named(base, {"conv1": "/model.22" + END, "conv2": "/model.23" + END})
    # The log of a model whose two names differ only before the cut: both rows print the same end.
    m = _match(model, LogSpec(requantize=("/model.22" + END + "_output_0",)))
    amb = [u for u in m.unmatched if u.kind is MissKind.AMBIGUOUS]
    assert {u.what for u in amb} == {"node", "requantize"}
    assert all(set(u.candidates) >= {"/model.22" + END, "/model.23" + END} or
               set(u.candidates) == {"/model.22" + END + "_output_0", "/model.23" + END + "_output_0"} for u in amb)
    assert "/model.22" + END not in m.nodes and m.requantized == ()
    assert "ambiguous" in amb[0].describe()


def test_a_missing_name_is_listed():
    model = branchy_concat_model(chain=True)
    m = _match(model, LogSpec(rename={"final_relu": "/compiler/made_this"}))
    assert [(u.printed, u.kind) for u in m.unmatched] == [("/compiler/made_this", MissKind.MISSING)]
    assert "not in the model" in m.unmatched[0].describe()


def test_another_models_log_is_refused():
    ours = branchy_concat_model(chain=True)
    other = detector_model()
    other.graph.input[0].name = "x"
    with pytest.raises(CompileLogError, match="another model"):
        _match(other, graph_model=ours)
    with pytest.raises(CompileLogError, match="inputs images"):
        _match(ours, LogSpec(input_names=("images",)))


def test_another_input_shape_is_refused_unless_asked():
    model = branchy_concat_model(chain=True)
    spec = LogSpec(input_shape=(1, 3, 32, 32))
    with pytest.raises(CompileLogError, match=r"1x3x32x32 in the log but 1x3x16x16 here.*--compiler-log-any-shape"):
        _match(model, spec)
    m = _match(model, spec, any_shape=True)
    assert m.shape_differs and len(m.thresholds) > 3


def test_session_uses_the_compilers_scales_everywhere(tmp_path):
    """set_compiler_log: an event, the domains (the session's, derive()'s for the app's background
    calibration, a snapshot's) on the compiler's thresholds; dropping the log restores qtquant's."""
    from qtquant.app import Options, open_model
    from qtquant.app.compilerlog import open_compile_log
    from qtquant.app.session import derive
    from qtquant.calib import CalibConfig

    model = branchy_concat_model(chain=True)
    onnx.save(model, tmp_path / "m.onnx")
    (tmp_path / "hb.log").write_text(render_compile_log(model, LogSpec(thresholds={"relu0_out": 4.0, "cat_out": 6.0})))
    s = open_model(tmp_path / "m.onnx", None, Options(calib=CalibConfig(count=2, holdout=0)))
    res = s.run_calibration()
    own = s.domains.scale_of("relu0_out")
    seen = []
    s.events.compiler_log.connect(seen.append)
    m = open_compile_log(s, tmp_path / "hb.log")
    assert seen == [m] and s.compiler_scales
    assert s.domains.scale_of("relu0_out") == pytest.approx(4.0 / 127) != pytest.approx(own)
    assert s.snapshot().domains_with(()).scale_of("relu0_out") == pytest.approx(4.0 / 127)
    d = derive(s.graph, res, s.options, [], None, s.compiler_ranges)
    assert d.domains.scale_of("relu0_out") == pytest.approx(4.0 / 127)
    stale = derive(s.graph, res, s.options, [], None, None)  # made before the log: not installed
    s.set_calibration(res, stale)
    assert s.domains.scale_of("relu0_out") == pytest.approx(4.0 / 127)
    s.set_compiler_log(None)
    assert seen[-1] is None and s.domains.scale_of("relu0_out") == pytest.approx(own)


def test_a_cut_requantize_name_is_placed_by_the_node_it_is_printed_before():
    # relu0's and conv1's outputs end alike; only conv1's is an input of cat, the row's consumer.
    model = _named(branchy_concat_model(chain=True), {"relu0": "/model.4" + END, "conv1": "/model.6" + END})
    m = _match(model, LogSpec(requantize=("/model.6" + END + "_output_0",)))
    assert m.requantized == ("/model.6" + END + "_output_0",)
    assert dict(m.requantized_for) == {"cat": ("/model.6" + END + "_output_0",)}
    assert {u.what for u in m.unmatched} == {"node"}  # the two cut node rows stay ambiguous


def _rows_replaced(text: str, name: str, new_names) -> str:
    lines = text.splitlines()
    i = next(k for k, ln in enumerate(lines) if ln.startswith(name + " "))
    row = lines[i]
    rest = row[len(name):]
    lines[i:i + 1] = [n.ljust(len(name)) + rest if len(n) < len(name) else n + "  " + rest.lstrip()
                      for n in new_names]
    return "\n".join(lines) + "\n"


def test_rows_the_compiler_made_are_not_misses():
    """A Softmax the compiler rewrote into ReduceMax/Sub/Exp rows, and a row named after a node
    plus a suffix (YOLOv8n-cls's Gemm_transpose_output_reshape), are the compiler's own."""
    from onnx import TensorProto, helper, numpy_helper
    import numpy as np

    w = numpy_helper.from_array(np.ones((4, 3, 1, 1), np.float32), "w")
    w2 = numpy_helper.from_array(np.ones((4, 4, 1, 1), np.float32), "w2")
    nodes = [helper.make_node("Conv", ["x", "w"], ["a"], name="/m/attn/qkv"),
             helper.make_node("Softmax", ["a"], ["s"], name="/m/attn/Softmax", axis=1),
             helper.make_node("Conv", ["s", "w2"], ["y"], name="/m/out/Conv")]
    g = helper.make_graph(nodes, "sm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], [w, w2])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    text = render_compile_log(model)
    text = _rows_replaced(text, "/m/attn/Softmax", ["/m/attn/ReduceMax", "/m/attn/Sub", "/m/attn/Exp"])
    text = _rows_replaced(text, "/m/out/Conv", ["/m/out/Conv", "/m/out/Conv_transpose_output_reshape"])
    m = match_compile_log(graph_from_model(model), parse_compile_log(text.encode(), "hb.log"))
    assert not m.unmatched
    assert set(m.compiler_rows) == {"HZ_PREPROCESS_FOR_x", "/m/attn/ReduceMax", "/m/attn/Sub", "/m/attn/Exp",
                                    "/m/out/Conv_transpose_output_reshape"}


def test_rows_printed_out_of_the_graphs_order_give_no_threshold():
    """pool0 reads relu0's output; a log printing pool0's row first moved something: neither row's
    threshold is used (YOLO11n's attention Mul, printed after the MatMul it feeds)."""
    model = branchy_concat_model(chain=True)
    text = render_compile_log(model, LogSpec(thresholds={"relu0_out": 9.0, "pool0_out": 4.0}))
    lines = text.splitlines()
    i = next(k for k, ln in enumerate(lines) if ln.startswith("relu0 "))
    lines[i], lines[i + 1] = lines[i + 1], lines[i]
    m = match_compile_log(graph_from_model(model), parse_compile_log("\n".join(lines).encode(), "hb.log"))
    assert set(m.reordered) == {"relu0", "pool0"}
    assert "relu0_out" not in m.thresholds and m.thresholds["pool0_out"].threshold == 4.0  # cat's row still


def test_an_asymmetric_scheme_shows_the_log_only(tmp_path):
    from qtquant.app import Options, open_model
    from qtquant.app.compilerlog import open_compile_log
    from qtquant.calib import CalibConfig
    from qtquant.errors import UsageError

    model = branchy_concat_model(chain=True)
    onnx.save(model, tmp_path / "m.onnx")
    (tmp_path / "hb.log").write_text(render_compile_log(model, LogSpec(thresholds={"relu0_out": 4.0})))
    s = open_model(tmp_path / "m.onnx", None, Options(calib=CalibConfig(count=2, holdout=0)))
    s.run_calibration()
    open_compile_log(s, tmp_path / "hb.log")
    assert s.domains.scale_of("relu0_out") == pytest.approx(4.0 / 127)
    s.set_options(scheme="asym")  # the thresholds are symmetric int8: shown, not used
    assert s.compiler_ranges is None and s.domains.scale_of("relu0_out") != pytest.approx(4.0 / 127)
    with pytest.raises(UsageError, match="symmetric"):
        open_compile_log(s, tmp_path / "hb.log")
