"""The march's Concat output-scale rule: the widest-input marches (bayes, bernoulli2, nash-e) give
the output the widest input's scale and rescale only the other inputs; "own" rescales every
differing input.  bayes-e (RDK X5) follows its compile logs' rule, producers-write: those tests
are in test_concat_producers_write.py; here it only states it.

Percentile calibration is the case that matters: it clips every Concat output to a scale of its
own, so under "own" every input mismatches."""

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from builders import branchy_concat_model, conv_node, mul_branch
from qtquant.app import Options, Session
from qtquant.quant.autoshare import plan_auto_share
from qtquant.calib import CalibConfig
from qtquant.cli import main
from qtquant.quant.domains import concat_scale_source
from qtquant.base.errors import MarchError
from qtquant.export.qdq import build_qdq_model, export_qdq
from qtquant.model.graph import graph_from_model
from qtquant.perf import load_march, march_names
from qtquant.perf.march import profile_from_dict
from qtquant.files.report import analysis_dict, concat_table_text
from qtquant.base.resources import resource_path
from qtquant.base.vocab import ConcatScaleRule, ShareAction

PCT = CalibConfig(observer="percentile", count=8)


@pytest.fixture(scope="module")
def own_march(tmp_path_factory):
    """bayes-e with the rule set to "own": a non-Horizon target."""
    doc = json.loads(resource_path("marches", "bayes-e.json").read_text())
    doc["name"] = "own-rule"
    doc["params"]["concat_output_scale"] = {"value": "own", "estimate": "a compiler that keeps the output's scale"}
    p = tmp_path_factory.mktemp("march") / "own.json"
    p.write_text(json.dumps(doc))
    return str(p)


def _session(march, model=None, calib=PCT):
    s = Session(graph_from_model(model or branchy_concat_model(gains=(1.0, 3.0, 8.0))),
                Options(march=march, calib=calib))
    s.run_calibration()
    return s


def test_bundled_marches_are_horizon_and_state_the_rule():
    assert set(march_names()) >= {"bayes-e", "bayes", "bernoulli2", "nash-e"}
    for name in march_names():
        prof = load_march(name)
        # bayes-e's rule is the one its eight X5 compile logs show (docs/perf-model.md, "The Concat
        # rule"): the YOLOv8n log's /model.11/Concat requantizes both inputs, which widest-input cannot.
        want = ConcatScaleRule.PRODUCERS_WRITE if name == "bayes-e" else ConcatScaleRule.WIDEST_INPUT
        assert prof.concat_output_scale is want, name
        kind, text = prof.provenance["concat_output_scale"]
        assert kind in ("source", "estimate") and text.strip()


def test_profile_rule_is_validated_and_defaults_to_own():
    doc = json.loads(resource_path("marches", "bayes.json").read_text())
    doc["params"]["concat_output_scale"]["value"] = "largest"
    with pytest.raises(MarchError, match='"concat_output_scale" must be one of own, widest-input, producers-write'):
        profile_from_dict(doc)
    del doc["params"]["concat_output_scale"]
    assert profile_from_dict(doc).concat_output_scale is ConcatScaleRule.OWN  # older profiles keep today's rule


def test_rule_function():
    assert concat_scale_source(ConcatScaleRule.OWN, [0.1, 0.3]) is None
    assert concat_scale_source(ConcatScaleRule.WIDEST_INPUT, [0.1, 0.3, 0.3, None]) == 1  # first of the widest
    assert concat_scale_source(ConcatScaleRule.WIDEST_INPUT, [None, 0.0]) is None
    # spans (grid_lo, grid_hi, lo, hi): only an input whose grid holds every input's values
    spans = [(-3.5, 11.9, -3.5, 11.9), (-10.6, 0.0, -10.6, -1.7)]
    assert concat_scale_source(ConcatScaleRule.WIDEST_INPUT, [15.4 / 255, 10.6 / 255], spans) is None
    spans[1] = (-12.0, 12.0, -10.6, -1.7)
    assert concat_scale_source(ConcatScaleRule.WIDEST_INPUT, [15.4 / 255, 24 / 255], spans) == 1


