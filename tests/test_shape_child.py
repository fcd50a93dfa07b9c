"""Shape inference in a child process: the same shapes, the same one-line errors."""

import onnx
import pytest

from builders import detector_model, save
from qtquant import shape_child
from qtquant.errors import ShapeError
from qtquant.graph import load_graph


@pytest.fixture
def in_child(monkeypatch):
    monkeypatch.setattr(shape_child, "MIN_NODES", 0)


def test_child_infers_the_same_shapes(tmp_path, monkeypatch):
    path = save(detector_model(), tmp_path / "det.onnx")
    here = load_graph(path)
    monkeypatch.setattr(shape_child, "MIN_NODES", 0)
    calls = []
    real = shape_child.infer_in_child
    monkeypatch.setattr(shape_child, "infer_in_child", lambda m: calls.append(1) or real(m))
    there = load_graph(path)
    assert calls
    assert {n: t.shape for n, t in there.tensors.items()} == {n: t.shape for n, t in here.tensors.items()}
    assert {n: t.elem_type for n, t in there.tensors.items()} == {n: t.elem_type for n, t in here.tensors.items()}


def test_child_errors_are_one_line(tmp_path, in_child):
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("Add", ["a", "b"], ["c"])], "g",
                          [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 3]),
                           helper.make_tensor_value_info("b", TensorProto.FLOAT, [4, 5])],
                          [helper.make_tensor_value_info("c", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ShapeError) as e:
        shape_child.infer_in_child(m)
    assert "\n" not in str(e.value) and "shapes do not fit" in str(e.value)


def test_big_files_stay_in_process(monkeypatch):
    m = onnx.ModelProto()
    m.graph.node.add(op_type="Relu")
    monkeypatch.setattr(shape_child, "MIN_NODES", 0)
    assert shape_child.wanted(m)
    monkeypatch.setattr(shape_child, "MAX_BYTES", 1)
    assert not shape_child.wanted(m)
    monkeypatch.setattr(shape_child, "MIN_NODES", None)
    monkeypatch.setattr(shape_child, "MAX_BYTES", 1 << 30)
    assert not shape_child.wanted(m)


def test_the_child_is_kept_between_opens_and_replaced_when_it_died(tmp_path, in_child):
    """Starting a child costs more than a second; inferring a big graph's shapes some ms: one is
    kept (the app starts it early with warm()), and one that died is replaced at the next open."""
    path = save(detector_model(), tmp_path / "det.onnx")
    shape_child.close()
    try:
        shape_child.warm()  # returns at once: the child boots on its own
        first = shape_child._child.process
        assert first is not None and first.is_alive()
        a = load_graph(path)
        assert shape_child._child.process is first and first.is_alive()  # the warm child served it
        b = load_graph(path)
        assert shape_child._child.process is first
        assert {n: t.shape for n, t in a.tensors.items()} == {n: t.shape for n, t in b.tensors.items()}
        first.kill()
        first.join(5)
        c = load_graph(path)  # a new child, the same shapes
        assert shape_child._child.process is not first and shape_child._child.process.is_alive()
        assert {n: t.shape for n, t in c.tensors.items()} == {n: t.shape for n, t in a.tensors.items()}
    finally:
        shape_child.close()
    assert shape_child._child.process is None
