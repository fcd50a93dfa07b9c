"""Reading already-quantized QDQ models: the float view plus the file's scales.

QuantizeLinear/DequantizeLinear pairs are stripped so the rest of qtquant sees the
float graph; the scale and zero point each activation carried in the file become
fixed ranges for the domain builder.

Writers lay weights out two ways, and both are weights, per channel or not:
- onnxruntime: an integer initializer → DequantizeLinear.  The float view holds the
  dequantized value (the float original is not in the file).
- NVIDIA ModelOpt: a float initializer (or Constant) → QuantizeLinear → DequantizeLinear.
  The float view keeps the float original, which is what the file quantizes.

Activations may be quantized per channel (NNCF does so on depthwise-conv inputs).  Their
per-channel scales are kept in :attr:`QdqInfo.channels`; the domain builder gets the
envelope range of all channels, and the Concat analysis compares every channel.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import numpy.typing as npt
import onnx
from onnx import numpy_helper

from ..base.errors import ModelError
from .nodetable import nested_nodes
from .opsets import default_opset
from .qdqcheck import QDQ_OPS, breaches_of
from .scales import Scheme

if TYPE_CHECKING:
    from .nodetable import NodeTable
    from .qdqcheck import Breach

__all__ = ["ChannelScales", "QdqInfo", "is_qdq_model", "check_quantized_form", "strip_qdq", "attach_qdq",
           "channel_scales_of", "has_channel_scales", "QDQ_OPS"]

# The other quantized forms onnxruntime writes, which qtquant does not read: dynamic quantization
# (int8 weights; activations quantized as the model runs, by ops no NPU compiler takes) and the
# operator form (QLinearConv, QLinearConcat and the other QLinear* ops, with their scales inside).
_DYNAMIC_OPS = frozenset({"ConvInteger", "MatMulInteger", "DynamicQuantizeLinear", "DynamicQuantizeMatMul",
                          "MatMulIntegerToFloat", "DynamicQuantizeLSTM"})
_OPERATOR_OPS = frozenset({"QGemm", "QAttention", "QEmbedLayerNormalization"})  # besides the QLinear* ops


@dataclass(frozen=True)
class ChannelScales:
    """Per-channel quantization of one activation, as the file gives it."""

    axis: int
    scales: tuple[float, ...]
    zero_points: tuple[int, ...]  # as the scheme counts them: uint8 terms when asymmetric

    @property
    def uniform(self) -> bool:
        return len(set(self.scales)) == 1 and len(set(self.zero_points)) == 1


@dataclass
class QdqInfo:
    scheme: Scheme
    ranges: dict[str, tuple[float, float]] = field(default_factory=dict)
    scales: dict[str, tuple[float, int]] = field(default_factory=dict)  # tensor -> (scale, zero point)
    channels: dict[str, ChannelScales] = field(default_factory=dict)  # per-channel activations only
    pairs: int = 0
    weights: int = 0  # quantized weights of either layout
    float_weights: int = 0  # of those, float constant → Q → DQ (kept float in the view)
    opset: int = 0  # the file's default-domain opset
    # What its Q/DQ nodes use that its opset lacks (qdqcheck): the file is not valid ONNX then
    breaches: tuple[Breach, ...] = ()


class QdqView(Protocol):
    """A graph that is the float view of a QDQ file (:class:`~qtquant.model.graphmodel.Graph`, which
    names :class:`QdqInfo` itself)."""

    qdq_info: QdqInfo | None


def is_qdq_model(model: onnx.ModelProto, table: NodeTable | None = None) -> bool:
    """``table``: the model's nodes read already (:class:`~qtquant.model.nodetable.NodeTable`)."""
    ops = table.ops if table is not None else (n.op_type for n in model.graph.node)
    return not QDQ_OPS.isdisjoint(ops)


