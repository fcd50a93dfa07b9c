"""The march's fusion rule (perf layers and quantization points), fitted-profile provenance,
``qtquant perf --explain`` and the latency overlay's bound/fused tag."""

import dataclasses
import json

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from qtquant.cli import main
from qtquant.base.errors import MarchError
from qtquant.model.graph import graph_from_model
from qtquant.model.ops import FusionRule, default_fusion_rule, fused_into_producer
from qtquant.perf import load_march, simulate
from qtquant.perf.march import profile_from_dict
from qtquant.base.resources import resource_path

C, HW = 16, 32


def _const(name, arr):
    return numpy_helper.from_array(np.asarray(arr, np.float32), name)


def _model(body, inits=(), out="y"):
    """x (1x16x32x32) -> conv "conv" -> c ; then ``body`` nodes ending in ``out``."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[1, 1]), *body]
    inits = [_const("w", rng.standard_normal((C, C, 1, 1)) * 0.1), *inits]
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, HW, HW])],
                          [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)], inits)
    return graph_from_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), ort_fallback=False)


def _bn_relu():
    bn = [_const(n, v) for n, v in (("s", np.ones(C)), ("b", np.zeros(C)), ("m", np.zeros(C)), ("v", np.ones(C)))]
    return _model([helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["bn"], name="bn"),
                   helper.make_node("Relu", ["bn"], ["y"], name="relu")], bn)


def _silu():
    return _model([helper.make_node("Sigmoid", ["c"], ["sg"], name="sig"),
                   helper.make_node("Mul", ["c", "sg"], ["y"], name="mul")])


def _hardswish_pieces():
    """x·Clip(x+3, 0, 6)/6 as PaddleOCR's exporter writes it (ppocrv4_det)."""
    return _model([helper.make_node("Add", ["c", "three"], ["a3"], name="add3"),
                   helper.make_node("Clip", ["a3", "zero", "six"], ["cl"], name="clip"),
                   helper.make_node("Mul", ["c", "cl"], ["xm"], name="mulx"),
                   helper.make_node("Div", ["xm", "six"], ["y"], name="div6")],
                  [_const("three", 3.0), _const("zero", 0.0), _const("six", 6.0)])


def _layers(graph, march):
    res = simulate(graph, march)
    return res, {lc.name: lc for lc in res.layers}


def test_bn_and_relu_fold_into_the_conv():
    res, L = _layers(_bn_relu(), "bayes-e")
    assert L["bn"].total_us == 0 and L["bn"].fused_into == "conv"
    assert L["relu"].fused_into == "conv"
    assert L["conv"].fused == ("bn", "relu") and L["conv"].fused_ops == "BatchNormalization+Relu"
    assert [lc.name for lc in res.layers if lc.total_us > 0] == ["conv"]


def test_silu_is_one_lookup_table_pass_on_bayes_e_and_fused_on_nash_e():
    g = _silu()
    n = C * HW * HW
    _, L = _layers(g, "bayes-e")  # the X5 log: each SiLU is one HzLut node, named after its Mul
    assert L["conv"].fused == () and L["conv"].total_us > 0
    assert L["sig"].fused_into == "mul" and L["sig"].total_us == 0
    assert L["mul"].op_class == "lut" and L["mul"].fused_ops == "Sigmoid+Mul"
    assert L["mul"].bytes == 2 * n  # reads the conv output once, writes the result once
    _, L = _layers(g, "nash-e")  # its profile applies SiLU in the conv write-back
    assert L["sig"].fused_into == "conv" and L["mul"].fused_into == "conv" and L["conv"].fused_ops == "Sigmoid+Mul"
    _, L = _layers(g, "bernoulli2")  # no SiLU rule: two passes
    assert L["sig"].total_us > 0 and L["mul"].total_us > 0 and L["mul"].op_class == "eltwise"


def test_hardswish_pieces_become_one_pass():
    g = _hardswish_pieces()
    n = C * HW * HW
    res, L = _layers(g, "bayes-e")
    assert {L[k].fused_into for k in ("add3", "clip", "mulx")} == {"div6"}
    assert L["div6"].op_class == "lut" and L["div6"].bytes == 2 * n
    plain = dataclasses.replace(load_march("bayes-e"), fusion=FusionRule())
    _, old = _layers(g, plain)  # without the rule each piece is a pass over the map
    assert all(old[k].total_us > 0 for k in ("add3", "clip", "mulx", "div6"))
    assert res.total_us < sum(lc.total_us for lc in old.values())


def test_quantization_points_follow_the_rule():
    g = _silu()
    # bayes-e evaluates SiLU as a lookup-table pass of its own: it reads the conv's int8 output, so
    # the conv output and the SiLU output are two quantization points (X5 compile log: HzSQuantizedConv,
    # then HzLut with its own input threshold).  A march whose write-back applies SiLU keeps one.
    # The SiLU's gate (its Sigmoid) lives inside the one lookup-table pass: not a quantization point.
    assert fused_into_producer(g) == {"sg"} == fused_into_producer(g, load_march("bayes-e").fusion)
    assert fused_into_producer(g, load_march("nash-e").fusion) == {"c", "sg"}
    assert default_fusion_rule() == load_march("bayes-e").fusion
    assert fused_into_producer(g, FusionRule(write_back=frozenset({"Relu"}))) == set()
    assert fused_into_producer(_bn_relu()) == {"c", "bn"}


