"""Add the reductions of every observed tensor to the model, so onnxruntime does the cheap part.

For each observed tensor ``t`` the augmented model also outputs ``ReduceMin(t)``, ``ReduceMax(t)``
and ``Size(t)``, computed by onnxruntime's kernels; ``t`` itself is fetched for the histogram
(which numpy builds, subsampling it when asked).  An in-graph ``Slice`` for the subsample was
tried and cost more than it saved: a strided gather over every value.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx
from onnx import helper

__all__ = ["Plan", "augment", "PER_TENSOR"]

_PREFIX = "qtquant_calib"
PER_TENSOR = 4


@dataclass(frozen=True)
class Plan:
    """Output names to fetch, per tensor: (values, min, max, size)."""

    tensors: tuple[str, ...]
    fetch: tuple[str, ...]  # flat list of outputs, PER_TENSOR per tensor, in ``tensors`` order


def augment(model: onnx.ModelProto, names: list[str]) -> tuple[onnx.ModelProto, Plan]:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    have = {o.name for o in g.output}
    vi = {v.name: v for v in [*g.value_info, *g.input, *g.output]}
    fetch = []
    for i, name in enumerate(names):
        base = f"{_PREFIX}/{i}"
        outs = [f"{base}/min", f"{base}/max", f"{base}/size"]
        # No ReduceSum for NaN: it costs a pass; NaN shows up when numpy casts the histogram indices.
        g.node.extend([helper.make_node("ReduceMin", [name], [outs[0]], name=f"{base}/ReduceMin", keepdims=0),
                       helper.make_node("ReduceMax", [name], [outs[1]], name=f"{base}/ReduceMax", keepdims=0),
                       helper.make_node("Size", [name], [outs[2]], name=f"{base}/Size")])
        values = name
        elem = vi[name].type.tensor_type.elem_type if name in vi else onnx.TensorProto.FLOAT
        for o in (values, *outs[:2]):
            if o not in have:
                g.output.append(helper.make_tensor_value_info(o, elem, None))
                have.add(o)
        g.output.append(helper.make_tensor_value_info(outs[2], onnx.TensorProto.INT64, None))
        have.add(outs[2])
        fetch += [values, *outs]
    return m, Plan(tuple(names), tuple(fetch))