def check_quantized_form(model: onnx.ModelProto, table: NodeTable | None = None, name: str = "the model") -> None:
    """Refuse, in one line, a model quantized in a form qtquant does not read (it analyzed a
    dynamically quantized YOLOv8n as if it were float, its 'float model' reference quantized too)."""
    ops = table.ops if table is not None else [n.op_type for n in model.graph.node]
    # (an op type that is not valid UTF-8 arrives as bytes: the text check refuses it later)
    found = {op for op in set(ops) if isinstance(op, str) and (op in _DYNAMIC_OPS or op in _OPERATOR_OPS
                                                              or op.startswith("QLinear"))}
    if not found:
        return
    counts = Counter(op for op in ops if op in found)
    listed = ", ".join(f"{n} {op}" for op, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:3])
    if any(op in _OPERATOR_OPS or op.startswith("QLinear") for op in found):
        raise ModelError(f"{name} is quantized in operator form ({listed}); qtquant reads float models and QDQ "
                         "models: open the float model it was made from, or quantize that with QuantFormat.QDQ")
    raise ModelError(f"{name} is dynamically quantized ({listed}): its activations are quantized as it runs, "
                     "which no NPU compiler takes; qtquant reads float models and QDQ models: open the float "
                     "model it was made from")


def attach_qdq(graph: QdqView, info: QdqInfo) -> None:
    """Let graph-level analyses (the Concat table) read what the file said about the float view.

    The Concat analysis is handed the graph and the domain map only; the per-channel scales
    are a property of the file this graph is the float view of, so they travel with it.
    """
    graph.qdq_info = info


def has_channel_scales(graph: QdqView) -> bool:
    """Whether the graph carries per-channel scales read from its file (:func:`channel_scales_of`)."""
    info = graph.qdq_info
    return info is not None and bool(info.channels)


def channel_scales_of(graph: QdqView, tensor: str) -> ChannelScales | None:
    info = graph.qdq_info
    return info.channels.get(tensor) if info is not None else None


def _const(name: str, inits: Mapping[str, onnx.TensorProto], consts: Mapping[str, npt.NDArray[Any]],
           base_dir: str | Path | None) -> npt.NDArray[Any] | None:
    if name in inits:
        return numpy_helper.to_array(inits[name], base_dir=str(base_dir) if base_dir else "")
    if name in consts:
        return consts[name]
    return None


def _attr(node: onnx.NodeProto, name: str, default: Any) -> Any:
    return next((onnx.helper.get_attribute_value(a) for a in node.attribute if a.name == name), default)


