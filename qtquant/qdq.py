"""Reading already-quantized QDQ models: the float view plus the file's scales.

QuantizeLinear/DequantizeLinear pairs are stripped so the rest of qtquant sees the
float graph; the scale and zero point each activation carried in the file become
fixed ranges for the domain builder.  Quantized weights are dequantized in place.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import numpy_helper

from .errors import ModelError
from .quant import Scheme

__all__ = ["QdqInfo", "is_qdq_model", "strip_qdq"]


@dataclass
class QdqInfo:
    scheme: Scheme
    ranges: dict[str, tuple[float, float]] = field(default_factory=dict)
    scales: dict[str, tuple[float, int]] = field(default_factory=dict)  # tensor -> (scale, zero point)
    pairs: int = 0
    weights: int = 0


def is_qdq_model(model: onnx.ModelProto) -> bool:
    return any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in model.graph.node)


def _const(name, inits, consts, base_dir):
    if name in inits:
        return numpy_helper.to_array(inits[name], base_dir=str(base_dir) if base_dir else "")
    if name in consts:
        return consts[name]
    return None


def strip_qdq(model: onnx.ModelProto, base_dir=None) -> tuple[onnx.ModelProto, QdqInfo]:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    inits = {t.name: t for t in g.initializer}
    consts = {}
    for n in g.node:
        if n.op_type == "Constant":
            for a in n.attribute:
                if a.name == "value":
                    consts[n.output[0]] = numpy_helper.to_array(a.t)
    producer = {o: n for n in g.node for o in n.output}
    rename: dict[str, str] = {}
    drop = set()
    qparams: dict[str, tuple[float, int, int]] = {}  # float tensor -> (scale, zp, qdtype)
    new_inits = []
    n_weights = 0
    n_pairs = 0
    for n in g.node:
        if n.op_type != "DequantizeLinear":
            continue
        src = n.input[0]
        scale = _const(n.input[1], inits, consts, base_dir)
        zp = _const(n.input[2], inits, consts, base_dir) if len(n.input) > 2 and n.input[2] else None
        if scale is None:
            raise ModelError(f"DequantizeLinear {n.name!r} has a scale that is not a constant")
        q = producer.get(src)
        if src in inits or src in consts:
            # A quantized weight: replace with its float value.
            w = _const(src, inits, consts, base_dir).astype(np.float32)
            axis = next((a.i for a in n.attribute if a.name == "axis"), 1)
            s = scale.astype(np.float32)
            z = (zp if zp is not None else np.zeros_like(s)).astype(np.float32)
            if s.ndim == 1 and s.size > 1:
                shp = [1] * w.ndim
                shp[axis % w.ndim] = -1
                s, z = s.reshape(shp), z.reshape(shp)
            new_inits.append(numpy_helper.from_array(((w - z) * s).astype(np.float32), n.output[0]))
            drop.add(id(n))
            n_weights += 1
            continue
        if q is not None and q.op_type == "QuantizeLinear":
            x = q.input[0]
            rename[n.output[0]] = x
            drop.add(id(n))
            drop.add(id(q))
            qdt = (zp.dtype if zp is not None else np.dtype(np.uint8))
            if scale.size != 1:
                raise ModelError(f"activation {x!r} is quantized per channel; only per-tensor activations are supported")
            zpv = int(zp.reshape(-1)[0]) if zp is not None else 0
            qparams.setdefault(x, (float(scale.reshape(-1)[0]), zpv, qdt))
            n_pairs += 1
    # Q nodes whose outputs were all consumed by dropped DQs are gone; remaining Q outputs
    # (feeding something other than a DQ) cannot be represented in the float view.
    kept = [n for n in g.node if id(n) not in drop]
    for n in kept:
        if n.op_type == "QuantizeLinear":
            raise ModelError(f"QuantizeLinear {n.name or n.output[0]!r} feeds a non-DequantizeLinear op; "
                             "only QDQ-format models are supported")
    for n in kept:
        for k, i in enumerate(n.input):
            if i in rename:
                n.input[k] = rename[i]
    for o in g.output:
        if o.name in rename:
            # Keep the model's output name: re-emit it with an Identity.
            kept.append(onnx.helper.make_node("Identity", [rename[o.name]], [o.name], name=f"{o.name}_id"))
    del g.node[:]
    g.node.extend(kept)
    used = {i for n in g.node for i in n.input}
    keep_inits = [t for t in g.initializer if t.name in used]
    del g.initializer[:]
    g.initializer.extend(keep_inits + [t for t in new_inits if t.name in used])
    del g.value_info[:]
    sym = all(dt == np.int8 and zpv == 0 for _, zpv, dt in qparams.values()) if qparams else True
    scheme = Scheme.SYMMETRIC_INT8 if sym else Scheme.ASYMMETRIC_UINT8
    info = QdqInfo(scheme, pairs=n_pairs, weights=n_weights)
    for x, (s, zpv, dt) in qparams.items():
        info.scales[x] = (s, zpv)
        if sym:
            info.ranges[x] = (-127.0 * s, 127.0 * s)
        else:
            qmin = -128 if dt == np.int8 else 0
            info.ranges[x] = ((qmin - zpv) * s, (qmin + 255 - zpv) * s)
    return m, info