def test_asymmetric_rule_never_clips_an_input():
    """Under uint8-asym the widest input's grid can end where another input's values begin (a
    box input in [-3.5, 11.9] beside class logits in [-10.6, -1.7]: its zero point 255 held
    [-26.9, 0] and every box value became 0).  The output then keeps its own range and says why;
    an input whose grid holds all the others' is still taken."""
    from qtquant.quant.concat import analyze_concats
    from qtquant.quant.domains import build_domains
    from qtquant.model.scales import Scheme

    g = graph_from_model(branchy_concat_model(gains=(1.0, 3.0)))
    ranges = {"conv0_out": (-3.5, 11.9), "conv1_out": (-10.6, -1.7), "cat_out": (-10.6, 11.9), "y": (0.0, 11.9)}
    asym, rule = Scheme.ASYMMETRIC_UINT8, ConcatScaleRule.WIDEST_INPUT
    dm = build_domains(g, ranges, scheme=asym, concat_rule=rule)
    assert dm.concat_source == {} and dm.concat_declined == {"cat"}
    (info,) = analyze_concats(g, dm)
    assert info.rescales == 2 and info.rule_note.startswith("output keeps its own range: on the uint8-asym grid no")
    q = dm.qparams_of("cat_out")
    lo, hi = (0 - q.zero_point) * q.scale, (255 - q.zero_point) * q.scale
    assert lo <= -10.6 + q.scale and hi >= 11.9 - q.scale  # the output's grid holds every input's values
    # symmetric: the widest input (absmax 11.9) holds the other; asymmetric with a covering input: taken
    assert build_domains(g, ranges, concat_rule=rule).concat_source == {"cat": "conv0_out"}
    ranges["conv0_out"] = (-12.0, 12.0)
    dm = build_domains(g, ranges, scheme=asym, concat_rule=rule)
    assert dm.concat_source == {"cat": "conv0_out"} and not dm.concat_declined


@pytest.mark.parametrize("march", ["bayes", "bernoulli2", "nash-e"])
def test_horizon_march_output_takes_widest_input(march):
    s = _session(march)
    (c,) = s.concats()
    scales = [m.scale for m in c.inputs]
    widest = int(np.argmax(scales))
    assert widest == 2  # the gain-8 branch
    assert c.output.scale == scales[widest]
    assert c.reference_input == widest and "widest" in c.rule_note
    assert [m.needs_rescale for m in c.inputs] == [True, True, False]
    assert c.rescales == 2
    assert s.domains.concat_source == {"cat": "conv2_out"}


def test_own_rule_rescales_every_input_under_percentile(own_march):
    s = _session(own_march)
    (c,) = s.concats()
    assert c.reference_input is None and not c.rule_note
    assert c.output.scale not in [m.scale for m in c.inputs]  # its own clipped scale
    assert c.rescales == 3
    assert _session("bayes").concats()[0].rescales == 2


def test_user_group_overrides_the_rule():
    s = _session("bayes")
    s.groups.share(s, ["conv0_out", "conv1_out", "conv2_out", "cat_out"], name="all")
    s.groups_changed()
    (c,) = s.concats()
    assert c.rescales == 0 and "cat" not in s.domains.concat_source
    assert s.concats(baseline=True)[0].rescales == 2


def _nested_model():
    """Two Concats in a row: cat2 reads cat1's output, so cat2's rule sees cat1's chosen scale."""
    inits, nodes = [], []
    for i, g in enumerate((1.0, 4.0, 2.0)):
        nodes.append(conv_node(inits, "x", 3, 4, 3, f"conv{i}", gain=g, seed=i))
    nodes.append(helper.make_node("Concat", ["conv0_out", "conv1_out"], ["cat1_out"], name="cat1", axis=1))
    nodes.append(helper.make_node("Concat", ["cat1_out", "conv2_out"], ["cat2_out"], name="cat2", axis=1))
    nodes.append(helper.make_node("Relu", ["cat2_out"], ["y"], name="r"))
    g = helper.make_graph(nodes, "nested", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_nested_concats_pass_the_chosen_scale_on():
    s = _session("bayes", _nested_model())
    dm = s.domains
    assert dm.concat_source == {"cat1": "conv1_out", "cat2": "cat1_out"}
    assert dm.scale_of("cat2_out") == dm.scale_of("cat1_out") == dm.scale_of("conv1_out")
    by = {c.node: c for c in s.concats()}
    assert by["cat1"].rescales == 1 and by["cat2"].rescales == 1


def test_export_gives_the_concat_output_the_chosen_inputs_scale(tmp_path):
    s = _session("bayes")
    build = build_qdq_model(s)
    # One initializer: the file shows the compiler's single threshold.
    assert build.scale_of["cat_out"] == build.scale_of["conv2_out"]
    assert build.scale_of["cat_out"] != build.scale_of["conv0_out"]
    res = export_qdq(s, tmp_path / "q.onnx")
    m = onnx.load(str(res.path))
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in m.graph.initializer}
    q = next(n for n in m.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "cat_out")
    assert float(inits[q.input[1]]) == pytest.approx(s.concats()[0].inputs[2].scale, rel=1e-6)


def test_export_under_own_rule_keeps_the_outputs_scale(own_march):
    s = _session(own_march)
    build = build_qdq_model(s)
    assert build.scale_of["cat_out"] not in (build.scale_of[t] for t in ("conv0_out", "conv1_out", "conv2_out"))


