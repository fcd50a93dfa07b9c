"""Nodes the march's compiler runs on the CPU (perf/placement.py): bayes-e's ops that are not BPU ops
(D-Robotics' X5 operator list) and its Softmax rule, priced as float CPU nodes whatever the user chose."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from qtquant.base.vocab import Precision
from qtquant.model.graph import graph_from_model
from qtquant.perf import load_march, simulate
from qtquant.perf.placement import cpu_placed
from qtquant.perf.precision import apply_precision, precision_table_text
from qtquant.perf.simulator import Simulator


def _w(name, shape):
    return numpy_helper.from_array(np.random.default_rng(0).standard_normal(shape).astype(np.float32) * 0.1, name)


def _i64(name, v):
    return numpy_helper.from_array(np.array(v, np.int64), name)


def _graph(opset=17, softmax_shape=(1, 16, 64), softmax_axis=2):
    """x[1,16,8,8] -> conv -> c; c -> heads [1,2,8,64] -> ReduceL2 over the tokens -> Clip -> Div (an
    XCA-style normalisation) -> back -> conv -> y; c -> a Softmax of ``softmax_shape`` over
    ``softmax_axis`` -> back -> Add into y."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="qkv", kernel_shape=[1, 1]),
             helper.make_node("Reshape", ["c", "heads"], ["q"], name="to_heads"),
             helper.make_node("ReduceL2", ["q"], ["n"], name="norm", axes=[-1], keepdims=1),
             helper.make_node("Clip", ["n", "eps"], ["nc"], name="clip"),
             helper.make_node("Div", ["q", "nc"], ["qn"], name="div"),
             helper.make_node("Reshape", ["qn", "back"], ["b"], name="from_heads"),
             helper.make_node("Conv", ["b", "w2"], ["p"], name="proj", kernel_shape=[1, 1]),
             helper.make_node("Reshape", ["c", "sm_shape"], ["s_in"], name="to_sm"),
             helper.make_node("Softmax", ["s_in"], ["s"], name="softmax", axis=softmax_axis),
             helper.make_node("Reshape", ["s", "back"], ["s4"], name="from_sm"),
             helper.make_node("Add", ["p", "s4"], ["y"], name="add")]
    inits = [_w("w", (16, 16, 1, 1)), _w("w2", (16, 16, 1, 1)), _i64("heads", [1, 2, 8, 64]),
             _i64("back", [1, 16, 8, 8]), _i64("sm_shape", list(softmax_shape)),
             numpy_helper.from_array(np.array(1e-12, np.float32), "eps")]
    gp = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 8, 8])],
                           [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return graph_from_model(helper.make_model(gp, opset_imports=[helper.make_opsetid("", opset)]), ort_fallback=False)


def test_bayes_e_runs_reduce_l2_and_a_3d_softmax_on_the_cpu():
    g, m = _graph(), load_march("bayes-e")
    placed = cpu_placed(g, m)
    assert set(placed) == {"norm", "softmax"}
    assert "ReduceL2 is not a BPU op on bayes-e" in placed["norm"]
    assert "4-D input" in placed["softmax"] and "3-D over axis 2" in placed["softmax"]
    bpu = Simulator(g, m).full(())  # every node priced on the BPU
    res = simulate(g, m)
    cost = res.precision
    assert cost is not None and cost.placed == 2 and cost.float_tensors == 0 and cost.int16_tensors == 0
    prices = cost.by_node()
    for name in ("norm", "softmax"):
        assert prices[name].device == "cpu" and prices[name].handoffs == 2
        assert prices[name].note.startswith("placed on the CPU by the compiler: ")
    # off the BPU: out of the static estimate, onto the board's CPU time
    assert res.total_us == pytest.approx(bpu.total_us - bpu.layer("norm").total_us - bpu.layer("softmax").total_us)
    assert res.board_us > bpu.board_us
    assert "2 node(s) the compiler runs on the CPU (by bayes-e's operator list)" in precision_table_text(res)
    text = precision_table_text(res)
    assert "mixed precision" not in text  # no choice of the user's: one line per node, with why
    assert "  norm (ReduceL2): ReduceL2 is not a BPU op on bayes-e; +" in text
    assert res.to_dict()["precision"]["placed_nodes"] == 2


def test_a_reduction_on_the_cpu_works_on_every_element_it_reads():
    g, m = _graph(), load_march("bayes-e")
    from qtquant.perf.precision import precision_params

    r = precision_params(m)
    lc = simulate(g, m).layer("norm")
    reads = 16 * 8 * 8  # [1,2,8,64]: its output has 64 times fewer elements
    crossing = reads + 16  # in from the BPU (the Reshape), out to the Clip on the BPU
    assert lc.compute_us == pytest.approx(r.cpu_elementwise_flops * reads / r.cpu_flops_per_s * 1e6
                                          + crossing * m.board_ns_per_element / 1000)


def test_a_4d_softmax_stays_on_the_bpu_by_its_opsets_rule():
    m = load_march("bayes-e")
    last = _graph(softmax_shape=(1, 2, 8, 64), softmax_axis=3)
    assert set(cpu_placed(last, m)) == {"norm"}
    one_axis = _graph(softmax_shape=(1, 2, 8, 64), softmax_axis=1)  # opset 13+: a per-axis Softmax
    assert set(cpu_placed(one_axis, m)) == {"norm"}
    coerced = _graph(opset=11, softmax_shape=(1, 2, 8, 64), softmax_axis=1)  # opset 11: flattened from axis 1
    assert "over its last axis (opset 11)" in cpu_placed(coerced, m)["softmax"]
    assert set(cpu_placed(_graph(opset=11, softmax_shape=(1, 2, 8, 64), softmax_axis=3), m)) == {"norm"}


def test_a_placed_node_is_on_the_cpu_whatever_it_was_given_and_other_marches_place_nothing():
    g, m = _graph(), load_march("bayes-e")
    base = Simulator(g, m).full(())
    res = apply_precision(base, g, m, {"n": Precision.INT16})  # norm's output asked for int16
    p = res.precision.by_node()["norm"]
    assert p.device == "cpu" and p.precision is Precision.FLOAT and res.precision.int16_tensors == 0
    for name in ("nash-e", "bernoulli2"):
        other = load_march(name)
        assert cpu_placed(g, other) == {} and simulate(g, other).precision is None


def test_nodes_placed_for_one_reason_are_one_line():
    from qtquant.perf.precision import NodePrice, PrecisionCost, _placed_lines

    why = "a Softmax runs on the BPU only on a 4-D input over its last axis (opset 11); this one is 3-D over axis 2"
    nodes = [NodePrice(f"sm{i}", "Softmax", Precision.FLOAT, "cpu", 1.0, 1.0 + d, 2, placed=why)
             for i, d in enumerate((100.0, 300.0, 200.0))]
    nodes.append(NodePrice("n", "ReduceL2", Precision.FLOAT, "cpu", 1.0, 51.0, 2, placed="ReduceL2 is not a BPU op"))
    lines = _placed_lines(PrecisionCost(nodes))
    assert lines == ["  3 Softmax (sm1, …): a Softmax runs on the BPU only on a 4-D input over its last axis "
                     "(opset 11); each is 3-D over axis 2; +600.0 µs in all",
                     "  n (ReduceL2): ReduceL2 is not a BPU op; +50.0 µs"]
