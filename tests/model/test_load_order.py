"""Files whose nodes are out of topological order: the graph is built in a sorted order, and what
is wrong with a graph no sort mends (a value made twice, read but never made, a cycle) is named.

Most files are in order, so the loader finds out while building the graph instead of sorting
first; these tests pin that both routes give the same graph and the same one-line errors."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from builders import branchy_concat_model, save
from qtquant.base.errors import ModelError
from qtquant.model.graph import load_graph


def _reversed(model):
    nodes = list(model.graph.node)
    del model.graph.node[:]
    model.graph.node.extend(reversed(nodes))
    return model


def _summary(g):
    return ([(n.name, n.op_type, n.inputs, n.outputs) for n in g.nodes.values()],
            {t: (x.shape, x.elem_type, x.kind, x.producer, x.consumers) for t, x in g.tensors.items()},
            g.quantized_tensors, g.observed_tensors)


def test_an_out_of_order_file_builds_the_graph_of_its_sorted_order(tmp_path):
    ordered = load_graph(save(branchy_concat_model(), tmp_path / "ordered.onnx"))
    backwards = load_graph(save(_reversed(branchy_concat_model()), tmp_path / "backwards.onnx"))
    assert len(backwards.nodes) == len(ordered.nodes) > 3
    # every node after the ones it reads, and every value typed as in the ordered file
    made = set(backwards.inputs) | {t for t, x in backwards.tensors.items() if x.producer is None}
    for n in backwards.nodes.values():
        assert set(i for i in n.inputs if i) <= made, n.name
        made.update(n.outputs)
    a, b = _summary(ordered), _summary(backwards)
    assert sorted(a[0]) == sorted(b[0])
    assert {t: v[:3] for t, v in a[1].items()} == {t: v[:3] for t, v in b[1].items()}
    assert sorted(a[2]) == sorted(b[2]) and sorted(a[3]) == sorted(b[3])
    assert [n.index for n in backwards.nodes.values()] == list(range(len(backwards.nodes)))


def _two_relus(second_output, inits=()):
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="r1"),
             helper.make_node("Relu", ["a"], [second_output], name="r2"),
             helper.make_node("Add", ["a", "x"], ["y"], name="add")]
    gr = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                           [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], initializer=list(inits))
    return helper.make_model(gr, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("backwards", [False, True])
def test_a_value_made_twice_is_named(tmp_path, backwards):
    m = _two_relus("a")  # r2 makes "a" again
    if backwards:
        _reversed(m)
    with pytest.raises(ModelError, match="'a' is produced twice"):
        load_graph(save(m, tmp_path / "twice.onnx"))


def test_a_node_that_makes_an_initializer_again_is_named(tmp_path):
    w = numpy_helper.from_array(np.ones((1, 4), np.float32), "w")
    with pytest.raises(ModelError, match="'w' is produced twice"):
        load_graph(save(_two_relus("w", [w]), tmp_path / "init.onnx"))


@pytest.mark.parametrize("backwards", [False, True])
def test_a_value_nothing_makes_is_named(tmp_path, backwards):
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="r1"),
             helper.make_node("Add", ["a", "ghost"], ["y"], name="add")]
    gr = helper.make_graph(nodes if not backwards else nodes[::-1], "g",
                           [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                           [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    m = helper.make_model(gr, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ModelError, match="'ghost', which nothing produces"):
        load_graph(save(m, tmp_path / "ghost.onnx"))


def test_a_file_that_leaves_an_optional_output_out_still_loads(tmp_path):
    # an optional output left out ("", Dropout's mask): legal ONNX; such files are sorted first
    nodes = [helper.make_node("Dropout", ["x"], ["d", ""], name="drop"),
             helper.make_node("Relu", ["d"], ["y"], name="r")]
    gr = helper.make_graph(nodes[::-1], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                           [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    g = load_graph(save(helper.make_model(gr, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "opt.onnx"))
    assert [n.name for n in g.nodes.values()] == ["drop", "r"]
    assert g.tensors["y"].shape == (1, 4)


def test_only_a_file_out_of_order_is_sorted(tmp_path, monkeypatch):
    import qtquant.model.graph as graph_module

    calls = []
    real = graph_module.topo_order
    monkeypatch.setattr(graph_module, "topo_order", lambda *a: calls.append(1) or real(*a))
    load_graph(save(branchy_concat_model(), tmp_path / "ordered.onnx"))
    assert calls == []  # the build found it in order
    load_graph(save(_reversed(branchy_concat_model()), tmp_path / "backwards.onnx"))
    assert calls
