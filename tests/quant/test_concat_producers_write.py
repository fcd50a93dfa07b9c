"""bayes-e's Concat rule, producers-write (learned from the RDK X5 compile logs, docs/perf-model.md):

1. the output keeps its own calibrated scale;
2. an input computed by a layer for this Concat alone -- or whose other readers only move values
   -- is written at that scale by its layer: no rescale;
3. every other input (a Split/Slice/Resize/MaxPool output, a tensor another computing layer
   reads, a graph input, another Concat's output) is rescaled where its scale differs.

Each part on a small model of its own, and where the rule acts: analyze, the export's scales,
auto-share, the simulator's rescale nodes and the colouring.  Percentile calibration gives every
tensor a clipped scale of its own, so without the rule every input would mismatch."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from builders import branchy_concat_model, conv_node
from qtquant.app import Options, Session
from qtquant.app.views.looks import compute_looks
from qtquant.quant.autoshare import plan_auto_share
from qtquant.calib import CalibConfig
from qtquant.quant.concat import analyze_concats
from qtquant.quant.concatwrite import written_inputs
from qtquant.quant.domains import build_domains
from qtquant.export.qdq import build_qdq_model
from qtquant.model.graph import graph_from_model
from qtquant.perf import simulate_session
from qtquant.files.report import analysis_dict, concat_table_text
from qtquant.base.vocab import ConcatScaleRule, Overlay, ShareAction

PCT = CalibConfig(observer="percentile", count=8)
RULE = ConcatScaleRule.PRODUCERS_WRITE


def _model(nodes, inits, outputs=("y",)) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _session(model, march="bayes-e", calib=PCT):
    s = Session(graph_from_model(model), Options(march=march, calib=calib))
    s.run_calibration()
    return s


def _c2f_model():
    """YOLOv8's C2f in small: conv -> Split -> (a, b); b -> conv m -> Concat(a, b, m_out).
    The Split outputs are views of the conv's output; m_out is made for the Concat alone."""
    inits, nodes = [], []
    nodes.append(conv_node(inits, "x", 3, 8, 3, "cv1", gain=1.0, seed=0))
    inits.append(onnx.numpy_helper.from_array(np.array([4, 4], np.int64), "split_sizes"))
    nodes.append(helper.make_node("Split", ["cv1_out", "split_sizes"], ["a", "b"], name="split", axis=1))
    nodes.append(conv_node(inits, "b", 4, 4, 3, "m", gain=6.0, seed=1))
    nodes.append(helper.make_node("Concat", ["a", "b", "m_out"], ["cat_out"], name="cat", axis=1))
    nodes.append(conv_node(inits, "cat_out", 12, 4, 1, "cv2", gain=1.0, seed=2))
    return _model(nodes, inits, ("cv2_out",))


def _head_model(other_reader: str):
    """A YOLO head in small: t = conv(x) is read by a Concat and by ``other_reader`` ("resize": a
    nearest Resize, which only moves values; "conv": a Conv, which computes from t's scale).
    The Concat's other input u is a conv made for it alone."""
    inits, nodes = [], []
    nodes.append(conv_node(inits, "x", 3, 4, 3, "t", gain=1.0, seed=0))
    nodes.append(conv_node(inits, "x", 3, 4, 3, "u", gain=5.0, seed=1))
    nodes.append(helper.make_node("Concat", ["u_out", "t_out"], ["cat_out"], name="cat", axis=1))
    nodes.append(helper.make_node("Relu", ["cat_out"], ["y"], name="r"))
    if other_reader == "resize":
        inits.append(onnx.numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "sc"))
        nodes.append(helper.make_node("Resize", ["t_out", "", "sc"], ["up"], name="up", mode="nearest"))
        nodes.append(conv_node(inits, "x", 3, 4, 3, "v", gain=2.0, seed=2))
        inits.append(onnx.numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "sc2"))
        nodes.append(helper.make_node("Resize", ["v_out", "", "sc2"], ["vup"], name="vup", mode="nearest"))
        nodes.append(helper.make_node("Concat", ["up", "vup"], ["cat2_out"], name="cat2", axis=1))
        nodes.append(helper.make_node("Relu", ["cat2_out"], ["y2"], name="r2"))
        return _model(nodes, inits, ("y", "y2"))
    nodes.append(conv_node(inits, "t_out", 4, 4, 3, "w", gain=1.0, seed=3))
    return _model(nodes, inits, ("y", "w_out"))


