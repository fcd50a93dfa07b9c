"""A node table read from the model's bytes (one merged parse) equals one read node by node, and
the checks that read it refuse what they refused before."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from builders import branchy_concat_model, detector_model
from qtquant.base.errors import ModelError, ShapeError
from qtquant.model.graph import Node, graph_from_model, load_graph
from qtquant.model.graphitems import NodeProtos
from qtquant.model.modelcheck import check_external_data, check_text
from qtquant.model.nodetable import NodeTable, int_attribute


def _unnamed_and_domains() -> onnx.ModelProto:
    """Nodes without a name, one with a domain, a Constant with a tensor and an If with subgraphs."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])
    branch = helper.make_graph([helper.make_node("Identity", ["x"], ["b"])], "branch", [],
                               [helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 2])])
    nodes = [helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.ones((1, 2), np.float32))),
             helper.make_node("Add", ["x", "c"], ["s"], name="add"),
             helper.make_node("Relu", ["s"], ["r"], domain="ai.onnx"),
             helper.make_node("Greater", ["r", "c"], ["g"], name="gt"),
             helper.make_node("ReduceMax", ["g"], ["cond"], name="any", keepdims=0),
             helper.make_node("If", ["cond"], ["y"], name="if", then_branch=branch, else_branch=branch)]
    return helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])


def _rows(t: NodeTable):
    attrs = None if t.attributes is None else [[a.name for a in c] for c in t.attributes]
    return t.names, t.ops, t.domains, t.inputs, t.outputs, sorted(t.attribute_names()), attrs


@pytest.mark.parametrize("model", [detector_model(), branchy_concat_model(chain=True), _unnamed_and_domains()],
                         ids=["detector", "branchy", "unnamed"])
def test_read_from_bytes_equals_node_by_node(model):
    data = model.SerializeToString()
    fast, slow = NodeTable(model.graph, data), NodeTable(model.graph)
    names, ops, domains, inputs, outputs, attr_names, attrs = _rows(slow)
    f_names, f_ops, f_domains, f_inputs, f_outputs, f_attr_names, f_attrs = _rows(fast)
    assert (f_names, f_ops, f_domains, f_inputs, f_outputs, f_attr_names) == (names, ops, domains, inputs, outputs,
                                                                               attr_names)
    holds = any(a.HasField("t") or a.HasField("g") for n in model.graph.node for a in n.attribute)
    # the containers are kept exactly when some attribute holds a tensor or a graph (to be walked)
    assert f_attrs == (attrs if holds else None)
    order = list(range(len(slow)))[::-1]
    assert _rows(fast.reordered(order))[:6] == _rows(slow.reordered(order))[:6]


def test_checks_read_from_bytes_refuse_as_before(tmp_path):
    m = _unnamed_and_domains()
    t = m.graph.node[0].attribute[0].t
    t.data_location = TensorProto.EXTERNAL
    t.external_data.add(key="location", value="../outside.bin")
    with pytest.raises(ModelError, match="outside the model folder"):
        check_external_data(m, tmp_path, NodeTable(m.graph, m.SerializeToString()))
    m = detector_model()
    m.graph.node[0].attribute[0].name = "k"
    data = m.SerializeToString().replace(b"\x0a\x01k", b"\x0a\x01\xff")  # the attribute's name, not UTF-8
    bad = onnx.ModelProto.FromString(data)
    with pytest.raises(ModelError, match="UTF-8"):
        check_text(bad, NodeTable(bad.graph, data))


def test_load_graph_reads_the_same_either_way(tmp_path, monkeypatch):
    from qtquant.model import nodetable

    path = tmp_path / "m.onnx"
    onnx.save(detector_model(), str(path))
    fast = load_graph(path)
    monkeypatch.setattr(nodetable, "_merged_nodes", lambda data, n: None)
    slow = load_graph(path)
    assert [(n.name, n.op_type, n.inputs, n.outputs, n.domain) for n in fast.nodes.values()] == \
        [(n.name, n.op_type, n.inputs, n.outputs, n.domain) for n in slow.nodes.values()]
    assert fast.quantized_tensors == slow.quantized_tensors


def test_int_attr_reads_what_attrs_gives():
    """A plain INT read without decoding the rest, the last of repeated names as the dict keeps it;
    any other kind of value (a float, a list, a reference) is handed to attrs."""
    node = helper.make_node("Concat", ["a", "b"], ["c"], axis=1, other=[1, 2])
    dup = helper.make_node("Concat", ["a", "b"], ["c"], axis=1)
    dup.attribute.append(helper.make_attribute("axis", 3))
    odd = helper.make_node("Concat", ["a", "b"], ["c"], axis=1.5)
    ref = helper.make_node("Concat", ["a", "b"], ["c"])
    ref.attribute.append(onnx.AttributeProto(name="axis", type=onnx.AttributeProto.INT, ref_attr_name="ax"))
    for proto, want in ((node, 1), (dup, 3), (odd, None), (ref, None), (helper.make_node("Relu", ["a"], ["b"]), 0)):
        assert int_attribute(proto.attribute, "axis", 0) == want
    protos = NodeProtos([node, dup, odd, helper.make_node("Relu", ["a"], ["b"])])
    for idx, proto in enumerate(protos.nodes):
        n = Node(f"n{idx}", proto.op_type, [], [], index=idx, src=protos)
        fresh = Node(f"n{idx}", proto.op_type, [], [], index=idx, src=protos)
        assert n.int_attr("axis", 0) == fresh.attrs.get("axis", 0)


def test_conv_group_checked_with_and_without_attribute_names():
    """The channel check knows a Conv's group from the attribute names when none is "group", and
    reads it when one is: a grouped Conv whose channels fit passes, one whose do not is refused."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    for group, w_in, ok in ((1, 4, True), (2, 2, True), (1, 2, False), (2, 4, False)):
        w = numpy_helper.from_array(np.ones((4, w_in, 1, 1), np.float32), "w")
        kw = {"group": group} if group != 1 else {}
        conv = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", **kw)
        m = helper.make_model(helper.make_graph([conv], "g", [x], [y], [w]),
                              opset_imports=[helper.make_opsetid("", 17)])
        for table in (NodeTable(m.graph, m.SerializeToString()), NodeTable(m.graph)):
            if ok:
                graph_from_model(onnx.ModelProto.FromString(m.SerializeToString()), table=table, ort_fallback=False)
            else:
                with pytest.raises(ShapeError, match="expects"):
                    graph_from_model(onnx.ModelProto.FromString(m.SerializeToString()), table=table,
                                     ort_fallback=False)
