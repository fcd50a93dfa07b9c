"""Add the min/max reductions of every observed tensor to the model, so onnxruntime computes them.

The augmented model outputs each observed tensor ``t`` (numpy builds its histogram) and two
extra vectors: ``ReduceMin(t)`` and ``ReduceMax(t)`` of every observed tensor, concatenated in
``names`` order, so a run hands back ``len(names) + 2`` arrays rather than three per tensor.

Two variants were measured and rejected on yolov8n (2 cores): an in-graph strided ``Slice`` for
the histogram subsample (a gather over every value, about 3 ms per sample more than fetching the
full tensors), and IOBinding into preallocated output buffers (no gain).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

__all__ = ["Plan", "augment"]

_PREFIX = "qtquant_calib"


@dataclass(frozen=True)
class Plan:
    """Fetch ``fetch``: the observed tensors in ``tensors`` order, then the mins and maxes vectors."""

    tensors: tuple[str, ...]
    fetch: tuple[str, ...]


def augment(model: onnx.ModelProto, names: list[str]) -> tuple[onnx.ModelProto, Plan]:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    have = {o.name for o in g.output}
    vi = {v.name: v for v in [*g.value_info, *g.input, *g.output]}
    if not names:
        return m, Plan((), ())
    one = f"{_PREFIX}/one"
    g.initializer.append(numpy_helper.from_array(np.array([1], np.int64), one))
    parts = {"min": [], "max": []}
    for i, name in enumerate(names):
        base = f"{_PREFIX}/{i}"
        elem = vi[name].type.tensor_type.elem_type if name in vi else onnx.TensorProto.FLOAT
        for kind, op in (("min", "ReduceMin"), ("max", "ReduceMax")):
            r = f"{base}/{kind}"
            g.node.append(helper.make_node(op, [name], [r], name=f"{base}/{op}", keepdims=0))
            if elem not in (onnx.TensorProto.FLOAT, 0):
                g.node.append(helper.make_node("Cast", [r], [r + "/f32"], name=f"{base}/{kind}/Cast",
                                               to=onnx.TensorProto.FLOAT))
                r += "/f32"
            g.node.append(helper.make_node("Reshape", [r, one], [r + "/1"], name=f"{base}/{kind}/Reshape"))
            parts[kind].append(r + "/1")
        if name not in have:
            g.output.append(helper.make_tensor_value_info(name, elem or onnx.TensorProto.FLOAT, None))
            have.add(name)
    vectors = []
    for kind, inputs in parts.items():
        out = f"{_PREFIX}/{kind}s"
        g.node.append(helper.make_node("Concat", inputs, [out], name=f"{_PREFIX}/Concat_{kind}", axis=0))
        g.output.append(helper.make_tensor_value_info(out, onnx.TensorProto.FLOAT, [len(names)]))
        vectors.append(out)
    return m, Plan(tuple(names), (*names, *vectors))