def _bias_identity_relu(identity=True):
    """Conv, its bias as an Add, then Relu, with an Identity between them as paddle2onnx writes it
    (PP-OCRv6's detector in rapidocr 3.10: Conv, Add, Identity, Relu)."""
    body = [helper.make_node("Add", ["c", "bias"], ["cb"], name="bias_add")]
    if identity:
        body.append(helper.make_node("Identity", ["cb"], ["cb_id"], name="ident"))
    body += [helper.make_node("Relu", ["cb_id" if identity else "cb"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "w2"], ["y"], name="conv2", kernel_shape=[1, 1])]
    rng = np.random.default_rng(1)
    return _model(body, [_const("bias", rng.standard_normal((C, 1, 1))),
                         _const("w2", rng.standard_normal((C, C, 1, 1)))])


def test_an_identity_in_a_fused_chain_changes_nothing():
    # Before, the Identity ended the chain: Relu was a pass of its own and the bias Add's output a
    # quantization point, and the rapidocr export priced 31.6 ms where the same network without
    # Identity nodes priced 27.4 ms.
    with_id, plain = _bias_identity_relu(), _bias_identity_relu(identity=False)
    assert fused_into_producer(with_id) == {"c", "cb", "cb_id"} and fused_into_producer(plain) == {"c", "cb"}
    assert with_id.observed_tensors == plain.observed_tensors == ["x", "r", "y"]
    res, L = _layers(with_id, "bayes-e")
    ref, _ = _layers(plain, "bayes-e")
    assert L["relu"].fused_into == "conv" and L["ident"].fused_into == "conv"
    assert L["conv"].fused_ops == "Add+Relu"
    assert res.total_us == ref.total_us and res.ddr_bytes == ref.ddr_bytes


def _bayes_e_doc():
    return json.loads(resource_path("marches", "bayes-e.json").read_text(encoding="utf-8"))


def test_fitted_number_without_provenance_is_refused():
    doc = _bayes_e_doc()
    doc["fit"] = {"script": "benchmarks/perf_fit.py", "params": ["utilization"]}
    doc["params"]["utilization"] = {"value": 0.5, "estimate": "a guess"}
    with pytest.raises(MarchError) as e:
        profile_from_dict(doc, where="march profile x.json")
    msg = str(e.value)
    assert "\n" not in msg and '"utilization"' in msg and "fitted to" in msg
    doc["params"]["utilization"]["fitted"] = "fitted to YOLOv8n by benchmarks/perf_fit.py"
    m = profile_from_dict(doc)
    assert m.utilization == 0.5 and m.provenance["utilization"][0] == "fitted"
    doc["fit"]["params"] = ["no_such_param"]
    with pytest.raises(MarchError, match="unknown parameter"):
        profile_from_dict(doc)


def test_bundled_fit_names_what_each_number_was_fitted_to():
    from qtquant.perf.precision import precision_params

    m = load_march("bayes-e")
    assert m.fitted_params
    for k in m.fitted_params:
        if k.startswith("precision."):  # a number of the precision section
            kind, text = precision_params(m).provenance[k.split(".", 1)[1]]
        else:
            kind, text = m.provenance[k]
        assert kind == "fitted" and text.startswith("fitted to")


def _write(graph_fn, path):
    import onnx

    onnx.save(graph_fn().model, str(path))
    return str(path)


def test_explain_prints_the_arithmetic(tmp_path, capsys):
    p = _write(_bn_relu, tmp_path / "m.onnx")
    assert main(["perf", p, "--calib-count", "2", "--explain", "conv"]) == 0
    out = capsys.readouterr().out
    assert "merged into this layer: BatchNormalization+Relu" in out
    assert "MACs /" in out and "GB/s" in out and "-bound" in out
    assert main(["perf", p, "--calib-count", "2", "--explain", "relu"]) == 0
    assert "merged into conv" in capsys.readouterr().out


def test_explain_unknown_node_is_one_line_exit_3(tmp_path, capsys):
    p = _write(_bn_relu, tmp_path / "m.onnx")
    assert main(["perf", p, "--calib-count", "2", "--explain", "convv"]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "convv" in err and "'conv'" in err


def test_latency_badges_say_what_bounds_a_layer_and_what_it_fused():
    from qtquant.app.views.looks import compute_looks
    from qtquant.base.vocab import Overlay

    g = _bn_relu()
    looks = compute_looks(g, Overlay.LATENCY, perf=simulate(g, "bayes-e"))
    text = looks.nodes["conv"].badges[0].text
    assert "µs" in text and "BN+Relu" in text and text.split()[2] in ("cmp", "mem", "ovh")
    assert not looks.nodes["bn"].badges  # merged: no cost of its own