def strip_qdq(model: onnx.ModelProto, base_dir: str | Path | None = None) -> tuple[onnx.ModelProto, QdqInfo]:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    inits = {t.name: t for t in g.initializer}
    consts: dict[str, npt.NDArray[Any]] = {}
    for n in g.node:
        if n.op_type == "Constant":
            for a in n.attribute:
                if a.name == "value":
                    consts[n.output[0]] = numpy_helper.to_array(a.t)
    producer = {o: n for n in g.node for o in n.output}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for n in g.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    graph_outputs = {o.name for o in g.output}
    static_memo: dict[str, bool] = {}
    opened: set[str] = set()

    def static(name: str) -> bool:
        # Computed from constants only (a weight behind a Transpose or Cast, say): never an activation.
        todo = [name]
        while todo:
            t = todo[-1]
            if t in static_memo:
                todo.pop()
                continue
            if t in inits or t in consts:
                static_memo[t] = True
                todo.pop()
                continue
            p = producer.get(t)
            if p is None or not [i for i in p.input if i]:
                static_memo[t] = p is not None and p.op_type == "Constant"
                todo.pop()
                continue
            pending = [i for i in p.input if i and i not in static_memo]
            if pending and t not in opened:
                opened.add(t)
                todo.extend(pending)
                continue
            for i in pending:  # back at t with inputs still open: a cycle, which is no constant
                static_memo[i] = False
            static_memo[t] = all(static_memo[i] for i in p.input if i)
            todo.pop()
        return static_memo[name]

    rename: dict[str, str] = {}
    drop = set()
    qparams: dict[str, tuple[float, int, object]] = {}  # float tensor -> (scale, zp, qdtype)
    chans: dict[str, tuple[int, npt.NDArray[np.float64], npt.NDArray[np.int64], object]] = {}
    new_inits = []
    # (integer weight, (scale, zero point), axis) -> its float view's name
    weight_dq: dict[tuple[str, tuple[str, ...], int], str] = {}
    seen_q: set[int] = set()
    n_weights = n_float_weights = n_pairs = 0
    for n in g.node:
        if n.op_type != "DequantizeLinear":
            continue
        src = n.input[0]
        scale = _const(n.input[1], inits, consts, base_dir)
        zp = _const(n.input[2], inits, consts, base_dir) if len(n.input) > 2 and n.input[2] else None
        if scale is None:
            raise ModelError(f"DequantizeLinear {n.name!r} has a scale that is not a constant")
        if not np.all(np.isfinite(scale.astype(np.float64))) or np.any(scale < 0):
            # (an infinite scale dequantized every weight to inf or nan, with numpy's warnings on stderr)
            raise ModelError(f"DequantizeLinear {n.name!r} has a scale that is not a finite, non-negative number: "
                             f"{np.ravel(scale)[:4].tolist()}")
        q = producer.get(src)
        if src in inits or src in consts:
            # onnxruntime's layout: an integer weight; the float view holds its dequantized value.
            axis = _attr(n, "axis", 1)
            same = (src, tuple(n.input[1:]), axis)
            if same in weight_dq:
                # Another DQ of the same weight (one DQ per consumer, as onnxruntime wants them):
                # the float view reads one weight, as the model did before quantization.
                rename[n.output[0]] = weight_dq[same]
                drop.add(id(n))
                continue
            weight_dq[same] = n.output[0]
            wv = _const(src, inits, consts, base_dir)
            assert wv is not None  # (src is one of them)
            w = wv.astype(np.float32)
            ws = scale.astype(np.float32)
            wz = (zp if zp is not None else np.zeros_like(ws)).astype(np.float32)
            if ws.ndim == 1 and ws.size > 1:
                shp = [1] * w.ndim
                shp[axis % w.ndim] = -1
                ws, wz = ws.reshape(shp), wz.reshape(shp)
            new_inits.append(numpy_helper.from_array(((w - wz) * ws).astype(np.float32), n.output[0]))
            drop.add(id(n))
            n_weights += 1
            continue
        if q is None or q.op_type != "QuantizeLinear":
            continue
        x = q.input[0]
        rename[n.output[0]] = x
        drop.add(id(n))
        if id(q) in seen_q:
            continue  # another DQ of a Q already read (one DQ per consumer): the same pair
        seen_q.add(id(q))
        if all(c.op_type == "DequantizeLinear" for c in consumers.get(q.output[0], ())) \
                and q.output[0] not in graph_outputs:
            drop.add(id(q))
        if static(x):
            # ModelOpt's layout: the weight is still float in the file and quantized by this chain.
            n_weights += 1
            n_float_weights += 1
            continue
        n_pairs += 1
        qdt = zp.dtype if zp is not None else np.dtype(np.uint8)
        if _attr(n, "block_size", 0):
            raise ModelError(f"activation {x!r} is block-quantized; qtquant reads per-tensor and "
                             "per-channel activations")
        s = np.asarray(scale, np.float64).reshape(-1)
        z = (np.asarray(zp).reshape(-1).astype(np.int64) if zp is not None else np.zeros(s.size, np.int64))
        if z.size == 1 and s.size > 1:
            z = np.repeat(z, s.size)
        if s.size == 1:
            qparams.setdefault(x, (float(s[0]), int(z[0]), qdt))
            continue
        if x in qparams or x in chans:
            continue  # several Q/DQ pairs on one tensor: the first one stands for it, as for per-tensor
        chans[x] = (int(_attr(n, "axis", 1)), s, z, qdt)
        # The domain builder and the table's scale column see one number; the widest channel
        # is the one a per-tensor requantize would have to cover.
        k = int(np.argmax(s))
        qparams[x] = (float(s[k]), int(z[k]), qdt)
    # Q nodes whose outputs were all consumed by dropped DQs are gone; remaining Q outputs
    # (feeding something other than a DQ) cannot be represented in the float view.
    kept = [n for n in g.node if id(n) not in drop]
    for n in kept:
        if n.op_type == "QuantizeLinear":
            raise ModelError(f"QuantizeLinear {n.name or n.output[0]!r} feeds a non-DequantizeLinear op; "
                             "only QDQ-format models are supported")
    # If/Loop bodies read outer values by name: a DQ output they read is renamed there too, and
    # what they read stays (silero-vad's decoder If, quantized by onnxruntime: "Unsqueeze …
    # TypeInferenceError" once its outer input had gone with the stripped DQ).
    inner = list(nested_nodes(kept))
    for n in (*kept, *inner):
        for k, i in enumerate(n.input):
            if i in rename:
                n.input[k] = rename[i]
    for o in g.output:
        if o.name in rename:
            # Keep the model's output name: re-emit it with an Identity.
            kept.append(onnx.helper.make_node("Identity", [rename[o.name]], [o.name], name=f"{o.name}_id"))
    used = {i for n in (*kept, *inner) for i in n.input} | graph_outputs
    # A Constant that only fed a Q/DQ scale or zero point is dead now; left in, it would show as a node.
    kept = [n for n in kept if n.op_type != "Constant" or any(o in used for o in n.output)]
    del g.node[:]
    g.node.extend(kept)
    keep_inits = [t for t in g.initializer if t.name in used]
    del g.initializer[:]
    g.initializer.extend(keep_inits + [t for t in new_inits if t.name in used])
    # The declared element types of the values the float view still has stay (the same float values):
    # onnx's inference of an If body that reads an outer value may need the declaration (it did for
    # silero-vad's decoder, quantized by onnxruntime).  Their shapes go: the file may be opened at
    # other input shapes than it was quantized at.
    alive = used | {o for n in kept for o in n.output}
    keep_vi = [v for v in g.value_info if v.name in alive]
    for v in keep_vi:
        if v.type.HasField("tensor_type"):
            v.type.tensor_type.ClearField("shape")
    del g.value_info[:]
    g.value_info.extend(keep_vi)

    def zero_points(x: str) -> npt.NDArray[np.int64] | tuple[int]:
        return chans[x][2] if x in chans else (qparams[x][1],)

    sym = all(dt == np.int8 and not np.any(zero_points(x)) for x, (_, _, dt) in qparams.items()) \
        if qparams else True
    scheme = Scheme.SYMMETRIC_INT8 if sym else Scheme.ASYMMETRIC_UINT8
    opset = default_opset(model)
    info = QdqInfo(scheme, pairs=n_pairs, weights=n_weights, float_weights=n_float_weights, opset=opset,
                   breaches=breaches_of(model, opset))
    for x, (sv, zpv, dt) in qparams.items():
        info.scales[x] = (sv, zpv)
        qmin = -128 if dt == np.int8 else 0
        if x in chans:
            axis, cs, cz, _ = chans[x]
            # Zero points in the terms the domain builder's qparams use (uint8 under the asymmetric
            # scheme), so that a channel compares with a per-tensor scale like for like.
            shift = 0 if sym else qmin
            info.channels[x] = ChannelScales(axis, tuple(float(v) for v in cs), tuple(int(v) - shift for v in cz))
            if sym:
                info.ranges[x] = (-127.0 * float(cs.max()), 127.0 * float(cs.max()))
            else:
                info.ranges[x] = (float(((qmin - cz) * cs).min()), float(((qmin + 255 - cz) * cs).max()))
        elif sym:
            info.ranges[x] = (-127.0 * sv, 127.0 * sv)
        else:
            info.ranges[x] = ((qmin - zpv) * sv, (qmin + 255 - zpv) * sv)
    return m, info
