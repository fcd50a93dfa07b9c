"""A model's default-domain opset, and onnx's version converter as qtquant uses it: raising a file
older than the opsets it reads on open (:func:`raise_old_opset`), and the export's raise for
per-channel weights or int16 (:mod:`qtquant.export.opset`), one conversion for both."""

from __future__ import annotations

from itertools import chain

import onnx
from onnx import helper

from ..base.errors import ModelError, first_line

__all__ = ["MIN_OPSET", "MAX_OPSET", "OLDEST_OPSET", "RAISED_OPSET", "default_opset", "converted", "raise_old_opset"]

MIN_OPSET = 11
MAX_OPSET = 23
# Older models (ONNX's model zoo classics, opset 6-10: what Horizon's older toolchains take) are
# raised to RAISED_OPSET on open by onnx's version converter, which covers these opsets well (opset
# 6: onnx's own 112 opset-6 test models with their data, all but PRelu's per-channel slopes, which
# _channel_slopes mends).
OLDEST_OPSET = 6
RAISED_OPSET = 13


def default_opset(model: onnx.ModelProto) -> int:
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return int(o.version)
    return 0


def converted(model: onnx.ModelProto, target: int) -> onnx.ModelProto:
    """``model`` converted to opset ``target`` by onnx's converter, its IR version raised to match
    (the converter keeps it; opset 13 belongs to IR 7, opset 21 to IR 10)."""
    from onnx import version_converter

    out = version_converter.convert_version(model, target)
    out.ir_version = max(out.ir_version, helper.find_min_ir_version_for(list(out.opset_import), ignore_unknown=True))
    return out


def raise_old_opset(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` (opset OLDEST_OPSET to MIN_OPSET - 1) converted to RAISED_OPSET; checked first, as the
    converter's C++ takes a malformed graph less well than the checker does."""
    opset = default_opset(model)
    try:
        onnx.checker.check_model(_checkable(model))
        if opset < 7:
            model = _channel_slopes(model)
        return converted(model, RAISED_OPSET)
    except Exception as e:
        raise ModelError(f"opset {opset} could not be raised to {RAISED_OPSET} ({first_line(e, 200)}); qtquant reads "
                         f"opsets {MIN_OPSET} to {MAX_OPSET}: convert the model with another tool") from None


def _channel_slopes(model: onnx.ModelProto) -> onnx.ModelProto:
    """Opset 6's PRelu takes a slope of C values along axis 1 (the channels); from opset 7 a slope
    broadcasts numpy-wise, from the last axis, and onnx's converter leaves it as it was: onnxruntime
    then refuses the file, or worse, broadcasts it along another axis of the same size.  A (C,)
    slope initializer of a PRelu whose input has rank r > 2 becomes (C, 1, ..., 1), the same values."""
    prelus = [n for n in model.graph.node if n.op_type == "PRelu" and len(n.input) == 2]
    if not prelus:
        return model
    model = onnx.ModelProto.FromString(model.SerializeToString())
    g = model.graph
    typed = onnx.shape_inference.infer_shapes(model).graph
    ranks = {v.name: len(v.type.tensor_type.shape.dim) for v in chain(typed.input, typed.value_info)
             if v.type.tensor_type.HasField("shape")}
    inits = {t.name: t for t in g.initializer}
    wanted: dict[str, set[int]] = {}
    for n in prelus:
        x, slope = n.input
        t = inits.get(slope)
        if t is not None and len(t.dims) == 1 and t.dims[0] > 1 and ranks.get(x, 0) > 2:
            wanted.setdefault(slope, set()).add(ranks[x])
    for slope, rs in wanted.items():
        if len(rs) != 1:
            continue  # one slope read at two ranks: left as it was (onnxruntime says if it cannot run it)
        dims = [inits[slope].dims[0]] + [1] * (rs.pop() - 2)
        inits[slope].dims[:] = dims
        for i in g.input:  # old files list their initializers as inputs too
            if i.name == slope and i.type.tensor_type.HasField("shape"):
                del i.type.tensor_type.shape.dim[:]
                for d in dims:
                    i.type.tensor_type.shape.dim.add().dim_value = d
    return model


def _checkable(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy the checker takes for what the converter needs (node schemas at the opset, one maker
    per value): a declared type without a shape, which files often give their outputs and the
    checker calls malformed, gets an empty one."""
    copy: onnx.ModelProto = onnx.ModelProto.FromString(model.SerializeToString())
    g = copy.graph
    for v in chain(g.input, g.output, g.value_info):
        if v.type.HasField("tensor_type") and not v.type.tensor_type.HasField("shape"):
            v.type.tensor_type.shape.SetInParent()
    return copy
