"""The perf simulator: rescale rule, fusion, alignment, march profiles, incremental == full."""

import json
import random
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from builders import synthetic_model
from qtquant.quant import groups as groups_mod
from qtquant.calib import CalibConfig, CalibrationResult, TensorStats
from qtquant.quant.concat import analyze_concats
from qtquant.quant.domains import build_domains
from qtquant.base.errors import MarchError
from qtquant.model.graph import graph_from_model
from qtquant.perf import Simulator, load_march, march_names, simulate, simulate_session, warm_up
from qtquant.perf.march import PARAMS
from qtquant.app import Session


def _w(name, shape):
    return numpy_helper.from_array(np.random.default_rng(0).standard_normal(shape).astype(np.float32) * 0.1, name)


def _cat_model(axis=1, c=16, hw=32):
    """x -> convA -> a ; x -> convB -> b ; Concat(a, b) -> cat ; conv(cat) -> y."""
    nodes = [
        helper.make_node("Conv", ["x", "wa"], ["a"], name="convA", kernel_shape=[1, 1]),
        helper.make_node("Conv", ["x", "wb"], ["b"], name="convB", kernel_shape=[1, 1]),
        helper.make_node("Concat", ["a", "b"], ["cat"], name="cat", axis=axis),
        helper.make_node("Relu", ["cat"], ["y"], name="relu"),
    ]
    g = helper.make_graph(nodes, "cat", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [_w("wa", (c, c, 1, 1)), _w("wb", (c, c, 1, 1))])
    return graph_from_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), ort_fallback=False)


RANGES = {"x": (-1.0, 1.0), "a": (-1.0, 1.0), "b": (-4.0, 4.0), "cat": (-4.0, 4.0), "y": (0.0, 4.0)}


def _concats(graph, groups=()):
    return analyze_concats(graph, build_domains(graph, RANGES, groups))


def test_mismatched_input_gets_one_virtual_rescale_node():
    g = _cat_model()
    march = load_march("bernoulli2")  # a march whose rescaled Concat becomes a copy
    res = simulate(g, march, _concats(g))
    names = [lc.name for lc in res.layers]
    assert res.rescale_count == 1
    assert [r.name for r in res.rescales] == ["cat_rescale_0"]  # input 0 (range 1) vs output (range 4)
    assert names.index("cat_rescale_0") == names.index("cat") - 1
    r = res.rescales[0]
    assert r.is_rescale and r.concat == "cat" and r.op_type == "Rescale"
    n = 16 * 32 * 32
    assert r.bytes == 2 * n  # one int8 read and one int8 write of the input
    assert r.compute_us == pytest.approx(n / (march.vector_elems_per_s * march.eltwise_efficiency) * 1e6)
    assert r.total_us == pytest.approx(max(r.compute_us, r.memory_us) + march.op_overhead_us)
    cat = next(lc for lc in res.layers if lc.name == "cat")
    assert not march.fusion.concat_in_place
    assert cat.total_us > 0  # a rescaled channel Concat cannot be done in place on this march
    assert res.rescale_cost_by_concat()["cat"] == pytest.approx(r.total_us + cat.total_us)
    assert res.rescale_us == pytest.approx(res.rescale_cost_by_concat()["cat"])
    assert res.by_node()["cat"] == pytest.approx(cat.total_us + r.total_us)
    assert res.total_us == pytest.approx(sum(lc.total_us for lc in res.layers))


def test_concat_in_place_march_requantizes_into_the_buffer():
    g = _cat_model()
    march = load_march("bayes-e")
    assert march.fusion.concat_in_place  # the X5 log: a plain Concat next to its HzRequantize nodes
    res = simulate(g, march, _concats(g))
    cat = res.layer("cat")
    assert res.rescale_count == 1 and cat.total_us == 0
    assert res.rescale_cost_by_concat()["cat"] == pytest.approx(res.rescales[0].total_us)


def test_shared_scale_makes_channel_concat_free():
    g = _cat_model()
    before = simulate(g, "bayes-e", _concats(g))
    after = simulate(g, "bayes-e", _concats(g, [["a", "b", "cat"]]))
    cat = next(lc for lc in after.layers if lc.name == "cat")
    assert after.rescale_count == 0 and after.rescales == []
    assert cat.total_us == 0 and cat.bytes == 0
    assert after.rescale_cost_by_concat() == {"cat": 0.0}
    # Sharing saves exactly what the mismatch was said to cost.
    assert before.total_us - after.total_us == pytest.approx(before.rescale_cost_by_concat()["cat"])


