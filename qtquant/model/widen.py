"""A float16 model read as float32: what qtquant analyzes, checks and exports.

Web and mobile exports often compute in float16 (``model.half()``, onnxconverter-common's
``convert_float_to_float16``): float16 weights and Constants, and Casts to float16 behind float32
inputs.  An int8 compiler quantizes such a file as it does a float32 one, and the Q/DQ form
compilers take is float32 around int8 (QuantizeLinear reads float16 only from opset 19).  Left as
it was, the analysis counted its float16 values as int8 while the export could quantize only its
float32 ones (ISNet from @imgly/background-removal-data: 40 of 259 activations, no weight), so
the fidelity check measured a mostly float16 model.

So a file with float16 in it is widened on open, as an old opset is raised: every float16 weight,
Constant, declared type and Cast target becomes float32 (float16 values widen exactly).

A Cast to the type its input has already is an identity, and compilers drop it; qtquant's op
table files Cast with the shape math (it never carries a scale), so one between floats cut the
quantized chain: its output got no observer and the next layer's input no Q/DQ (silero-vad's
models cast float32 to float32 three times; a widened float16 file, at each of its Casts).  Once
the graph is typed such Casts become Identity nodes (:func:`same_type_casts`, :func:`as_identities`),
which pass their input's scale on and which fused chains run through (:func:`~qtquant.model.ops.identity_next`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator
from itertools import chain
from typing import TYPE_CHECKING

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from ..base.errors import ModelError, first_line
from .nodetable import all_graphs
from .ops import SUBGRAPH_OPS

if TYPE_CHECKING:
    from .graphitems import Node
    from .graphmodel import Graph

__all__ = ["has_float16", "widen_float16", "same_type_casts", "as_identities"]

_F16, _F32 = TensorProto.FLOAT16, TensorProto.FLOAT
_TYPE_ATTRS = frozenset({"to", "dtype"})  # Cast's target; RandomNormal's, EyeLike's ... output type


def _values(graph: onnx.GraphProto) -> Iterator[onnx.ValueInfoProto]:
    return chain(graph.input, graph.output, graph.value_info)


# The ops whose attributes can hold a float16 type or value
_TYPED_OPS = frozenset({"Cast", "Constant", "ConstantOfShape", "EyeLike", "RandomNormal", "RandomUniform",
                        "RandomNormalLike", "RandomUniformLike", "Bernoulli", "Multinomial"})


def has_float16(model: onnx.ModelProto, ops: Collection[str]) -> bool:
    """Whether anything in ``model`` is float16: a weight, a graph input or output, a Constant, a Cast
    target.  ``ops``: the op types of its main graph (:class:`~qtquant.model.nodetable.NodeTable` ``.ops``):
    only nodes of the types that can say float16 are read, so a big float32 graph is not walked
    node by node (a file that declares float16 values has float16 weights, inputs or Casts too)."""
    g = model.graph
    if _F16 in {t.data_type for t in g.initializer}:
        return True
    if any(v.type.tensor_type.elem_type == _F16 for v in chain(g.input, g.output)):
        return True
    present = set(ops)
    if present & SUBGRAPH_OPS:
        return any(_says_float16(n) for sub in all_graphs(g) for n in sub.node) \
            or any(t.data_type == _F16 for sub in all_graphs(g) for t in sub.initializer)
    return any(_says_float16(n) for n in g.node if n.op_type in _TYPED_OPS) if present & _TYPED_OPS else False


def _says_float16(node: onnx.NodeProto) -> bool:
    return any((a.type == onnx.AttributeProto.INT and a.name in _TYPE_ATTRS and a.i == _F16)
               or (a.type == onnx.AttributeProto.TENSOR and a.t.data_type == _F16) for a in node.attribute)


def _widened(t: TensorProto, base_dir: str) -> TensorProto:
    try:
        arr = numpy_helper.to_array(t, base_dir=base_dir)
    except Exception as e:  # a missing or short external data file
        raise ModelError(f"cannot read float16 weight {t.name!r} to widen it: {first_line(e, 160)}") from None
    out = numpy_helper.from_array(arr.astype(np.float32), t.name)
    if t.doc_string:
        out.doc_string = t.doc_string
    return out


def widen_float16(model: onnx.ModelProto, base_dir: str = "") -> onnx.ModelProto:
    """``model`` with its float16 widened to float32 (changed in place and returned); see the module.
    ``base_dir``: where the file's external data lies (a float16 weight stored outside is read)."""
    for g in all_graphs(model.graph):
        for k, t in enumerate(g.initializer):
            if t.data_type == _F16:
                g.initializer[k].CopyFrom(_widened(t, base_dir))
        for v in _values(g):
            if v.type.HasField("tensor_type") and v.type.tensor_type.elem_type == _F16:
                v.type.tensor_type.elem_type = _F32
        for node in g.node:
            _widen_node(node, base_dir)
    return model


def _widen_node(node: onnx.NodeProto, base_dir: str) -> None:
    """Float16 targets and values of ``node``'s attributes made float32."""
    for a in node.attribute:
        if a.type == onnx.AttributeProto.INT and a.name in _TYPE_ATTRS and a.i == _F16:
            a.i = _F32
        elif a.type == onnx.AttributeProto.TENSOR and a.t.data_type == _F16:
            a.t.CopyFrom(_widened(a.t, base_dir))
        elif a.type == onnx.AttributeProto.TENSORS:
            for k, t in enumerate(a.tensors):
                if t.data_type == _F16:
                    a.tensors[k].CopyFrom(_widened(t, base_dir))


def same_type_casts(graph: Graph) -> list[Node]:
    """The Cast and CastLike nodes of a typed graph that cast a float to the type it has already."""
    out: list[Node] = []
    tensors = graph.tensors
    for node in graph.nodes_of(("Cast", "CastLike")):
        src = tensors.get(node.inputs[0]) if node.inputs and node.inputs[0] else None
        if src is None or not src.is_float:
            continue
        if node.op_type == "Cast":
            to = node.int_attr("to", 0)
        else:
            like = tensors.get(node.inputs[1]) if len(node.inputs) > 1 else None
            to = like.elem_type if like is not None else 0
        if to == src.elem_type:
            out.append(node)
    return out


def as_identities(model: onnx.ModelProto, indices: Iterable[int]) -> None:
    """The nodes of ``model`` at ``indices`` (positions in ``model.graph.node``) made Identity nodes
    of their first input, keeping their names and outputs."""
    nodes = model.graph.node
    for i in indices:
        node = nodes[i]
        node.op_type = "Identity"
        del node.input[1:]
        del node.attribute[:]
