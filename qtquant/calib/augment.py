"""Add the reductions of every observed tensor to the model, so onnxruntime does the cheap part.

For each observed tensor ``t`` the augmented model also outputs ``ReduceMin(t)``, ``ReduceMax(t)``
and ``Size(t)``, computed by onnxruntime's kernels, plus the values the histogram is built from:
``t`` itself, or with
``stride > 1`` every ``stride``-th value of ``t`` (``Slice`` of the flattened tensor), which cuts
both the copy out of onnxruntime and the histogram work by that factor.  Min and max always
cover every value, so ranges stay exact; only the histogram is subsampled.  The subsample of a
sample does not depend on how samples are batched or split over processes, so the merge law holds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

__all__ = ["Plan", "augment", "PER_TENSOR"]

_PREFIX = "qtquant_calib"
PER_TENSOR = 4


@dataclass(frozen=True)
class Plan:
    """Output names to fetch, per tensor: (values, min, max, size)."""

    tensors: tuple[str, ...]
    fetch: tuple[str, ...]  # flat list of outputs, PER_TENSOR per tensor, in ``tensors`` order
    stride: int


def augment(model: onnx.ModelProto, names: list[str], stride: int = 1) -> tuple[onnx.ModelProto, Plan]:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    have = {o.name for o in g.output}
    vi = {v.name: v for v in [*g.value_info, *g.input, *g.output]}
    shape_name = f"{_PREFIX}/flat"
    if stride > 1:
        g.initializer.extend([numpy_helper.from_array(np.array([-1], np.int64), shape_name),
                              numpy_helper.from_array(np.array([0], np.int64), f"{_PREFIX}/start"),
                              numpy_helper.from_array(np.array([np.iinfo(np.int64).max], np.int64),
                                                      f"{_PREFIX}/end"),
                              numpy_helper.from_array(np.array([0], np.int64), f"{_PREFIX}/axis"),
                              numpy_helper.from_array(np.array([stride], np.int64), f"{_PREFIX}/step")])
    fetch = []
    for i, name in enumerate(names):
        base = f"{_PREFIX}/{i}"
        outs = [f"{base}/min", f"{base}/max", f"{base}/size"]
        # No ReduceSum for NaN: it costs a pass; NaN shows up when numpy casts the histogram indices.
        g.node.extend([helper.make_node("ReduceMin", [name], [outs[0]], name=f"{base}/ReduceMin", keepdims=0),
                       helper.make_node("ReduceMax", [name], [outs[1]], name=f"{base}/ReduceMax", keepdims=0),
                       helper.make_node("Size", [name], [outs[2]], name=f"{base}/Size")])
        if stride > 1:
            values = f"{base}/sub"
            g.node.extend([helper.make_node("Reshape", [name, shape_name], [f"{base}/flat"], name=f"{base}/Reshape"),
                           helper.make_node("Slice", [f"{base}/flat", f"{_PREFIX}/start", f"{_PREFIX}/end",
                                                      f"{_PREFIX}/axis", f"{_PREFIX}/step"], [values],
                                            name=f"{base}/Slice")])
        else:
            values = name
        elem = vi[name].type.tensor_type.elem_type if name in vi else onnx.TensorProto.FLOAT
        for o in (values, *outs[:2]):
            if o not in have:
                g.output.append(helper.make_tensor_value_info(o, elem, None))
                have.add(o)
        g.output.append(helper.make_tensor_value_info(outs[2], onnx.TensorProto.INT64, None))
        have.add(outs[2])
        fetch += [values, *outs]
    return m, Plan(tuple(names), tuple(fetch), stride)