def test_non_channel_concat_is_a_copy_even_when_matched():
    g = _cat_model(axis=2)
    res = simulate(g, "bayes-e", _concats(g, [["a", "b", "cat"]]))
    cat = next(lc for lc in res.layers if lc.name == "cat")
    assert res.rescale_count == 0
    assert cat.total_us > 0 and cat.bytes == 2 * 2 * 16 * 32 * 32
    assert res.rescale_cost_by_concat()["cat"] == 0.0


def test_concat_without_analysis_is_costed_as_copy():
    g = _cat_model()
    res = simulate(g, "bayes-e", [])
    assert next(lc for lc in res.layers if lc.name == "cat").total_us > 0
    assert res.rescale_count == 0


def test_every_node_appears_once_in_layers_and_by_node():
    g = _cat_model()
    res = simulate(g, "bayes-e", _concats(g))
    assert [lc.name for lc in res.layers if not lc.is_rescale] == list(g.nodes)
    assert set(res.by_node()) == set(g.nodes)
    doc = json.loads(json.dumps(res.to_dict()))
    assert doc["summary"]["rescales"] == 1
    assert {d["name"] for d in doc["layers"]} == {lc.name for lc in res.layers}
    assert res.fps == pytest.approx(1000.0 / res.total_ms)


def test_relu_fuses_into_conv_and_conv_writes_its_output():
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Add", ["r", "x"], ["y"], name="add")]
    gp = helper.make_graph(nodes, "f", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 8, 8])],
                           [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [_w("w", (16, 16, 3, 3))])
    g = graph_from_model(helper.make_model(gp, opset_imports=[helper.make_opsetid("", 17)]), ort_fallback=False)
    lay = {lc.name: lc for lc in simulate(g, "bayes-e").layers}
    assert lay["relu"].total_us == 0 and "fused into conv" in lay["relu"].note
    # bernoulli2 (X3) does not fuse SiLU, bayes-e does: the profiles say so.
    assert "SiLU" in load_march("bayes-e").fused_activations
    assert "SiLU" not in load_march("bernoulli2").fused_activations
    assert lay["add"].total_us == 0 and "fused into conv" in lay["add"].note  # residual add folded too
    n = 16 * 8 * 8
    # The conv reads x, its int8 weights and the residual x, and writes the chain's last tensor y;
    # the intermediate c and r never leave the pipeline.
    assert lay["conv"].bytes == n + 16 * 16 * 9 + n + n
    x3 = {lc.name: lc for lc in simulate(g, "bernoulli2").layers}
    assert x3["relu"].total_us == 0 and x3["add"].total_us == 0


def _one_conv(cin, cout, hw=28, k=3):
    gp = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], name="conv", kernel_shape=[k, k],
                                             pads=[k // 2] * 4)], "c",
                           [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, hw, hw])],
                           [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [_w("w", (cout, cin, k, k))])
    g = graph_from_model(helper.make_model(gp, opset_imports=[helper.make_opsetid("", 17)]), ort_fallback=False)
    return simulate(g, "bayes-e").layers[0]


def test_channel_alignment_lowers_utilization():
    m = load_march("bayes-e")
    assert m.channel_align == 16
    aligned, odd = _one_conv(128, 128, hw=56, k=5), _one_conv(128, 129, hw=56, k=5)
    per_mac_aligned = aligned.compute_us / aligned.macs
    per_mac_odd = odd.compute_us / odd.macs
    assert per_mac_aligned == pytest.approx(1e6 / (m.macs_per_s * m.utilization))
    assert per_mac_odd == pytest.approx(per_mac_aligned * 144 / 129)  # 129 channels occupy 144 lanes
    assert aligned.bound == "compute"


def test_depthwise_pays_for_one_channel_per_group():
    m = load_march("bayes-e")
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], name="dw", kernel_shape=[3, 3], pads=[1] * 4, group=64)]
    gp = helper.make_graph(nodes, "dw", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 56, 56])],
                           [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [_w("w", (64, 1, 3, 3))])
    g = graph_from_model(helper.make_model(gp, opset_imports=[helper.make_opsetid("", 17)]), ort_fallback=False)
    lc = simulate(g, m).layers[0]
    assert lc.macs == 64 * 56 * 56 * 9
    assert lc.compute_us == pytest.approx(lc.macs / (m.macs_per_s * m.utilization / 16 * m.depthwise_efficiency) * 1e6)
    assert "depthwise" in lc.note


