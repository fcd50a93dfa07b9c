"""Shape inference without onnx's data propagation where it cannot change anything
(:func:`qtquant.model.modelcheck.needs_data_propagation`).

Propagation computes the values of shape tensors (a Reshape's target from Shape -> Gather ->
Concat).  The rule keeps it on wherever a node could make or carry such a value, and these tests
pin both sides: where it is kept on, turning it off would lose a shape; where it is turned off, the
inferred model is the same byte for byte."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from builders import branchy_concat_model, detector_model, save, synthetic_model, zoo_model
from qtquant.model.graph import _default_opset, load_graph
from qtquant.model.inference import infer_here
from qtquant.model.modelcheck import needs_data_propagation
from qtquant.model.nodetable import NodeTable


def _model(nodes, inits=(), out_shape=None, opset=17):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _needs(m) -> bool:
    return needs_data_propagation(m, NodeTable(m.graph), _default_opset(m))


def _flatten_by_shape():
    """y = Reshape(x, Concat(Gather(Shape(x), 0), [-1])): only propagation knows y is 1 x 144."""
    i64 = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)  # noqa: E731
    return _model([helper.make_node("Shape", ["x"], ["s"]),
                   helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
                   helper.make_node("Concat", ["n", "minus1"], ["target"], axis=0),
                   helper.make_node("Reshape", ["x", "target"], ["y"])],
                  [i64("zero", [0]), i64("minus1", [-1])])


def _reshape_to_sum():
    """y = Reshape(x, Add(a, b)) with int64 initializers: propagation adds them (no Shape op)."""
    i64 = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)  # noqa: E731
    return _model([helper.make_node("Add", ["a", "b"], ["target"]),
                   helper.make_node("Reshape", ["x", "target"], ["y"])],
                  [i64("a", [0, 100]), i64("b", [1, 44])])


def _reshape_to_constant_concat():
    """y = Reshape(x, Concat(Constant [1], Constant [144])): values onnx holds from Constant nodes."""
    return _model([helper.make_node("Constant", [], ["c0"], value_ints=[1]),
                   helper.make_node("Constant", [], ["c1"], value_ints=[144]),
                   helper.make_node("Concat", ["c0", "c1"], ["target"], axis=0),
                   helper.make_node("Reshape", ["x", "target"], ["y"])])


def _y_shape(data: bytes):
    import onnx

    m = onnx.load_model_from_string(data)
    y = next(o for o in m.graph.output if o.name == "y")
    return [d.dim_value if d.HasField("dim_value") else None for d in y.type.tensor_type.shape.dim]


@pytest.mark.parametrize("make", [_flatten_by_shape, _reshape_to_sum, _reshape_to_constant_concat])
def test_graphs_that_compute_shape_values_keep_propagation_which_they_need(make):
    m = make()
    assert _needs(m)
    assert _y_shape(infer_here(m, True)) == [1, 144]
    assert _y_shape(infer_here(m, False)) != [1, 144]  # what turning it off would lose


def test_a_loaded_graph_that_computes_its_reshape_target_has_the_shape(tmp_path):
    g = load_graph(save(_flatten_by_shape(), tmp_path / "flat.onnx"))
    assert g.tensors["y"].shape == (1, 144)


@pytest.mark.parametrize("make", [
    lambda: branchy_concat_model(),
    lambda: detector_model(),
    lambda: synthetic_model(300),
    lambda: zoo_model("resnet18", size=32),
    lambda: zoo_model("yolov8n", size=64, nc=4),
], ids=["branchy", "detector", "synthetic", "resnet18", "yolov8n"])
def test_where_the_rule_turns_propagation_off_inference_gives_the_same_bytes(make):
    m = make()  # CNNs of fixed shapes: nothing in them computes a shape
    assert not _needs(m)
    assert infer_here(m, True) == infer_here(m, False)


def test_an_int_initializer_read_only_by_a_split_needs_no_propagation():
    split = numpy_helper.from_array(np.array([2, 2], np.int64), "split")
    m = _model([helper.make_node("Split", ["x", "split"], ["a", "b"], axis=1),
                helper.make_node("Concat", ["b", "a"], ["y"], axis=1)], [split])
    assert not _needs(m)  # Concat carries values, but it reads activations only
    assert infer_here(m, True) == infer_here(m, False)


def test_subgraphs_and_local_functions_keep_propagation_on():
    then = helper.make_graph([helper.make_node("Identity", ["x"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)])
    m = _model([helper.make_node("ReduceMax", ["x"], ["mx"], keepdims=0),
                helper.make_node("Greater", ["mx", "mx"], ["c"]),
                helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=then)])
    assert _needs(m)
    m = _model([helper.make_node("Relu", ["x"], ["y"])])
    assert not _needs(m)
    m.functions.append(helper.make_function("local", "F", ["a"], ["b"], [helper.make_node("Relu", ["a"], ["b"])],
                                            [helper.make_opsetid("", 17)]))
    assert _needs(m)
