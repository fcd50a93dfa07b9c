"""The graph's value types read in one parse of the inferred model equal those read value by value."""

import onnx
from onnx import TensorProto, helper

from builders import detector_model, save
from qtquant.graph import load_graph
from qtquant.nodetable import value_type_bytes, value_types


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
