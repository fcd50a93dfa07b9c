"""What a build leaves out of the model it writes: the float originals nothing reads any more
(initializers and Constant nodes), and nothing that is still read (by a node the build added, a
node it rewired, a subgraph or a graph output)."""

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from builders import save
from qtquant.app import open_model
from qtquant.export.qdq import build_qdq_model
from qtquant.export.rewrite import prune


def _branch(name, node):
    return helper.make_graph([node], name, [], [helper.make_tensor_value_info(node.output[0], TensorProto.FLOAT, None)])


def _model() -> onnx.ModelProto:
    """A Conv whose weight is a Constant node (quantized by the export, so the Constant is left
    unread), a Constant the Add keeps reading as its float operand, and an If whose branch reads an
    outer initializer."""
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32)
    nodes = [
        helper.make_node("Constant", [], ["w"], name="w_const", value=numpy_helper.from_array(w, "w_value")),
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Constant", [], ["k"], name="k_const",
                         value=numpy_helper.from_array(np.full((1, 4, 1, 1), 0.5, np.float32), "k_value")),
        helper.make_node("Add", ["c", "k"], ["a"], name="add"),
        helper.make_node("ReduceMax", ["a"], ["m"], name="max", keepdims=0),
        helper.make_node("Greater", ["m", "zero"], ["cond"], name="gt"),
        helper.make_node("If", ["cond"], ["y"], name="if",
                         then_branch=_branch("then", helper.make_node("Mul", ["a", "two"], ["t"], name="mul")),
                         else_branch=_branch("else", helper.make_node("Identity", ["a"], ["t2"], name="id"))),
    ]
    inits = [numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
             numpy_helper.from_array(np.array(2.0, np.float32), "two")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_a_build_drops_only_what_nothing_reads(tmp_path):
    s = open_model(save(_model(), tmp_path / "m.onnx"))
    s.run_calibration()
    m = build_qdq_model(s).model
    names = {n.name for n in m.graph.node}
    assert "w_const" not in names and "k_const" in names  # w is read quantized, behind a DequantizeLinear
    read = {i for n in m.graph.node for i in n.input} | {"two"}  # (the If's branch reads "two")
    inits = {t.name for t in m.graph.initializer}
    assert "two" in inits and inits <= read  # nothing unread is left, the subgraph's initializer is kept
    # the walking prune finds nothing more to drop, and the model runs
    again = onnx.ModelProto()
    again.CopyFrom(m)
    prune(again)
    assert again.SerializeToString() == m.SerializeToString()
    x = np.random.default_rng(1).random((1, 3, 8, 8), dtype=np.float32)
    ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
