"""onnx shape inference in this process: the one call both the open path
(:func:`qtquant.model.modelcheck.infer_shapes`) and the app's child (:mod:`qtquant.model.shape_child`) make.
"""

from __future__ import annotations

import onnx

from ..base.errors import ModelError, ShapeError, first_line

__all__ = ["infer_here"]

try:  # what onnx.shape_inference.infer_shapes calls, which keeps the inferred bytes to itself
    from onnx.onnx_cpp2py_export.shape_inference import infer_shapes as _infer_bytes
except ImportError:  # pragma: no cover - another onnx layout: the public call, serialized again
    def _infer_bytes(b: bytes, check_type: bool, strict_mode: bool, data_prop: bool) -> bytes:
        return bytes(onnx.shape_inference.infer_shapes(b, check_type, strict_mode, data_prop).SerializeToString())


def infer_here(model: onnx.ModelProto | bytes, data_prop: bool = True) -> bytes:
    """``model`` (or its serialized bytes) with inferred types, serialized (one-line errors)."""
    try:
        data = model if isinstance(model, bytes) else model.SerializeToString()
        return _infer_bytes(data, False, True, data_prop)
    except onnx.shape_inference.InferenceError as e:
        msg = first_line(e, default="shape inference failed")
        if "No Op registered" in msg or "not registered" in msg or "Unsupported" in msg:
            try:
                return _infer_bytes(data, False, False, data_prop)
            except Exception as e2:  # pragma: no cover - onnx internals
                raise ModelError(f"shape inference failed: {e2}") from None
        raise ShapeError(f"the input shapes do not fit the model: {msg}") from None
    except Exception as e:
        raise ModelError(f"shape inference failed: {first_line(e)}") from None