def _sppf_model():
    """SPPF in small: t = conv(x) -> MaxPool -> MaxPool; Concat(t, p1, p2): t's other reader
    only moves values, and the MaxPool outputs carry t's scale."""
    inits, nodes = [], []
    nodes.append(conv_node(inits, "x", 3, 4, 3, "t", gain=3.0, seed=0))
    nodes.append(helper.make_node("MaxPool", ["t_out"], ["p1"], name="p1", kernel_shape=[3, 3], pads=[1, 1, 1, 1]))
    nodes.append(helper.make_node("MaxPool", ["p1"], ["p2"], name="p2", kernel_shape=[3, 3], pads=[1, 1, 1, 1]))
    nodes.append(helper.make_node("Concat", ["t_out", "p1", "p2"], ["cat_out"], name="cat", axis=1))
    nodes.append(helper.make_node("Relu", ["cat_out"], ["y"], name="r"))
    return _model(nodes, inits)


def test_inputs_made_for_the_concat_alone_take_its_own_scale():
    """Parts 1 and 2: three conv branches read only by the Concat: the output keeps its own
    (clipped) scale and every branch is written at it; none is rescaled."""
    s = _session(branchy_concat_model(gains=(1.0, 3.0, 8.0)))
    (c,) = s.concats()
    g, cal = s.graph, s.calibration
    own = build_domains(g, cal.ranges, concat_rule=ConcatScaleRule.OWN)
    assert c.output.scale == own.scale_of("cat_out")  # the output's own calibrated scale
    assert own.scale_of("conv2_out") != own.scale_of("cat_out")  # (which no input has of its own)
    assert [m.scale for m in c.inputs] == [c.output.scale] * 3
    assert c.rescales == 0 and c.written == (0, 1, 2) and c.reference_input is None
    assert "written at the output's own scale by their producers" in c.rule_note
    assert s.domains.concat_written == {"cat": ("conv0_out", "conv1_out", "conv2_out")}
    # Under "own" the same three inputs are rescaled: the rule, not the data, saves them.
    assert [c.rescales for c in analyze_concats(g, own)] == [3]


def test_views_are_rescaled_and_the_computed_input_is_written():
    """Part 3, the C2f pattern of every YOLOv8 log: the Split outputs (views of cv1's output, at
    its scale) are requantized, the bottleneck's output (made for the Concat alone) is not."""
    s = _session(_c2f_model())
    (c,) = s.concats()
    assert [m.needs_rescale for m in c.inputs] == [True, True, False]
    assert c.written == (2,) and c.rescales == 2
    assert c.inputs[0].scale == c.inputs[1].scale == s.domains.scale_of("cv1_out") != c.output.scale
    assert [n for n, _ in c.rescale_nodes()] == ["a_calibrated_Requantize", "b_calibrated_Requantize"]


def test_an_input_another_layer_computes_from_is_rescaled():
    """Part 3: t also feeds a Conv (YOLOv8n's /model.6/cv2/act/Mul into /model.11/Concat and
    /model.7/conv): its layer cannot write it at the Concat's scale; u, made for it alone, is."""
    s = _session(_head_model("conv"))
    (c,) = s.concats()
    by = {m.tensor: m for m in c.inputs}
    assert by["t_out"].needs_rescale and not by["u_out"].needs_rescale
    assert c.written == (0,) and c.rescales == 1
    assert s.domains.scale_of("t_out") != c.output.scale


def test_a_reader_that_only_moves_values_carries_the_concats_scale_on():
    """Part 2: t's other reader is a nearest Resize (YOLOv8n's /model.12/cv2/act/Mul, read by
    /model.13/Resize and /model.17/Concat): t is written at cat's scale and the Resize output
    carries it to cat2, which requantizes it (a Resize output is a view: part 3)."""
    s = _session(_head_model("resize"))
    by = {c.node: c for c in s.concats()}
    cat, cat2 = by["cat"], by["cat2"]
    assert cat.rescales == 0 and cat.written == (0, 1)
    assert s.domains.scale_of("up") == s.domains.scale_of("t_out") == cat.output.scale
    assert [m.needs_rescale for m in cat2.inputs] == [True, True] and cat2.written == ()