def test_rescale_nodes_listed_under_compiler_names():
    s = _session("bayes")
    (c,) = s.concats()
    assert c.rescale_nodes() == [("conv0_out_calibrated_Requantize", "cat_rescale_0"),
                                 ("conv1_out_calibrated_Requantize", "cat_rescale_1")]
    doc = analysis_dict(s)
    item = doc["concats"][0]
    assert [r["x5"] for r in item["rescale_nodes"]] == ["conv0_out_calibrated_Requantize",
                                                       "conv1_out_calibrated_Requantize"]
    assert [r["perf_model"] for r in item["rescale_nodes"]] == ["cat_rescale_0", "cat_rescale_1"]
    assert item["reference_input"] == 2 and doc["summary"]["concat_rule"] == "widest-input"
    text = concat_table_text(s)
    assert "conv1_out_calibrated_Requantize / cat_rescale_1" in text
    w = c.inputs[2].scale
    assert f"{w:.4g}^ → {w:.4g}" in text  # ^ marks the input whose scale the output takes
    assert "Concat output scale on bayes: the widest input's" in text


def test_analyze_cli_follows_march_file(tmp_path, capsys, own_march):
    p = tmp_path / "m.onnx"
    onnx.save(branchy_concat_model(gains=(1.0, 3.0, 8.0)), str(p))
    base = ["analyze", str(p), "--observer", "percentile", "--calib-count", "8", "--json", "--no-fidelity"]
    assert main(base + ["--march", "bayes"]) == 0
    horizon = json.loads(capsys.readouterr().out)
    assert main(base + ["--march-file", own_march]) == 0
    own = json.loads(capsys.readouterr().out)
    assert horizon["summary"]["rescales"] == 2 and own["summary"]["rescales"] == 3
    assert own["summary"]["concat_rule"] == "own"


def _twin_model():
    """Concat of x*2 and x*-2: two domains with one symmetric scale, so under the Horizon rule the
    output takes that scale and no input needs a rescale."""
    inits, nodes = [], []
    a = mul_branch(nodes, inits, "pos", 2.0)
    b = mul_branch(nodes, inits, "neg", -2.0)
    nodes.append(helper.make_node("Concat", [a, b], ["cat_out"], name="cat", axis=1))
    nodes.append(helper.make_node("Relu", ["cat_out"], ["y"], name="r"))
    g = helper.make_graph(nodes, "twin", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_auto_share_skips_concats_the_rule_already_matches(own_march):
    s = _session("bayes", _twin_model(), CalibConfig(count=8))
    (c,) = s.concats()
    assert c.rescales == 0 and s.domains.of["pos_out"] != s.domains.of["neg_out"]
    report, groups = plan_auto_share(s, 1.0)
    (d,) = report.decisions
    assert d.action is ShareAction.ALREADY and groups == []
    assert any("target's Concat rule" in n for n in d.notes)
    # the note sits under its own Concat's line, not under the line before (another Concat's)
    lines = report.text().splitlines()
    k = next(i for i, ln in enumerate(lines) if "target's Concat rule" in ln)
    assert lines[k - 1] == "  matched  cat"
    # Under "own" the same Concat is shared as before (its members are separate domains).
    report, groups = plan_auto_share(_session(own_march, _twin_model(), CalibConfig(count=8)), 1.0)
    assert report.decisions[0].action is ShareAction.GROUPED and len(groups) == 1


def _silu_concat_model() -> onnx.ModelProto:
    """x -> two Conv+SiLU (Sigmoid and Mul) branches -> Concat -> y."""
    inits, nodes = [], []
    for i in range(2):
        nodes.append(conv_node(inits, "x", 3, 4, 3, f"c{i}", gain=1.0 + 2 * i, seed=i))
        nodes.append(helper.make_node("Sigmoid", [f"c{i}_out"], [f"s{i}"], name=f"sig{i}"))
        nodes.append(helper.make_node("Mul", [f"c{i}_out", f"s{i}"], [f"m{i}"], name=f"mul{i}"))
    nodes.append(helper.make_node("Concat", ["m0", "m1"], ["y"], name="cat", axis=1))
    g = helper.make_graph(nodes, "silu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_analyze_says_when_the_march_would_place_quantization_points_otherwise():
    """The graph's quantization points follow the default march's fusion rule (bayes-e: the conv
    output before a SiLU is observed).  nash-e's write-back applies SiLU and bernoulli2 evaluates
    the Sigmoid as a pass of its own: the report says so instead of leaving it silent."""
    texts = {m: concat_table_text(_session(m, _silu_concat_model())) for m in ("bayes-e", "nash-e", "bernoulli2")}
    assert "quantization points follow" not in texts["bayes-e"]
    assert "nash-e's own rule would fold 2 of them into their layers" in texts["nash-e"]
    assert "SiLU" in texts["nash-e"] and "prices the latency only" in texts["nash-e"]
    assert "bernoulli2's own rule would observe 2 tensors that bayes-e's leaves inside a layer" in texts["bernoulli2"]
