"""The export's layout for onnxruntime: one DequantizeLinear per consumer input, zero points shared.

onnxruntime fuses a DQ into one consumer only and copies shared DQs itself at session creation
(EnsureUniqueDQForNodeUnit, seconds on a 20,000-node model), so the export writes them that way.
The layout must compute exactly what the shared-DQ layout computes, and read back as one weight.
"""

from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from builders import save
from qtquant.app import open_model
from qtquant.export.qdq import build_qdq_model, export_qdq


def shared_model() -> onnx.ModelProto:
    """Every way one value reaches several inputs: a weight read by two Convs, an activation read
    by a Conv and an Add (twice: Mul(a, a)), a model output also read inside the graph, and a
    constant fed to two Concats."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((4, 4, 1, 1)) * 0.5).astype(np.float32), "w"),
             numpy_helper.from_array(rng.random((1, 4, 6, 6), dtype=np.float32), "k")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["a"], name="conv_a"),
             helper.make_node("Relu", ["a"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "w"], ["b"], name="conv_b"),  # the shared weight
             helper.make_node("Add", ["r", "b"], ["c"], name="add"),  # r read twice
             helper.make_node("Mul", ["c", "c"], ["sq"], name="square"),  # one node, both inputs
             helper.make_node("Concat", ["c", "k"], ["cat1"], name="cat1", axis=1),
             helper.make_node("Concat", ["sq", "k"], ["cat2"], name="cat2", axis=1),
             helper.make_node("Add", ["cat1", "cat2"], ["out"], name="out_add")]
    g = helper.make_graph(nodes, "shared", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])],
                          [helper.make_tensor_value_info("c", TensorProto.FLOAT, None),  # also read inside
                           helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.fixture
def built(tmp_path):
    s = open_model(save(shared_model(), tmp_path / "shared.onnx"))
    s.run_calibration()
    return s, build_qdq_model(s).model


def _edges(model):
    """Per tensor: the (node, input index) pairs reading it."""
    out = {}
    for n in model.graph.node:
        for k, i in enumerate(n.input):
            out.setdefault(i, []).append((n.name, k))
    return out


def _run(model, level, feeds):
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return [sess.run(None, f) for f in feeds]


def _merge_dq_copies(model) -> onnx.ModelProto:
    """The shared-DQ layout of the same model: DQs with the same inputs and attributes merged into
    the first, their readers rewired to it."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    first, rename, keep = {}, {}, []
    for n in m.graph.node:
        if n.op_type == "DequantizeLinear":
            key = (tuple(n.input), n.attribute[0].SerializeToString() if n.attribute else b"")
            graph_out = n.output[0] in {o.name for o in m.graph.output}
            if key in first and not graph_out:
                rename[n.output[0]] = first[key]
                continue
            if not graph_out:
                first.setdefault(key, n.output[0])
        keep.append(n)
    for n in keep:
        for k, i in enumerate(n.input):
            n.input[k] = rename.get(i, i)
    del m.graph.node[:]
    m.graph.node.extend(keep)
    return m


def test_each_dq_feeds_one_input_of_one_node(built):
    _, model = built
    onnx.checker.check_model(model, full_check=True)
    edges = _edges(model)
    outputs = {o.name for o in model.graph.output}
    dqs = [n for n in model.graph.node if n.op_type == "DequantizeLinear"]
    for n in dqs:
        readers = edges.get(n.output[0], [])
        if n.output[0] in outputs:
            assert readers == [], f"{n.name} writes a model output and feeds {readers}"
        else:
            assert len(readers) == 1, f"{n.name} feeds {readers}"
    # The shared weight: one int8 initializer, one DQ per Conv reading it.
    w_dqs = [n for n in dqs if n.input[0] == "w_quantized"]
    assert len(w_dqs) == 2 and len({n.output[0] for n in w_dqs}) == 2
    assert {edges[n.output[0]][0][0] for n in w_dqs} == {"conv_a", "conv_b"}
    # Mul(c, c): two inputs of one node, each its own DQ of c's one Q.
    sq = next(n for n in model.graph.node if n.name == "square")
    assert sq.input[0] != sq.input[1]
    producer = {o: n for n in model.graph.node for o in n.output}
    assert producer[sq.input[0]].input == producer[sq.input[1]].input


def test_zero_points_are_one_initializer_per_value(built):
    s, model = built
    act_zps = {n.input[2] for n in model.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")
               and n.input[0] != "w_quantized" and not n.input[0].startswith("k_")}
    assert len(act_zps) == 1  # symmetric int8: every activation's zero point is 0
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    assert int(inits[act_zps.pop()]) == 0
    # Each domain still has its own scale initializer, named after it.
    scales = {n.input[1] for n in model.graph.node if n.op_type == "QuantizeLinear"}
    assert all(x.startswith("qtq_d") for x in scales)
    assert len(scales) == build_qdq_model(s).domains > 1


@pytest.mark.parametrize("level", [ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
                                   ort.GraphOptimizationLevel.ORT_ENABLE_BASIC])
def test_outputs_equal_the_shared_dq_layout(built, level):
    _, model = built
    merged = _merge_dq_copies(model)
    assert len(merged.graph.node) < len(model.graph.node)  # there was something to merge
    rng = np.random.default_rng(1)
    feeds = [{"x": rng.standard_normal((1, 4, 6, 6)).astype(np.float32)} for _ in range(3)]
    for a, b in zip(_run(model, level, feeds), _run(merged, level, feeds)):
        for x, y in zip(a, b):
            assert np.array_equal(x, y)


def test_reopened_export_reads_one_weight_and_one_pair_per_tensor(built, tmp_path):
    s, _ = built
    res = export_qdq(s, tmp_path / "q.onnx")
    again = open_model(tmp_path / "q.onnx")
    assert again.quantized_file
    # The float view reads one weight, as the model did, and counts Q/DQ pairs, not DQ nodes.
    convs = [n for n in again.graph.nodes.values() if n.op_type == "Conv"]
    assert len({n.inputs[1] for n in convs}) == 1
    assert again.qdq.pairs == res.build.activations
    counts = Counter(n.op_type for n in onnx.load(str(tmp_path / "q.onnx")).graph.node)
    assert counts["DequantizeLinear"] > counts["QuantizeLinear"]  # the copies are there


@pytest.mark.parametrize("op, axis", [("QuantizeLinear", None), ("DequantizeLinear", None), ("DequantizeLinear", 0),
                                      ("DequantizeLinear", 1)])
def test_the_export_writes_the_nodes_onnx_helper_would(op, axis):
    from onnx import helper

    from qtquant.export.rewrite import _node

    ours = _node(op, ["x", "x_scale", "x_zero_point"], "y", "n_1", axis)
    theirs = helper.make_node(op, ["x", "x_scale", "x_zero_point"], ["y"], name="n_1",
                              **({} if axis is None else {"axis": axis}))
    assert ours.SerializeToString() == theirs.SerializeToString()
