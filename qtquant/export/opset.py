"""The float model raised to a newer opset for the export, with its wiring unchanged.

The export's rewrite places each Q/DQ pair by the graph's own producers and consumers, so a
converted model must keep every node, and who makes and reads every tensor, as the graph has them.
onnx's version converter mostly changes attributes and appends inputs (Squeeze's axes become an
input at opset 13), but some adapters rewire: Softmax 12 -> 13 keeps the node only where it sees
the axis is the input's last, and otherwise wraps it in Flatten/Reshape, renaming its output.
It sees ranks only in the model's value_info, which onnx's shape inference leaves empty where it
could not follow a computed shape (PP-OCRv4's recognizer: all three attention Softmaxes, though
onnxruntime knows their shapes).  The graph knows them (:func:`qtquant.model.graph._ort_fill_shapes`),
so they are written into a copy before converting, and the result is checked: a rewired model
is refused (:class:`Rewired`) rather than exported with Q/DQ pairs cut off from their tensors.
"""

from __future__ import annotations

import onnx

from ..base.errors import ModelError
from ..model.opsets import converted
from ..base.vocab import TensorKind

__all__ = ["convert_opset", "Rewired"]


class Rewired(ModelError):
    """The converter changed who makes or reads a tensor of the graph."""


def convert_opset(graph, target: int) -> onnx.ModelProto:
    """``graph.model`` converted to opset ``target`` (default domain), its IR version raised to
    match; :class:`Rewired` where the converter changed the wiring the export follows, other
    exceptions as the converter raises them."""
    model = converted(_with_known_shapes(graph), target)
    why = rewiring(graph, model)
    if why:
        raise Rewired(why)
    return model


def _with_known_shapes(graph) -> onnx.ModelProto:
    """``graph.model``, or a copy whose value_info gives the shapes the graph knows and shape
    inference left without a rank (what the converter's adapters read)."""
    model = graph.model
    vi = model.graph.value_info
    fill = {}
    for k, v in enumerate(vi):
        tt = v.type.tensor_type
        if tt.HasField("shape"):
            continue
        t = graph.tensors.get(v.name)
        if t is not None and t.shape and all(isinstance(d, int) and d >= 0 for d in t.shape):
            fill[k] = t.shape
    if not fill:
        return model
    model = onnx.ModelProto.FromString(model.SerializeToString())
    vi = model.graph.value_info
    for k, shape in fill.items():
        dims = vi[k].type.tensor_type.shape.dim
        for d in shape:
            dims.add().dim_value = d
    return model


def rewiring(graph, model: onnx.ModelProto) -> str:
    """What in ``model`` (``graph.model`` converted) the export could not follow, in words
    ("" if nothing): a tensor of the graph made by another node or output slot, or an activation
    read by a node that did not read it (or no longer read by one that did)."""
    made: dict[str, tuple[str, int]] = {}
    read: dict[str, set[str]] = {}
    for n in model.graph.node:
        for k, o in enumerate(n.output):
            if o:
                made[o] = (n.name, k)
        for i in n.input:
            if i:
                read.setdefault(i, set()).add(n.name)
    for name, node in graph.nodes.items():
        for k, o in enumerate(node.outputs):
            if o and made.get(o) != (name, k):
                return f"{o} is no longer made by {node.op_type} node {name}"
    for name, t in graph.tensors.items():
        if t.kind is TensorKind.ACTIVATION and read.get(name, set()) != set(t.consumers):
            now = sorted(read.get(name, set()) - set(t.consumers)) or sorted(set(t.consumers) - read.get(name, set()))
            return f"the readers of {name} changed ({', '.join(now[:3])})"
    return ""