def test_memory_bound_layer_is_bytes_over_bandwidth():
    m = load_march("bayes-e")
    nodes = [helper.make_node("Sigmoid", ["x"], ["y"], name="sig")]
    gp = helper.make_graph(nodes, "s", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 160, 160])],
                           [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    g = graph_from_model(helper.make_model(gp, opset_imports=[helper.make_opsetid("", 17)]), ort_fallback=False)
    res = simulate(g, m)
    lc = res.layers[0]
    n = 64 * 160 * 160
    assert lc.bound == "memory"
    assert lc.memory_us == pytest.approx(2 * n / m.ddr_bytes_per_s * 1e6)  # model input and output live in DDR
    assert lc.ddr_bytes == 2 * n and res.ddr_bytes == 2 * n
    assert lc.total_us == pytest.approx(lc.memory_us + m.op_overhead_us)


def _synthetic(n, seed=0):
    g = graph_from_model(synthetic_model(n, seed=seed), ort_fallback=False)
    rng = np.random.default_rng(seed)
    ranges = {}
    for t in g.observed_tensors:
        hi = float(rng.uniform(0.5, 8.0))
        ranges[t] = (-hi, hi)
    return g, ranges


def test_plan_removes_exactly_the_predicted_rescales():
    g, ranges = _synthetic(400, seed=3)
    sim = Simulator(g, "bayes-e")
    before_c = analyze_concats(g, build_domains(g, ranges))
    before = sim.full(before_c)
    target = next(c for c in before_c if c.rescales >= 1)
    predicted = {f"{target.node}_rescale_{i}" for i in target.rescale_inputs}
    group = [m.tensor for m in target.inputs] + [target.output.tensor]
    after_c = analyze_concats(g, build_domains(g, ranges, [group]))
    after = sim.update(after_c)
    removed = {r.name for r in before.rescales} - {r.name for r in after.rescales}
    assert removed == predicted
    assert {r.name for r in after.rescales} <= {r.name for r in before.rescales}
    assert after.rescale_count == before.rescale_count - len(predicted)
    assert before.total_us - after.total_us == pytest.approx(before.rescale_cost_by_concat()[target.node])


def test_session_groups_and_simulate_session():
    g, ranges = _synthetic(150, seed=5)
    s = Session(g)
    s.set_calibration(CalibrationResult({t: TensorStats(*r) for t, r in ranges.items()}, dict(ranges),
                                        CalibConfig()))
    before = simulate_session(s)
    c = next(c for c in s.concats() if c.rescales)
    groups_mod.share(s, [m.tensor for m in c.inputs] + [c.output.tensor])
    after = simulate_session(s)
    base = simulate_session(s, baseline=True)
    assert base.total_us == pytest.approx(before.total_us)
    assert after.rescale_count == before.rescale_count - c.rescales
    assert not any(r.concat == c.node for r in after.rescales)
    assert after.total_ms < before.total_ms
    # The march comes from the session's options; a march file overrides it.
    s.set_options(march="nash-e")
    on_nash = simulate_session(s)
    assert on_nash.march == "nash-e" and on_nash.total_us != pytest.approx(after.total_us)
    assert on_nash.total_us == pytest.approx(simulate(g, load_march("nash-e"), s.concats()).total_us)


def test_warm_up_computes_the_costs_simulate_session_reuses():
    """qtquant analyze starts the per-node costs before calibrating (warm_up); the simulation after
    calibration then reuses them, with the figures a cold simulation gives."""
    from qtquant.perf import simulator

    g, ranges = _synthetic(150, seed=5)
    s = Session(g)
    warm_up(s).join()
    sim = simulator._simulator_for(g, load_march(s.options.march))
    assert sim._state is not None  # computed before any scale exists
    warm_state = sim._state
    s.set_calibration(CalibrationResult({t: TensorStats(*r) for t, r in ranges.items()}, dict(ranges),
                                        CalibConfig()))
    res = simulate_session(s)
    assert sim._state is warm_state
    cold = simulate(g, load_march(s.options.march), s.concats())
    assert res.to_dict() == cold.to_dict()
    # A march that does not load: nothing raised on the thread, simulate_session reports it.
    s.set_options(march="no-such-march")
    warm_up(s).join()
    with pytest.raises(MarchError):
        simulate_session(s)


def test_incremental_equals_full():
    g, ranges = _synthetic(600, seed=7)
    sim = Simulator(g, "bayes-e")
    concats = analyze_concats(g, build_domains(g, ranges))
    sim.full(concats)
    rnd = random.Random(1)
    groups = []
    for _ in range(6):
        c = rnd.choice(concats)
        groups.append([m.tensor for m in c.inputs] + [c.output.tensor])
        cs = analyze_concats(g, build_domains(g, ranges, groups))
        inc = sim.update(cs)
        full = Simulator(g, "bayes-e").full(cs)
        assert inc.to_dict() == full.to_dict()
        assert inc.total_us == full.total_us and inc.ddr_bytes == full.ddr_bytes
        assert inc.by_node() == full.by_node()
        assert inc.rescale_cost_by_concat() == full.rescale_cost_by_concat()


# -- march profiles --------------------------------------------------------------------------

def test_bundled_marches_state_every_source():
    assert set(march_names()) >= {"bernoulli2", "bayes-e", "bayes", "nash-e"}
    for name in march_names():
        m = load_march(name)
        # Every parameter but the optional ones (and the older spelling of "fusion") is stated.
        assert set(m.provenance) >= set(PARAMS) - {"fused_activations", "board_cpu_overhead_us", "board_call_us",
                                                   "region_efficiency", "board_ns_per_element",
                                                   "weight_gbps", "stream_tiles", "relayout_reshape",
                                                   "attention_onchip_share", "image_input_nv12", "board_bpu_ghz",
                                                   "cpu_ops", "softmax_bpu_rank", "bpu_limits"}
        assert all(kind in ("source", "estimate", "fitted") and text for kind, text in m.provenance.values())
    # The public facts of DESIGN §4 are sourced, the unknown bandwidths are estimates.
    assert load_march("bayes-e").provenance["peak_tops"][0] == "source"
    assert load_march("nash-e").provenance["ddr_gbps"][0] == "source"
    assert load_march("nash-e").ddr_gbps == 45
    assert load_march("bayes-e").provenance["ddr_gbps"][0] == "fitted"  # benchmarks/perf_fit.py
    assert load_march("bernoulli2").provenance["ddr_gbps"][0] == "estimate"
    assert load_march("bernoulli2").macs_per_s == pytest.approx(5e12 / 2 / 2)  # one of two cores


def test_unknown_march_is_a_one_line_error():
    with pytest.raises(MarchError) as e:
        load_march("bayes-x")
    msg = str(e.value)
    assert "\n" not in msg and "bayes-x" in msg and "bayes-e" in msg


def _profile(tmp_path, mutate):
    doc = json.loads(Path(load_march("bayes-e").path).read_text())
    mutate(doc)
    p = tmp_path / "mine.json"
    p.write_text(json.dumps(doc))
    return p


@pytest.mark.parametrize("mutate, words", [
    (lambda d: d["params"].pop("ddr_gbps"), "missing parameter \"ddr_gbps\""),
    (lambda d: d["params"]["sram_mb"].pop("estimate"), "neither"),
    (lambda d: d["params"]["ddr_gbps"].update(value=-3), "greater than 0"),
    (lambda d: d["params"]["ddr_gbps"].update(value="fast"), "must be a number"),
    (lambda d: d["params"]["utilization"].update(value=1.5), "at most 1"),
    (lambda d: d["params"].update(warp_speed={"value": 9, "estimate": "x"}), "unknown parameter"),
    (lambda d: d.pop("name"), "name"),
    (lambda d: d["params"]["channel_align"].update(value=8.5), "whole number"),
])
def test_bad_profile_files_are_one_line_errors(tmp_path, mutate, words):
    p = _profile(tmp_path, mutate)
    with pytest.raises(MarchError) as e:
        load_march(p)
    msg = str(e.value)
    assert "\n" not in msg and words in msg and "mine.json" in msg


def test_profile_not_json_or_missing(tmp_path):
    p = tmp_path / "broken.json"
    p.write_text("{ not json")
    with pytest.raises(MarchError, match="not valid JSON"):
        load_march(p)
    with pytest.raises(MarchError, match="not found"):
        load_march(tmp_path / "nope.json")


def test_user_profile_is_used(tmp_path):
    def faster(d):
        d["name"] = "bayes-e-2x"
        d["params"]["peak_tops"] = {"value": 20, "estimate": "what-if"}
    p = _profile(tmp_path, faster)
    m = load_march(str(p))
    assert m.name == "bayes-e-2x" and m.macs_per_s == 2 * load_march("bayes-e").macs_per_s
    assert _one_conv(64, 64).compute_us > 0
