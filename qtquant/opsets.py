"""A model's default-domain opset, and onnx's version converter as qtquant uses it: raising a file
older than the opsets it reads on open (:func:`raise_old_opset`), and the export's raise for
per-channel weights or int16 (:mod:`qtquant.export.opset`), one conversion for both."""

from __future__ import annotations

from itertools import chain

import onnx
from onnx import helper

from .errors import ModelError, first_line

__all__ = ["MIN_OPSET", "MAX_OPSET", "OLDEST_OPSET", "RAISED_OPSET", "default_opset", "converted", "raise_old_opset"]

MIN_OPSET = 11
MAX_OPSET = 23
# Older models (ONNX's model zoo classics, opset 7-10: what Horizon's older toolchains take) are
# raised to RAISED_OPSET on open by onnx's version converter, which covers these opsets well.
OLDEST_OPSET = 7
RAISED_OPSET = 13


def default_opset(model) -> int:
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return o.version
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
        return converted(model, RAISED_OPSET)
    except Exception as e:
        raise ModelError(f"opset {opset} could not be raised to {RAISED_OPSET} ({first_line(e, 200)}); qtquant reads "
                         f"opsets {MIN_OPSET} to {MAX_OPSET}: convert the model with another tool") from None


def _checkable(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy the checker takes for what the converter needs (node schemas at the opset, one maker
    per value): a declared type without a shape, which files often give their outputs and the
    checker calls malformed, gets an empty one."""
    copy = onnx.ModelProto.FromString(model.SerializeToString())
    g = copy.graph
    for v in chain(g.input, g.output, g.value_info):
        if v.type.HasField("tensor_type") and not v.type.tensor_type.HasField("shape"):
            v.type.tensor_type.shape.SetInParent()
    return copy
