"""The limits of the X5's BPU ops (perf/bpu_limits.py): a node outside them is placed on the CPU with the
limit it breaks as the reason; one inside them stays on the BPU; a march without limits places neither."""

import json
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import qtquant
from qtquant.base.errors import MarchError
from qtquant.model.graph import graph_from_model
from qtquant.perf import load_march, simulate
from qtquant.perf.march import profile_from_dict
from qtquant.perf.placement import cpu_placed
from qtquant.perf.simulator import Simulator


def _w(name, shape):
    return numpy_helper.from_array(np.random.default_rng(0).standard_normal(shape).astype(np.float32) * 0.1, name)


def _i64(name, v):
    return numpy_helper.from_array(np.array(v, np.int64), name)


def _after_conv(node, x_shape=(1, 8, 16, 16), inits=(), extra=()):
    """x -> conv 1x1 (quantized output) -> ``node`` (reads "c", writes "y") -> ``extra`` nodes."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[1, 1]), node, *extra]
    gp = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                           [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                           [_w("w", (x_shape[1], x_shape[1], 1, 1)), *inits])
    return graph_from_model(helper.make_model(gp, opset_imports=[helper.make_opsetid("", 13)]), ort_fallback=False)


OUTSIDE = [  # (node, its graph's extras, a phrase of the reason)
    (helper.make_node("Conv", ["c", "wk"], ["y"], name="n", kernel_shape=[1, 33], pads=[0, 16, 0, 16]),
     [_w("wk", (8, 8, 1, 33))], "kernel is at most 31×31 on the BPU; this one is 1×33"),
    (helper.make_node("ReduceMean", ["c"], ["y"], name="n", axes=[2, 3], keepdims=0), [], "keepdims=1"),
    (helper.make_node("ReduceSum", ["c", "ax"], ["y"], name="n", keepdims=1), [_i64("ax", [1, 2])],
     "reduces axes 1, 2"),
    (helper.make_node("ReduceMax", ["c"], ["y"], name="n", axes=[1, 2], keepdims=1), [], "one named axis"),
    (helper.make_node("MaxPool", ["c"], ["y"], name="n", kernel_shape=[3, 3], dilations=[2, 2]), [],
     "no dilation"),
    (helper.make_node("AveragePool", ["c"], ["y"], name="n", kernel_shape=[1, 1]), [], "larger than 1×1"),
    (helper.make_node("Resize", ["c", "", "sc"], ["y"], name="n", mode="nearest"),
     [numpy_helper.from_array(np.array([1, 1, 3, 3], np.float32), "sc")], "powers of 2"),
    (helper.make_node("Resize", ["c", "", "sc"], ["y"], name="n", mode="cubic"),
     [numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "sc")], "nearest or linear; this one is cubic"),
    (helper.make_node("DepthToSpace", ["c"], ["y"], name="n", blocksize=4, mode="DCR"), [], "2×2 blocks"),
    (helper.make_node("Pad", ["c", "pads"], ["y"], name="n", mode="reflect"), [_i64("pads", [0, 0, 1, 1, 0, 0, 1, 1])],
     "this one is reflect"),
]


@pytest.mark.parametrize("node, inits, why", OUTSIDE, ids=[f"{n.op_type}-{i}" for i, (n, _, _) in enumerate(OUTSIDE)])
def test_a_node_outside_its_ops_limits_goes_to_the_cpu_with_the_limit_it_breaks(node, inits, why):
    g = _after_conv(node, inits=inits)
    placed = cpu_placed(g, load_march("bayes-e"))
    assert set(placed) == {"n"} and why in placed["n"], placed
    assert cpu_placed(g, load_march("nash-e")) == {}  # a march without limits


INSIDE = [
    (helper.make_node("Conv", ["c", "wk"], ["y"], name="n", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
     [_w("wk", (8, 8, 3, 3))]),
    (helper.make_node("ReduceMean", ["c"], ["y"], name="n", axes=[2, 3], keepdims=1), []),  # H and W together
    (helper.make_node("ReduceMax", ["c"], ["y"], name="n", axes=[1], keepdims=1), []),
    (helper.make_node("Resize", ["c", "", "sc"], ["y"], name="n", mode="nearest"),
     [numpy_helper.from_array(np.array([1, 1, 2, 4], np.float32), "sc")]),
    (helper.make_node("MaxPool", ["c"], ["y"], name="n", kernel_shape=[5, 5], pads=[2, 2, 2, 2]), []),
]


@pytest.mark.parametrize("node, inits", INSIDE, ids=[f"{n.op_type}-{i}" for i, (n, _) in enumerate(INSIDE)])
def test_a_node_inside_its_ops_limits_stays_on_the_bpu(node, inits):
    assert cpu_placed(_after_conv(node, inits=inits), load_march("bayes-e")) == {}


def test_a_concat_or_split_along_the_batch_goes_to_the_cpu_but_not_along_a_transposed_axis():
    m = load_march("bayes-e")
    # two samples' features joined along axis 0: the batch
    batch = _after_conv(helper.make_node("Concat", ["c", "c"], ["y"], name="n", axis=0))
    assert "joins samples" in cpu_placed(batch, m)["n"]
    # a 3×1×... tensor (q, k, v moved in front by a Transpose) split along axis 0: not the batch
    gp = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[1, 1]),
         helper.make_node("Reshape", ["c", "shape"], ["r"], name="r"),
         helper.make_node("Transpose", ["r"], ["t"], name="t", perm=[1, 0, 2, 3]),
         helper.make_node("Split", ["t", "parts"], ["y", "k", "v"], name="n", axis=0)],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 24, 4, 4])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in ("y", "k", "v")],
        [_w("w", (24, 24, 1, 1)), _i64("shape", [1, 3, 8, 16]), _i64("parts", [1, 1, 1])])
    qkv = graph_from_model(helper.make_model(gp, opset_imports=[helper.make_opsetid("", 13)]), ort_fallback=False)
    assert "n" not in cpu_placed(qkv, m)


def test_a_placed_node_leaves_the_static_estimate_for_the_board_line():
    g = _after_conv(helper.make_node("ReduceMean", ["c"], ["y"], name="n", axes=[2, 3], keepdims=0))
    m = load_march("bayes-e")
    bpu = Simulator(g, m).full(())  # every node priced on the BPU
    res = simulate(g, m)
    assert res.precision is not None and res.precision.placed == 1
    assert res.precision.by_node()["n"].device == "cpu" and "keepdims=1" in res.precision.by_node()["n"].note
    assert res.total_us < bpu.total_us and res.board_us > bpu.board_us


def test_a_profile_naming_unknown_limits_is_one_line_error():
    doc = json.loads((Path(qtquant.__file__).parent.parent / "resources/marches/bayes-e.json").read_text())
    doc["params"]["bpu_limits"]["value"] = "rdk-x9"
    with pytest.raises(MarchError, match="bpu_limits.*not a known set of BPU limits.*rdk-x5") as e:
        profile_from_dict(doc)
    assert "\n" not in str(e.value)
