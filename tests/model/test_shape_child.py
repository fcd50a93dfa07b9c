"""Shape inference in a child process: the same shapes, the same one-line errors."""

import os
import signal

import onnx
import pytest

from builders import detector_model, save
from qtquant.model import shape_child
from qtquant.base.errors import ShapeError
from qtquant.model.graph import load_graph


@pytest.fixture
def in_child(monkeypatch):
    monkeypatch.setattr(shape_child, "MIN_NODES", 0)


def test_child_infers_the_same_shapes(tmp_path, monkeypatch):
    path = save(detector_model(), tmp_path / "det.onnx")
    here = load_graph(path)
    monkeypatch.setattr(shape_child, "MIN_NODES", 0)
    calls = []
    real, early = shape_child.infer_in_child, shape_child.Early.result
    monkeypatch.setattr(shape_child, "infer_in_child", lambda m: calls.append(1) or real(m))
    monkeypatch.setattr(shape_child.Early, "result", lambda e: calls.append(2) or early(e))
    there = load_graph(path)
    assert calls  # the file's early inference (a child that runs already) or the parsed model's
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


def _signature(g):
    return ({n: (t.shape, t.elem_type, t.kind, t.producer, list(t.consumers)) for n, t in g.tensors.items()},
            [(n.name, n.op_type, n.inputs, n.outputs, n.index) for n in g.order], g.quantized_tensors,
            {n.name: n.attrs for n in g.order})


@pytest.fixture
def early_child(monkeypatch):
    """The app's set-up: a child that runs before the open, for graphs of any size here.  The
    opens are counted by how their types came: the file's bytes inferred early, dropped, or the
    parsed model sent after."""
    monkeypatch.setattr(shape_child, "MIN_NODES", 0)
    seen = []
    result, discard, real = shape_child.Early.result, shape_child.Early.discard, shape_child.infer_in_child
    monkeypatch.setattr(shape_child.Early, "result", lambda e: seen.append("early") or result(e))
    monkeypatch.setattr(shape_child.Early, "discard",
                        lambda e: (seen.append("dropped") if e.open else None) or discard(e))
    monkeypatch.setattr(shape_child, "infer_in_child", lambda m: seen.append("sent") or real(m))
    shape_child.warm()
    shape_child._child.call(b"")  # booted: an early request goes only to a child that runs
    seen.clear()
    yield seen
    shape_child.close()


def _in_process(monkeypatch, path, **kw):
    monkeypatch.setattr(shape_child, "MIN_NODES", None)
    try:
        return load_graph(path, **kw)
    finally:
        monkeypatch.setattr(shape_child, "MIN_NODES", 0)


def test_the_file_is_inferred_in_the_child_while_the_graph_is_read(tmp_path, early_child, monkeypatch):
    """The file's own bytes go to the child before its table is read; the graph is the one an
    in-process open makes, item for item (names, types, kinds, edges, attributes)."""
    path = save(detector_model(), tmp_path / "det.onnx")
    here = _in_process(monkeypatch, path)
    there = load_graph(path)
    assert early_child == ["early"]
    assert _signature(there) == _signature(here)
    assert there.model.graph.value_info  # the model it keeps is the inferred one
    assert [c.node for c in _concats(there)] == [c.node for c in _concats(here)]


def _concats(g):
    from qtquant.quant.concat import analyze_concats
    from qtquant.quant.domains import build_domains

    return analyze_concats(g, build_domains(g, {t: (-1.0, 2.0) for t in g.observed_tensors}))


def test_an_early_inference_of_a_changed_model_is_dropped(tmp_path, early_child, monkeypatch):
    """Input shapes that change the declared ones (a dynamic batch set to 1, a given shape) make
    another model than the file: its types come from that model, and the child is free after."""
    path = save(detector_model(shape=("N", 3, 16, 16)), tmp_path / "dyn.onnx")
    here = _in_process(monkeypatch, path)
    there = load_graph(path)
    assert early_child == ["dropped", "sent"]
    assert _signature(there) == _signature(here)
    assert there.tensors[there.inputs[0]].shape == (1, 3, 16, 16)
    early_child.clear()
    given = load_graph(path, [f"{here.inputs[0]}=1x3x16x16"])
    assert early_child == ["dropped", "sent"]
    assert _signature(given) == _signature(here)
    fixed = save(detector_model(), tmp_path / "fixed.onnx")
    early_child.clear()
    load_graph(fixed)
    assert early_child == ["early"]


