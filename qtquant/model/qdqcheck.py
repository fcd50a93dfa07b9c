"""What a QDQ file's Q/DQ nodes use that its own opset does not have.

onnxruntime's ``quantize_static`` writes per-channel DequantizeLinear (``axis``) into opset-11 and
-12 models, and float16 scales into the QDQ files of float16 models below opset 19; onnxruntime's
own runtime then refuses those files ("Unrecognized attribute: axis", "Type 'tensor(float16)' of
input parameter ... of operator (DequantizeLinear)").  qtquant reads their scales all the same,
and what it writes is valid: per-channel Q/DQ raise its export to opset 13, and its scales are
float32.  Opening such a file says so, and so does a comparison with it that onnxruntime cannot run.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Sequence

import numpy as np
import onnx

__all__ = ["Breach", "breaches_of", "breaches_note", "breaches_reason", "QDQ_OPS", "PER_CHANNEL_OPSET",
           "FLOAT16_SCALE_OPSET"]

PER_CHANNEL_OPSET = 13  # QuantizeLinear and DequantizeLinear gained axis (per-channel scales) in opset 13
FLOAT16_SCALE_OPSET = 19  # ... and scales of float16 and bfloat16 in opset 19
QDQ_OPS = frozenset({"QuantizeLinear", "DequantizeLinear"})
_HALF = frozenset({onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16})


@dataclass(frozen=True)
class Breach:
    """``nodes`` Q/DQ nodes use ``feature``, which QuantizeLinear and DequantizeLinear have only
    from opset ``since``."""

    nodes: int
    feature: str  # "per-channel scales", "float16 scales"
    since: int

    def text(self) -> str:
        return (f"{self.nodes} of its Q/DQ nodes {'has' if self.nodes == 1 else 'have'} {self.feature}, which "
                f"QuantizeLinear and DequantizeLinear take only from opset {self.since}")


def breaches_of(model: onnx.ModelProto, opset: int) -> tuple[Breach, ...]:
    """What the Q/DQ nodes of ``model`` (main graph) use that ``opset``, the file's, lacks."""
    if opset >= FLOAT16_SCALE_OPSET:
        return ()
    g = model.graph
    shapes = {t.name: (int(np.prod(t.dims, dtype=np.int64)), t.data_type) for t in g.initializer}
    for n in g.node:  # scales given by Constant nodes
        if n.op_type == "Constant" and n.output:
            for a in n.attribute:
                if a.name == "value":
                    shapes[n.output[0]] = (int(np.prod(a.t.dims, dtype=np.int64)), a.t.data_type)
    channels = half = 0
    for n in g.node:
        if n.op_type not in QDQ_OPS or len(n.input) < 2:
            continue
        size, dtype = shapes.get(n.input[1], (1, onnx.TensorProto.FLOAT))
        channels += size > 1 or any(a.name == "axis" for a in n.attribute)
        half += dtype in _HALF
    found = []
    if channels and opset < PER_CHANNEL_OPSET:
        found.append(Breach(channels, "per-channel scales", PER_CHANNEL_OPSET))
    if half:
        found.append(Breach(half, "float16 scales", FLOAT16_SCALE_OPSET))
    return tuple(found)


def breaches_note(opset: int, breaches: Sequence[Breach]) -> str:
    """The sentence for a file whose Q/DQ nodes its opset does not allow ("" for a valid one)."""
    if not breaches:
        return ""
    return (f"the file is opset {opset}, and " + "; and ".join(b.text() for b in breaches) + ": it is not valid ONNX "
            "(onnxruntime refuses it; onnxruntime's quantize_static writes such files); qtquant reads its scales, and "
            "what it writes is valid")


def breaches_reason(opset: int, breaches: Sequence[Breach]) -> str:
    """Why onnxruntime cannot run such a file, short: "it is opset 11 with per-channel scales (opset 13 on)"."""
    return (f"it is opset {opset} with " + " and ".join(f"{b.feature} in Q/DQ (opset {b.since} on)" for b in breaches)
            + ": not valid ONNX")
