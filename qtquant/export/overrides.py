"""onnxruntime ``TensorQuantOverrides``: the same scales for users of ``quantize_static``.

The file is the plain JSON form of the ``extra_options["TensorQuantOverrides"]`` dict:
``{tensor: [{"quant_type": "QInt8", "scale": 0.0123, "zero_point": 0}]}`` for every
quantized activation, so tensors of one shared group carry the identical scale.
onnxruntime wants numpy values and ``QuantType`` members there, so load it with
:func:`load_overrides`::

    from qtquant.export.overrides import load_overrides
    quantize_static(..., extra_options={"TensorQuantOverrides": load_overrides("o.json")})
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx

from ..base.errors import PlanError
from ..model.scales import Scheme
from ..base.fileio import atomic_write_text

__all__ = ["overrides_dict", "write_overrides", "load_overrides"]

# QuantType name -> the zero point's numpy type (QInt16 is how an int16 choice is stated: qtquant.deploy.ort)
_ZP_DTYPES = {"QInt8": np.int8, "QUInt8": np.uint8, "QInt16": np.int16, "QUInt16": np.uint16}


def overrides_dict(session, dm=None) -> dict[str, list[dict]]:
    graph = session.graph
    dm = session.domains if dm is None else dm
    qtype = "QInt8" if dm.scheme is Scheme.SYMMETRIC_INT8 else "QUInt8"
    out: dict[str, list[dict]] = {}
    for t in graph.quantized_tensors:
        q = dm.qparams_of(t)
        if q is None or graph.tensors[t].elem_type != onnx.TensorProto.FLOAT:
            continue
        # float32 round trip: onnxruntime stores the scale as float32 and compares bit-exactly.
        out[t] = [{"quant_type": qtype, "scale": float(np.float32(q.scale)), "zero_point": int(q.zero_point)}]
    return out


def write_overrides(session, path, dm=None) -> Path:
    return atomic_write_text(path, json.dumps(overrides_dict(session, dm), indent=1, sort_keys=True) + "\n",
                             inputs=[session.graph.path], what="overrides file")


def load_overrides(path) -> dict:
    """Read an overrides JSON into the types ``quantize_static`` expects."""
    from onnxruntime.quantization import QuantType

    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise PlanError(f"cannot read overrides file {path}: {e}") from None
    if not isinstance(raw, dict):
        raise PlanError(f"{path} is not a TensorQuantOverrides JSON object")
    out = {}
    for name, items in raw.items():
        if not isinstance(items, list):
            raise PlanError(f"{path}: overrides for {name!r} must be a list")
        conv = []
        for it in items:
            if not isinstance(it, dict):
                raise PlanError(f"{path}: overrides for {name!r} must be objects")
            d = dict(it)
            try:
                qt = QuantType.from_string(d["quant_type"]) if "quant_type" in d else QuantType.QInt8
            except (ValueError, TypeError):
                raise PlanError(f"{path}: unknown quant_type {d['quant_type']!r} for {name!r}") from None
            d["quant_type"] = qt
            if "scale" in d:
                d["scale"] = np.array(d["scale"], dtype=np.float32)
            if "zero_point" in d:
                d["zero_point"] = np.array(d["zero_point"], dtype=_ZP_DTYPES.get(qt.name, np.uint8))
            conv.append(d)
        out[name] = conv
    return out