def test_an_early_inference_that_fails_or_goes_unread_frees_the_child(tmp_path, early_child, monkeypatch):
    """A shape error comes back as the one line an in-process open gives; a file out of
    topological order is sorted and typed again (its early inference dropped); a QDQ file
    refused.  After each, the next open gets the child."""
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("Add", ["a", "b"], ["c"], name="add")], "g",
                          [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 3]),
                           helper.make_tensor_value_info("b", TensorProto.FLOAT, [4, 5])],
                          [helper.make_tensor_value_info("c", TensorProto.FLOAT, None)])
    bad = save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "bad.onnx")
    with pytest.raises(ShapeError) as e:
        load_graph(bad)
    assert "\n" not in str(e.value) and "shapes do not fit" in str(e.value)
    assert early_child == ["early"]

    m = detector_model()
    nodes = list(m.graph.node)
    del m.graph.node[:]
    m.graph.node.extend(reversed(nodes))
    shuffled = save(m, tmp_path / "shuffled.onnx")
    early_child.clear()
    there = load_graph(shuffled)
    assert early_child[0] == "dropped"
    assert _signature(there) == _signature(_in_process(monkeypatch, shuffled))

    fine = save(detector_model(), tmp_path / "fine.onnx")
    early_child.clear()
    load_graph(fine)
    assert early_child == ["early"]


def test_the_inferred_bytes_are_kept_as_the_model_children_are_sent(tmp_path, early_child, monkeypatch):
    """Shape inference hands back the model serialized: kept as what calibration and the fidelity
    check send their children, unless the graph named nodes the file left unnamed (then the bytes
    are made again, with the names)."""
    path = save(detector_model(), tmp_path / "det.onnx")
    for g in (load_graph(path), _in_process(monkeypatch, path)):
        assert g._model_bytes is not None  # kept at load: nothing to encode
        assert onnx.ModelProto.FromString(g.model_bytes()) == g.model
    m = detector_model()
    for n in m.graph.node[:3]:
        n.name = ""
    unnamed = save(m, tmp_path / "unnamed.onnx")
    g = load_graph(unnamed)
    assert g._model_bytes is None
    again = onnx.ModelProto.FromString(g.model_bytes())
    assert [n.name for n in again.graph.node] == [n.name for n in g.order] and all(n.name for n in g.order)


def test_a_child_that_dies_during_an_early_inference_is_one_line_and_replaced(tmp_path, early_child, monkeypatch):
    """The child killed while it infers the file: the open fails with the one line that names
    the exit, and the next open starts a new child and gets its graph."""
    from qtquant.base.errors import ModelError

    path = save(detector_model(), tmp_path / "det.onnx")
    real = shape_child.submit_file

    def submit_then_kill(model, data):
        assert len(data) < 48 << 10  # the file fits in the pipe's buffer: sent to a stopped child
        proc = shape_child._child.process
        os.kill(proc.pid, signal.SIGSTOP)  # stopped first: it cannot answer before it is killed
        early = real(model, data)
        assert early is not None
        proc.kill()
        return early

    monkeypatch.setattr(shape_child, "submit_file", submit_then_kill)
    with pytest.raises(ModelError) as e:
        load_graph(path)
    assert "\n" not in str(e.value) and "stopped unexpectedly" in str(e.value)
    monkeypatch.setattr(shape_child, "submit_file", real)
    early_child.clear()
    g = load_graph(path)  # no child runs: the parsed model is sent to a new one
    assert early_child == ["sent"] and shape_child._child.alive
    assert _signature(g) == _signature(_in_process(monkeypatch, path))


@pytest.mark.parametrize("child", [False, True])
def test_dimensions_declared_as_minus_one_are_unknown(tmp_path, monkeypatch, child):
    # paddle2onnx writes a dynamic dimension as -1 (PP-OCRv3 from rapidocr-openvino 1.2.3): onnx's
    # inference took it for a size and refused the model at any input shape, "Inferred shape and
    # existing shape differ in dimension 0: (1) vs (-1)".
    from qtquant.cli import main

    def minus_one(v):
        v.type.tensor_type.shape.dim[0].Clear()
        v.type.tensor_type.shape.dim[0].dim_value = -1

    m = detector_model()
    inferred = onnx.shape_inference.infer_shapes(m)
    m.graph.value_info.extend(inferred.graph.value_info)
    for v in [*m.graph.input, *m.graph.output, *m.graph.value_info]:
        if v.type.tensor_type.shape.dim:
            minus_one(v)
    path = save(m, tmp_path / "paddle.onnx")
    if child:
        monkeypatch.setattr(shape_child, "MIN_NODES", 0)
    shape = [d.dim_value for d in detector_model().graph.input[0].type.tensor_type.shape.dim]
    g = load_graph(path, {"x": tuple(shape)})
    assert all(d is None or d > 0 for t in g.tensors.values() if t.shape for d in t.shape)
    assert g.tensors[m.graph.output[0].name].shape[0] == 1
    assert main(["analyze", path, "--calib-count", "2", "--no-perf"]) == 0  # the batch dim: 1, as for any other