def test_sppf_chain_takes_the_concats_scale():
    """Part 2 through pass-through readers (SPPF: no requantize in any of the eight logs)."""
    s = _session(_sppf_model())
    (c,) = s.concats()
    assert c.rescales == 0 and c.written == (0,)
    assert {m.scale for m in c.inputs} == {c.output.scale}


def test_graph_inputs_and_concat_outputs_are_not_written():
    """Part 3: a graph input (the preprocessor makes it) and another Concat's output (it keeps its
    own scale by part 1) are no layer's to write."""
    inits, nodes = [], []
    nodes.append(conv_node(inits, "x", 3, 4, 3, "a", gain=1.0, seed=0))
    nodes.append(conv_node(inits, "x", 3, 4, 3, "b", gain=4.0, seed=1))
    nodes.append(helper.make_node("Concat", ["a_out", "b_out"], ["cat1_out"], name="cat1", axis=1))
    nodes.append(helper.make_node("Concat", ["cat1_out", "x"], ["cat2_out"], name="cat2", axis=1))
    nodes.append(helper.make_node("Relu", ["cat2_out"], ["y"], name="r"))
    g = graph_from_model(_model(nodes, inits))
    assert written_inputs(g, g.nodes["cat1"]) == ["a_out", "b_out"]
    assert written_inputs(g, g.nodes["cat2"]) == []


def test_file_scales_and_user_groups_are_kept():
    """The rule is the compiler's default: a scale a file (a QDQ file, a compile log) or a user
    group gives an input stays, and that input is compared as it is."""
    g = graph_from_model(branchy_concat_model(gains=(1.0, 3.0)))
    ranges = {"conv0_out": (-1.0, 1.0), "conv1_out": (-3.0, 3.0), "cat_out": (-2.5, 2.5), "y": (0.0, 2.5)}
    dm = build_domains(g, ranges, fixed={"conv1_out": (-3.0, 3.0)}, concat_rule=RULE)
    assert dm.concat_written == {"cat": ("conv0_out",)}
    (c,) = analyze_concats(g, dm)
    assert [m.needs_rescale for m in c.inputs] == [False, True]
    dm = build_domains(g, ranges, groups=[["conv0_out", "conv1_out"]], concat_rule=RULE)
    (c,) = analyze_concats(g, dm)
    assert dm.concat_written == {} and c.rescales == 2  # the group's one scale is not the output's


def test_export_points_written_inputs_at_the_outputs_scale():
    s = _session(_c2f_model())
    build = build_qdq_model(s)
    assert build.scale_of["m_out"] == build.scale_of["cat_out"]  # one initializer: the compiler's one threshold
    assert build.scale_of["a"] != build.scale_of["cat_out"]


def test_simulator_colouring_and_reports_follow_the_rule():
    s = _session(_c2f_model())
    res = simulate_session(s)
    assert res.rescale_count == 2 and sorted(r.name for r in res.rescales) == ["cat_rescale_0", "cat_rescale_1"]
    looks = compute_looks(s.graph, Overlay.MISMATCH, s.concats())
    assert {e for e in looks.edges if e[1] == "cat"} == {("a", "cat"), ("b", "cat")}
    doc = analysis_dict(s)
    assert doc["concats"][0]["written_inputs"] == [2] and doc["summary"]["concat_rule"] == "producers-write"
    text = concat_table_text(s)
    assert "Concat output scale on bayes-e: its own calibrated scale (rule producers-write)" in text
    assert "= = written at the output's scale by its producer" in text


def test_auto_share_leaves_a_concat_the_rule_already_matches():
    s = _session(branchy_concat_model(gains=(1.0, 3.0, 8.0)))
    report, groups = plan_auto_share(s, 1.0)
    (d,) = report.decisions
    assert d.action is ShareAction.ALREADY and groups == []
    assert any("target's Concat rule (producers-write)" in n for n in d.notes)


@pytest.mark.parametrize("model, rescales", [(_c2f_model, 2), (_sppf_model, 0)])
def test_other_marches_keep_their_rule(model, rescales):
    """bayes keeps widest-input: the same graphs price differently there."""
    s = _session(model(), march="bayes")
    assert s.domains.concat_written == {} and s.domains.concat_source
    assert _session(model()).concats()[0].rescales == rescales
