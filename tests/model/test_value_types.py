"""The graph's value types read in one parse of the inferred model equal those read value by value."""

import onnx
from onnx import TensorProto, helper

from builders import detector_model, save
from qtquant.model.graph import load_graph
from qtquant.model.nodetable import graph_value_types, value_type_bytes, value_type_keys, value_types


def _both(model: onnx.ModelProto):
    g = model.graph
    fast = value_type_bytes(model.SerializeToString(), len(g.value_info))
    return value_types(g), (value_types(g, fast) if fast is not None else None), fast


def test_fast_read_equals_value_by_value():
    m = onnx.shape_inference.infer_shapes(detector_model(), data_prop=True)
    assert len(m.graph.value_info) > 5
    slow, fast, raw = _both(m)
    assert raw is not None and fast == slow


def test_entries_the_fast_reading_cannot_line_up_fall_back():
    """A value without a type (fewer types than values) or with a name that is not UTF-8 must not
    shift or lose a type: the fast reading says it cannot stand in.  A doc string on a value or a
    repeated name (later entries win) are read as value by value."""
    vi = [helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 2]),
          helper.make_tensor_value_info("b", TensorProto.INT64, [3], doc_string="a note")]
    m = helper.make_model(helper.make_graph([], "g", [], [], value_info=vi))
    fast = value_type_bytes(m.SerializeToString(), 2)
    assert fast is not None and value_types(m.graph, fast) == value_types(m.graph)
    m.graph.value_info.append(helper.make_tensor_value_info("a", TensorProto.FLOAT16, [4]))
    fast = value_type_bytes(m.SerializeToString(), 3)
    slow = value_types(m.graph)
    assert slow["a"][:2] == (TensorProto.FLOAT16, (4,))  # later entries win
    assert fast is not None and value_types(m.graph, fast) == slow
    m.graph.value_info.append(onnx.ValueInfoProto(name="untyped"))
    assert value_type_bytes(m.SerializeToString(), 4) is None
    del m.graph.value_info[-1]
    m.graph.value_info[1].name = "bb"
    assert value_type_bytes(m.SerializeToString().replace(b"bb", b"\xff\xfe"), 3) is None
    assert value_type_bytes(b"\xff\xff not a model", 0) is None


def test_documented_values_keep_their_types(tmp_path):
    """A file whose value_info carries doc strings loads with the same types as without them."""
    m = detector_model()
    inferred = onnx.shape_inference.infer_shapes(m)
    plain = load_graph(save(inferred, tmp_path / "plain.onnx"))
    for v in inferred.graph.value_info:
        v.doc_string = f"type of {v.name}"
    documented = load_graph(save(inferred, tmp_path / "doc.onnx"))
    assert {n: (t.shape, t.elem_type, t.kind) for n, t in documented.tensors.items()} == \
        {n: (t.shape, t.elem_type, t.kind) for n, t in plain.tensors.items()}


def test_models_mostly_weights_read_values_one_by_one():
    """The one parse copies the bytes it skips: for a model of few values and many weight bytes
    reading the values one by one is cheaper, and gives the same types."""
    vi = [helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 2])]
    w = helper.make_tensor("w", TensorProto.FLOAT, [4096], [0.5] * 4096)
    m = helper.make_model(helper.make_graph([], "g", [], [], initializer=[w], value_info=vi))
    assert value_type_bytes(m.SerializeToString(), 1) is None
    m.graph.ClearField("initializer")
    assert value_type_bytes(m.SerializeToString(), 1) == {"a": vi[0].type.SerializeToString()}


def test_graph_types_read_from_bytes_equal_the_parsed_graphs():
    """All the graph's types (value_info, then outputs, then inputs: later entries win) read from
    the bytes equal those of the parsed model, so the inferred model need not be parsed."""
    m = onnx.shape_inference.infer_shapes(detector_model(), data_prop=True)
    m.graph.value_info.append(helper.make_tensor_value_info(m.graph.output[0].name, TensorProto.FLOAT16, [9]))
    data = m.SerializeToString()
    fast = graph_value_types(data, len(m.graph.node))
    assert fast is not None
    keys, decoded = value_type_keys(m.graph, fast, ends=False)
    assert dict(zip(keys, map(decoded.__getitem__, keys.values()))) == value_types(m.graph)
    assert value_types(m.graph)[m.graph.output[0].name][0] == TensorProto.FLOAT  # the output's own type won


def test_graph_types_from_bytes_refuse_what_they_cannot_line_up():
    m = onnx.shape_inference.infer_shapes(detector_model())
    n = len(m.graph.node)
    m.graph.output.append(onnx.ValueInfoProto(name="untyped_output"))  # a name without a type
    assert graph_value_types(m.SerializeToString(), n) is None
    del m.graph.output[-1]
    m.graph.input.append(onnx.ValueInfoProto(type=m.graph.input[0].type))  # a type without a name
    assert graph_value_types(m.SerializeToString(), n) is None
    assert graph_value_types(b"\xff\xff not a model", n) is None
    assert graph_value_types(m.SerializeToString(), 0) is None


def test_the_kept_model_is_parsed_on_first_use(tmp_path):
    """A loaded graph keeps the inferred model as bytes until it is asked for; then it is the
    model shape inference gives, its nodes are the ones the graph reads attributes from, and two
    threads asking at once get one model."""
    import threading

    path = save(detector_model(), tmp_path / "d.onnx")
    g = load_graph(path)
    assert g._pending is not None  # typed without parsing the inferred model
    concat = next(n for n in g.nodes.values() if n.op_type == "Concat")
    axis = concat.attrs["axis"]
    got = []
    threads = [threading.Thread(target=lambda: got.append(g.model)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(m) for m in got}) == 1 and g._pending is None
    want = onnx.shape_inference.infer_shapes(onnx.load(path), data_prop=True)
    assert {v.name: v.type for v in g.model.graph.value_info} == {v.name: v.type for v in want.graph.value_info}
    assert g.node_protos is g.model.graph.node
    assert g.node_protos[concat.index].name == concat.name and concat.attrs["axis"] == axis
    assert g.model_bytes() == g.model.SerializeToString()


def test_unnamed_nodes_are_named_in_the_kept_model(tmp_path):
    """A file's unnamed node gets its graph name in the kept model too (parsed at once for it)."""
    m = detector_model()
    m.graph.node[0].name = ""
    g = load_graph(save(m, tmp_path / "u.onnx"))
    first = next(iter(g.nodes.values()))
    assert first.name and g.model.graph.node[0].name == first.name
