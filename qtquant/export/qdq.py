"""Build and write the fixed QDQ ONNX model (DESIGN §2.6).

- Every quantized activation gets a QuantizeLinear/DequantizeLinear pair.  All tensors of
  one scale domain point at the *same* scale and zero-point initializers, so a shared
  group is visibly one observer in the file.
- Weights of Conv/ConvTranspose/Gemm/MatMul are int8, symmetric, per output channel
  (this needs opset 13; older models are converted).  Their bias becomes int32 with
  scale = input scale x weight scale, as onnxruntime's quantizer does.  Where a bias would
  not fit int32 at that scale (a nearly dead ReLU in front of a Gemm has a scale of 1e-9),
  the weight scale of that output channel is raised until it does, and the build records it
  (:class:`BiasAdjustment`).  Whatever is still clipped is recorded too (:class:`ClipRecord`):
  nothing is clipped silently (DESIGN §3).
- Constants that join a domain (or feed a Concat) are cloned and quantized with the
  domain's scale; the original initializer is never changed in place.  Other float
  constants (Add/Mul operands, anchors) stay float.
- Model outputs keep their names: the producer writes ``<name>_prequant`` and the
  DequantizeLinear writes ``<name>``.
- Activations named in ``float_tensors`` get no Q/DQ pair; a bias whose node reads a float
  input stays float.

:func:`build_qdq_model` returns the in-memory model (fidelity runs it);
:func:`export_qdq` writes it atomically, with external data when it is large.
"""

from __future__ import annotations

import json
import math
import secrets
import weakref
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import BadInputError, ModelError
from ..ops import handler_for
from ..quant import Scheme
from ..fileio.atomic import atomic_dir, check_output_path, commit

__all__ = ["QdqBuild", "ExportResult", "BiasAdjustment", "ClipRecord", "build_qdq_model", "export_qdq",
           "PER_CHANNEL_OPSET"]

PER_CHANNEL_OPSET = 13  # DequantizeLinear gained the 'axis' attribute in opset 13
EXTERNAL_THRESHOLD = 1_800_000_000  # bytes: stay clear of protobuf's 2 GiB limit
_BIAS_OPS = {"Conv": 2, "ConvTranspose": 2, "Gemm": 2}
INT32_MIN, INT32_MAX = -(2 ** 31), 2 ** 31 - 1
WEIGHT_QMAX = 127
# Kernels add the int32 bias into the int32 accumulator, so a bias right at the int32 limit
# overflows once the products are summed in: the fitted bias leaves room for fan-in x |x_q| x
# |w_q| of the worst case (capped at half the range, which costs at most 1 bit), and
# BIAS_MARGIN more for rounding, like onnxruntime's 1.0001.
BIAS_MARGIN = 1.0001
_MAX_RESERVE = 2 ** 30
_ADJUSTED_VERSIONS = 4  # raised-scale versions of one weight kept in the cache

# Per graph: quantized weights and the opset-converted base model, reused across builds
# (fidelity builds one model per domain map; the weights do not depend on the groups).
_weights_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_base_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _num(x) -> float | None:
    """A JSON-safe float (None for inf/nan)."""
    x = float(x)
    return x if math.isfinite(x) else None


@dataclass(frozen=True)
class BiasAdjustment:
    """The weight scale of a node was raised so that its bias fits int32."""

    node: str
    op_type: str
    weight: str
    bias: str
    input: str  # the activation the node reads
    input_scale: float
    channels: int  # output channels whose weight scale was raised (1 for a per-tensor weight)
    of_channels: int  # channels of the weight scale (1 when per tensor)
    max_ratio: float  # new / old weight scale, worst channel
    bits_lost: float  # log2(max_ratio): weight precision the worst channel gives up
    zeroed: int = 0  # raised channels whose int8 weights are now all zero
    per_tensor: bool = False
    shared_with: tuple[str, ...] = ()  # other nodes reading this raised weight (same input scale, say)
    copied: bool = False  # other readers of the weight keep another scale: this node reads its own copy

    def message(self) -> str:
        where = ("the per-tensor weight scale raised" if self.per_tensor else
                 f"weight scale of {self.channels} of {self.of_channels} channel(s) raised")
        s = (f"bias of {self.op_type} {self.node!r} did not fit int32 at input scale {self.input_scale:.2g}: "
             f"{where}, worst channel loses {self.bits_lost:.1f} bits of weight precision")
        if self.zeroed:
            s += f"; {self.zeroed} channel(s) now have all-zero weights (output = bias there)"
        if self.shared_with:
            s += f"; the raised weight {self.weight!r} is also read by {', '.join(map(repr, self.shared_with))}"
        if self.copied:
            s += f"; weight {self.weight!r} is shared: this node reads its own int8 copy, the others keep theirs"
        return s

    def to_dict(self) -> dict:
        d = asdict(self)
        d["shared_with"] = list(self.shared_with)
        for k in ("input_scale", "max_ratio", "bits_lost"):
            d[k] = _num(d[k])
        return d


@dataclass(frozen=True)
class ClipRecord:
    """Values the export had to clip to the representable range of their quantized type."""

    tensor: str  # the float tensor (bias, weight or constant) as named in the input model
    kind: str  # "bias" | "weight" | "constant"
    clipped: int  # values outside the range
    total: int
    worst: float  # the clipped value farthest outside the range
    lo: float  # representable range, in float
    hi: float
    node: str = ""  # the consumer (bias, weight)
    domain: int | None = None  # constants: the domain whose scale they were quantized with

    def message(self) -> str:
        by = f"by domain {self.domain}'s scale" if self.domain is not None else \
            f"({'int32' if self.kind == 'bias' else 'int8'} at its scale)"
        of = f" of {self.node!r}" if self.node else ""
        return (f"{self.kind} {self.tensor!r}{of} clipped in {self.clipped} of {self.total} values to "
                f"[{self.lo:.3g}, {self.hi:.3g}] {by}; worst value {self.worst:.3g}")

    def to_dict(self) -> dict:
        d = asdict(self)
        for k in ("worst", "lo", "hi"):
            d[k] = _num(d[k])
        return d


def _clip_record(values, q, qmin, qmax, scale, zero_point, **kw) -> ClipRecord | None:
    """The record for ``q = rint(values / scale) + zero_point`` (before clipping), if any is outside."""
    v = np.asarray(values, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    bad = ~((q >= qmin) & (q <= qmax))  # nan counts as clipped
    n = int(np.count_nonzero(bad))
    if not n:
        return None
    s = np.broadcast_to(np.asarray(scale, dtype=np.float64), v.shape) if np.ndim(scale) else \
        np.full(v.shape, float(scale))
    lo_all, hi_all = (qmin - zero_point) * s, (qmax - zero_point) * s
    over = np.where(bad, np.maximum(v - hi_all, lo_all - v), -np.inf)
    over = np.where(np.isnan(over), np.inf, over)
    i = np.unravel_index(int(np.argmax(over)), v.shape) if v.ndim else ()
    lo, hi = float(lo_all[i]), float(hi_all[i])
    return ClipRecord(total=int(v.size), clipped=n, worst=float(v[i]), lo=lo, hi=hi, **kw)


@dataclass
class QdqBuild:
    model: onnx.ModelProto
    opset: int
    activations: int = 0  # Q/DQ pairs on activations
    domains: int = 0  # shared scale initializers
    weights: int = 0  # per-channel (or per-tensor) quantized weights
    biases: int = 0
    constants: int = 0  # cloned constants
    notes: list[str] = field(default_factory=list)
    scale_of: dict[str, str] = field(default_factory=dict)  # tensor -> name of its scale initializer
    bias_adjusted: list[BiasAdjustment] = field(default_factory=list)
    clipped: list[ClipRecord] = field(default_factory=list)

    def warnings(self) -> list[str]:
        """One line per weight scale raised for a bias and per tensor still clipped (kept out of
        :attr:`notes` and :meth:`ExportResult.text`: callers print them as warnings)."""
        return [a.message() for a in self.bias_adjusted] + [c.message() for c in self.clipped]

    def to_dict(self) -> dict:
        return {"bias_adjusted": [a.to_dict() for a in self.bias_adjusted],
                "clipped": [c.to_dict() for c in self.clipped],
                "warnings": self.warnings()}


@dataclass
class ExportResult:
    path: Path
    data_path: Path | None
    build: QdqBuild

    def text(self) -> str:
        b = self.build
        s = (f"wrote {self.path} (opset {b.opset}): {b.activations} Q/DQ pairs over {b.domains} scale domains, "
             f"{b.weights} weights per channel, {b.biases} int32 biases, {b.constants} cloned constants")
        if self.data_path:
            s += f"; weights in {self.data_path.name}"
        return s


def _base(graph, per_channel_needed: bool):
    """(model, opset, per_channel, notes): graph.model, raised to opset 13 when per-channel needs it."""
    key = bool(per_channel_needed and graph.opset < PER_CHANNEL_OPSET)
    cache = _base_cache.setdefault(graph, {})
    if key not in cache:
        notes = []
        model, opset, per_channel = graph.model, graph.opset, graph.opset >= PER_CHANNEL_OPSET
        if key:
            try:
                from onnx import version_converter

                model = version_converter.convert_version(graph.model, PER_CHANNEL_OPSET)
                opset, per_channel = PER_CHANNEL_OPSET, True
                notes.append(f"opset raised from {graph.opset} to {PER_CHANNEL_OPSET} for per-channel weights")
            except Exception as e:  # no adapter for some op: fall back to per-tensor weights
                first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
                notes.append(f"could not raise opset {graph.opset} to {PER_CHANNEL_OPSET} ({first}); "
                             "weights are quantized per tensor")
        cache[key] = (model, opset, per_channel, notes)
    return cache[key]


def _weight_axis(node, idx: int, rank: int) -> int:
    axis = handler_for(node.op_type).weight_inputs[idx]
    if node.op_type == "Gemm" and not node.attrs.get("transB", 0):
        axis = 1  # B is K x N without transB: output channels are columns
    return axis % rank if rank else 0


def _channel_shape(ndim: int, axis: int | None) -> list[int] | tuple:
    if axis is None:
        return ()
    shp = [1] * ndim
    shp[axis] = -1
    return shp


def _quantize_weight(graph, name: str, axis: int | None):
    """(int8 symmetric weights in [-127, 127], scales per channel along ``axis``, ClipRecord or None)."""
    cache = _weights_cache.setdefault(graph, {})
    key = (name, axis)
    if key not in cache:
        w = np.asarray(graph.constant_value(name), dtype=np.float32)
        if axis is None:
            absmax = np.array(np.abs(w).max(initial=0.0), dtype=np.float32)
        else:
            red = tuple(i for i in range(w.ndim) if i != axis)
            absmax = np.abs(w).max(axis=red, initial=0.0) if red else np.abs(w)
        scale = np.where(absmax > 0, absmax / 127.0, 1.0).astype(np.float32)
        cache[key] = _requantize_weight(w, scale, axis, name)
    return cache[key]


def _requantize_weight(w, scale, axis, name):
    raw = np.rint(w / scale.reshape(_channel_shape(w.ndim, axis)))
    # Cannot happen at absmax / 127 bar a non-finite weight; checked so that it is never silent.
    rec = _clip_record(w, raw, -WEIGHT_QMAX, WEIGHT_QMAX, scale.reshape(_channel_shape(w.ndim, axis)), 0,
                       tensor=name, kind="weight")
    q = np.clip(np.nan_to_num(raw), -WEIGHT_QMAX, WEIGHT_QMAX).astype(np.int8)
    return q, scale, rec


def _adjusted_weight(graph, name: str, axis: int | None, scale: np.ndarray):
    """The weight requantized at a raised ``scale``.  The raise depends on the consumer's input
    scale, which changes with the domain map, so versions are cached by their exact scale, a few
    per weight (a shared weight can need more than one in a build)."""
    versions = _weights_cache.setdefault(graph, {}).setdefault(("adjusted", name, axis), {})
    sig = scale.tobytes()
    if sig not in versions:
        w = np.asarray(graph.constant_value(name), dtype=np.float32)
        while len(versions) >= _ADJUSTED_VERSIONS:
            versions.pop(next(iter(versions)))
        versions[sig] = _requantize_weight(w, scale, axis, name)
    return versions[sig]


def _bias_fit_scale(bias: np.ndarray, input_scale: float, weight_scale: np.ndarray, reserve: float
                    ) -> np.ndarray:
    """The smallest weight scale (per channel, or one for a per-tensor weight) at which
    ``bias`` fits int32 with ``reserve`` left for the accumulation; never below ``weight_scale``."""
    limit = (INT32_MAX - min(reserve, _MAX_RESERVE)) / BIAS_MARGIN
    b = np.abs(np.asarray(bias, dtype=np.float64))
    b = np.where(np.isfinite(b), b, 0.0)  # a non-finite bias cannot be fitted: it is clipped and recorded
    if weight_scale.ndim == 0:
        b = b.max(initial=0.0)
    need = b / (limit * np.float64(np.float32(input_scale)))
    out = np.maximum(weight_scale.astype(np.float64), need)
    s32 = out.astype(np.float32)
    # float32 rounding must not take the scale back under what the bias needs
    s32 = np.where(s32.astype(np.float64) < out, np.nextafter(s32, np.float32(np.inf)), s32).astype(np.float32)
    return np.where(need > weight_scale, s32, weight_scale).astype(np.float32)


def _quantize_values(v: np.ndarray, qp) -> np.ndarray:
    dt = np.int8 if qp.scheme is Scheme.SYMMETRIC_INT8 else np.uint8
    q = np.rint(np.asarray(v, dtype=np.float64) / qp.scale) + qp.zero_point
    return np.clip(q, qp.qmin, qp.qmax).astype(dt)


class _Names:
    def __init__(self, model):
        g = model.graph
        self.used = {t.name for t in g.initializer} | {i.name for i in g.input} | {o.name for o in g.output}
        for n in g.node:
            self.used.update(n.input)
            self.used.update(n.output)
            self.used.add(n.name)

    def fresh(self, base: str) -> str:
        name, k = base, 1
        while name in self.used:
            name = f"{base}_{k}"
            k += 1
        self.used.add(name)
        return name


def _subgraph_inputs(node) -> set[str]:
    names = set()
    for a in node.attribute:
        for sg in ([a.g] if a.type == onnx.AttributeProto.GRAPH else
                   list(a.graphs) if a.type == onnx.AttributeProto.GRAPHS else []):
            for n in sg.node:
                names.update(n.input)
                names |= _subgraph_inputs(n)
    return names


def build_qdq_model(session, dm=None, *, quantize_outputs: bool = True,
                    float_tensors: frozenset[str] = frozenset()) -> QdqBuild:
    """The QDQ model for ``dm`` (default: the session's current domains), in memory.

    ``quantize_outputs=False`` leaves the model outputs in float (no Q/DQ pair on them),
    as deployments do when the last op runs on the CPU: a detection head that concatenates
    pixel boxes with [0, 1] scores cannot keep the scores at one int8 scale.
    ``float_tensors`` names further activations left in float (a model-output Concat and the
    pass-through tensors after it) while their inputs keep their own scales;
    ``quantize_outputs=False`` is the same as naming every model output there.
    """
    graph = session.graph
    dm = session.domains if dm is None else dm
    unknown = sorted(t for t in float_tensors if t not in graph.tensors)
    if unknown:
        raise BadInputError(f"cannot leave {unknown[0]!r} in float: the model has no tensor of that name")
    outputs = set(graph.outputs)
    float_tensors = frozenset(float_tensors) | (frozenset() if quantize_outputs else frozenset(outputs))
    scheme = dm.scheme
    zp_dtype = np.int8 if scheme is Scheme.SYMMETRIC_INT8 else np.uint8

    # Which weights exist decides whether the opset must be raised.
    weight_uses = []  # (node, input index, weight name)
    for node in graph.nodes.values():
        for idx in handler_for(node.op_type).weight_inputs:
            if idx < len(node.inputs) and node.inputs[idx]:
                w = node.inputs[idx]
                t = graph.tensors.get(w)
                if t is not None and t.kind == "weight" and t.elem_type == onnx.TensorProto.FLOAT \
                        and graph.constant_value(w) is not None:
                    weight_uses.append((node, idx, w))
    base, opset, per_channel, base_notes = _base(graph, bool(weight_uses))
    model = onnx.ModelProto()
    model.CopyFrom(base)
    g = model.graph
    del g.value_info[:]  # recomputed by any consumer; stale shapes would only mislead
    build = QdqBuild(model, opset, notes=list(base_notes))
    names = _Names(model)
    pnodes = {n.name: n for n in g.node}
    missing = [n for n in graph.nodes if n not in pnodes]
    if missing:
        raise ModelError(f"cannot export: node {missing[0]!r} is missing from the model after opset conversion")
    new_inits: list[onnx.TensorProto] = []
    head: list[onnx.NodeProto] = []  # DQ of weights/constants and Q/DQ of model inputs
    after: dict[str, list[onnx.NodeProto]] = {}

    def rewire(consumer: str, old: str, new: str, index: int | None = None) -> None:
        pn = pnodes[consumer]
        for k, i in enumerate(pn.input):
            if i == old and (index is None or k == index):
                pn.input[k] = new

    # -- shared scale initializers, one per domain ---------------------------------------
    domain_inits: dict[int, tuple[str, str]] = {}

    def domain_qp(did):
        d = dm.domains[did]
        if did not in domain_inits:
            s = names.fresh(f"qtq_d{did}_scale")
            z = names.fresh(f"qtq_d{did}_zero_point")
            new_inits.append(numpy_helper.from_array(np.array(d.qparams.scale, dtype=np.float32), s))
            new_inits.append(numpy_helper.from_array(np.array(d.qparams.zero_point, dtype=zp_dtype), z))
            domain_inits[did] = (s, z)
        return domain_inits[did]

    # -- activations ------------------------------------------------------------------------
    act_scale: dict[str, float] = {}
    act_qp: dict[str, object] = {}
    skipped_dtype = 0
    for t in graph.quantized_tensors:
        did = dm.of.get(t)
        if did is None or dm.domains[did].qparams is None:
            continue
        tt = graph.tensors[t]
        if tt.elem_type != onnx.TensorProto.FLOAT:
            skipped_dtype += 1
            continue
        if t in float_tensors or (t in outputs and tt.producer is None):
            continue  # kept in float, or a model input passed straight out
        s, z = domain_qp(did)
        q_out = names.fresh(f"{t}_quantized")
        if t in outputs:
            src = names.fresh(f"{t}_prequant")
            for k, o in enumerate(pnodes[tt.producer].output):
                if o == t:
                    pnodes[tt.producer].output[k] = src
            dq_out = t
        else:
            src, dq_out = t, names.fresh(f"{t}_dequantized")
            for c in set(tt.consumers):
                rewire(c, t, dq_out)
        qn = helper.make_node("QuantizeLinear", [src, s, z], [q_out], name=names.fresh(f"{t}_QuantizeLinear"))
        dqn = helper.make_node("DequantizeLinear", [q_out, s, z], [dq_out], name=names.fresh(f"{t}_DequantizeLinear"))
        (head if tt.producer is None else after.setdefault(tt.producer, [])).extend([qn, dqn])
        build.scale_of[t] = s
        act_scale[t] = dm.domains[did].qparams.scale
        act_qp[t] = dm.domains[did].qparams
        build.activations += 1
    if skipped_dtype:
        build.notes.append(f"{skipped_dtype} non-float32 activations left unquantized")

    # -- weights, per output channel, and their int32 biases --------------------------------
    def bias_of(node, wscale):
        """(input index, bias name, float values) when ``node``'s bias becomes int32 (its input is quantized)."""
        bidx = _BIAS_OPS.get(node.op_type)
        x = node.inputs[0] if node.inputs else ""
        if bidx is None or bidx >= len(node.inputs) or not node.inputs[bidx] or x not in act_scale:
            return None
        b = node.inputs[bidx]
        bt = graph.tensors.get(b)
        bv = graph.constant_value(b) if bt is not None and bt.kind == "weight" else None
        if bv is None or bt.elem_type != onnx.TensorProto.FLOAT or bv.ndim != 1 or \
                (wscale.ndim == 1 and wscale.size != bv.size):
            return None
        return bidx, b, bv

    # The weight scale each use needs for its bias.  A weight shared by nodes that need
    # different scales is quantized once per scale: taking the largest for all would zero the
    # weights of a reader at an ordinary input scale and round its bias to a few steps (a
    # shared Gemm weight read behind a dead ReLU and behind a live one), for the sake of one
    # initializer.  The copies are int8 and only weights that need a raise get one.
    uses = []  # (node, idx, w, (w, axis), bias or None, scale this use needs)
    for node, idx, w in weight_uses:
        arr_rank = len(graph.tensors[w].shape or ()) or np.ndim(graph.constant_value(w))
        axis = _weight_axis(node, idx, arr_rank) if per_channel and arr_rank else None
        _, base_scale, _ = _quantize_weight(graph, w, axis)
        bias = bias_of(node, base_scale)
        need = base_scale
        if bias is not None:
            qp = act_qp[node.inputs[0]]
            x_span = max(abs(qp.qmin - qp.zero_point), abs(qp.qmax - qp.zero_point))
            n_out = base_scale.size if base_scale.ndim else bias[2].size
            fan_in = max(1, int(np.size(graph.constant_value(w))) // max(1, n_out))
            need = _bias_fit_scale(bias[2], act_scale[node.inputs[0]], base_scale, fan_in * x_span * WEIGHT_QMAX)
        uses.append((node, idx, w, (w, axis), bias, need))
    readers: dict[tuple, list[str]] = {}  # (w, axis, scale) -> nodes
    versions: dict[tuple, set] = {}  # (w, axis) -> the scales it is quantized with
    for node, _, _, wa, _, need in uses:
        readers.setdefault((*wa, need.tobytes()), []).append(node.name)
        versions.setdefault(wa, set()).add(need.tobytes())

    wdone: dict[tuple, tuple[str, np.ndarray]] = {}
    for node, idx, w, (_, axis), bias, scale in uses:
        base_q, base_scale, base_clip = _quantize_weight(graph, w, axis)
        raised = scale > base_scale
        key = (w, axis, scale.tobytes())
        if key not in wdone:
            q, _, clip_rec = _adjusted_weight(graph, w, axis, scale) if raised.any() else \
                (base_q, base_scale, base_clip)
            if clip_rec is not None:
                build.clipped.append(ClipRecord(**{**asdict(clip_rec), "node": node.name}))
            qn, sn, zn = names.fresh(f"{w}_quantized"), names.fresh(f"{w}_scale"), names.fresh(f"{w}_zero_point")
            out = names.fresh(f"{w}_dequantized")
            new_inits += [numpy_helper.from_array(q, qn), numpy_helper.from_array(scale, sn),
                          numpy_helper.from_array(np.zeros(scale.shape, np.int8), zn)]
            attrs = {"axis": axis} if axis is not None else {}
            head.append(helper.make_node("DequantizeLinear", [qn, sn, zn], [out],
                                         name=names.fresh(f"{w}_DequantizeLinear"), **attrs))
            wdone[key] = (out, q)
            build.weights += 1
        rewire(node.name, w, wdone[key][0], idx)
        if bias is None:
            continue
        bidx, b, bv = bias
        x = node.inputs[0]
        if raised.any():
            red = None if axis is None else tuple(i for i in range(base_q.ndim) if i != axis)
            zero_now = ~np.any(wdone[key][1] != 0, axis=red)
            zero_before = ~np.any(base_q != 0, axis=red)
            worst = float((scale.astype(np.float64) / base_scale.astype(np.float64)).max())
            build.bias_adjusted.append(BiasAdjustment(
                node=node.name, op_type=node.op_type, weight=w, bias=b, input=x,
                input_scale=float(act_scale[x]), channels=int(np.count_nonzero(raised)),
                of_channels=int(scale.size), max_ratio=worst, bits_lost=math.log2(worst),
                zeroed=int(np.count_nonzero(zero_now & ~zero_before & raised)), per_tensor=scale.ndim == 0,
                shared_with=tuple(n for n in dict.fromkeys(readers[key]) if n != node.name),
                copied=len(versions[(w, axis)]) > 1))
        bscale = (np.float32(act_scale[x]) * scale).astype(np.float32)
        raw = np.rint(bv.astype(np.float64) / bscale.astype(np.float64))
        rec = _clip_record(bv, raw, INT32_MIN, INT32_MAX, bscale, 0, tensor=b, kind="bias", node=node.name)
        if rec is not None:
            build.clipped.append(rec)
        bq = np.clip(np.nan_to_num(raw), INT32_MIN, INT32_MAX).astype(np.int32)
        qn, sn, zn = names.fresh(f"{b}_quantized"), names.fresh(f"{b}_scale"), names.fresh(f"{b}_zero_point")
        out = names.fresh(f"{b}_dequantized")
        new_inits += [numpy_helper.from_array(bq, qn), numpy_helper.from_array(bscale, sn),
                      numpy_helper.from_array(np.zeros(bscale.shape, np.int32), zn)]
        attrs = {"axis": 0} if bscale.ndim == 1 and per_channel else {}
        head.append(helper.make_node("DequantizeLinear", [qn, sn, zn], [out],
                                     name=names.fresh(f"{b}_DequantizeLinear"), **attrs))
        rewire(node.name, b, out, bidx)
        build.biases += 1

    # -- constants: cloned into their domain, or to the output scale of the Concat they feed --
    cdone: dict[tuple, str] = {}

    def clone(c: str, did: int) -> str:
        if (c, did) not in cdone:
            s, z = domain_qp(did)
            qn = names.fresh(f"{c}_quantized_d{did}")
            qp = dm.domains[did].qparams
            v = graph.constant_value(c)
            rec = _clip_record(v, np.rint(np.asarray(v, dtype=np.float64) / qp.scale) + qp.zero_point,
                               qp.qmin, qp.qmax, qp.scale, qp.zero_point, tensor=c, kind="constant", domain=did)
            if rec is not None:
                build.clipped.append(rec)
            new_inits.append(numpy_helper.from_array(_quantize_values(v, qp), qn))
            out = names.fresh(f"{c}_dequantized_d{did}")
            head.append(helper.make_node("DequantizeLinear", [qn, s, z], [out],
                                         name=names.fresh(f"{c}_DequantizeLinear_d{did}")))
            cdone[(c, did)] = out
            build.constants += 1
        return cdone[(c, did)]

    weight_slots = {(n.name, i) for n, i, _ in weight_uses}
    for c, t in graph.tensors.items():
        if t.kind != "weight" or t.elem_type != onnx.TensorProto.FLOAT or graph.constant_value(c) is None:
            continue
        own = dm.of.get(c)
        for cons in graph.consumers(c):
            for i, name in enumerate(cons.inputs):
                if name != c or (cons.name, i) in weight_slots:
                    continue
                did = own
                # A Concat left in float has no scale to bring its constant input to.
                if did is None and cons.op_type == "Concat" and cons.outputs[0] in dm.of \
                        and cons.outputs[0] not in float_tensors:
                    did = dm.of[cons.outputs[0]]
                if did is None or dm.domains[did].qparams is None:
                    continue
                rewire(cons.name, c, clone(c, did), i)

    # -- assemble: new heads first, Q/DQ right after each producer ------------------------------
    order = list(g.node)
    del g.node[:]
    g.node.extend(head)
    for n in order:
        g.node.append(n)
        g.node.extend(after.get(n.name, ()))
    g.initializer.extend(new_inits)
    _prune(model)
    build.domains = len(domain_inits)
    meta = {"version": 1, "scheme": scheme.value, "policy": session.options.policy.value,
            "groups": len(session.groups), "domains": build.domains, "float_outputs": not quantize_outputs}
    extra_float = float_tensors - (frozenset(outputs) if not quantize_outputs else frozenset())
    if extra_float:
        meta["float_tensors"] = len(extra_float)
    if build.bias_adjusted:
        meta["bias_adjusted"] = len(build.bias_adjusted)
    if build.clipped:
        meta["clipped"] = len(build.clipped)
    keep = [p for p in model.metadata_props if p.key != "qtquant"]
    del model.metadata_props[:]
    model.metadata_props.extend(keep)
    model.metadata_props.add(key="qtquant", value=json.dumps(meta, sort_keys=True))
    return build


def _prune(model) -> None:
    """Drop initializers and Constant nodes nothing reads any more (the float originals)."""
    g = model.graph
    used = {o.name for o in g.output}
    for n in g.node:
        used.update(n.input)
        used |= _subgraph_inputs(n)
    keep_nodes = [n for n in g.node if not (n.op_type == "Constant" and not any(o in used for o in n.output))]
    if len(keep_nodes) != len(g.node):
        del g.node[:]
        g.node.extend(keep_nodes)
    keep = [t for t in g.initializer if t.name in used]
    dropped = {t.name for t in g.initializer} - {t.name for t in keep}
    if dropped:
        del g.initializer[:]
        g.initializer.extend(keep)
        # Old-style models also list initializers as graph inputs: drop the pruned ones.
        ins = [i for i in g.input if i.name not in dropped]
        del g.input[:]
        g.input.extend(ins)


def _external_size(model) -> int:
    return sum(len(t.raw_data) for t in model.graph.initializer)


def export_qdq(session, out_path, *, dm=None, quantize_outputs: bool = True,
               float_tensors: frozenset[str] = frozenset()) -> ExportResult:
    """Write the fixed QDQ model to ``out_path`` atomically.

    Refuses to overwrite the input model.  Models whose weights exceed ~1.8 GB, or whose
    input used external data, are written with their weights in ``<out>.data``.
    """
    graph = session.graph
    inputs = [graph.path] if graph.path else []
    out = check_output_path(out_path, inputs=inputs, what="output model")
    if out.suffix.lower() != ".onnx":
        raise BadInputError(f"output model {out.name} should end in .onnx")
    # A fresh weight-file name per export: the new weights never overwrite the file the old
    # model points at, so a crash between the two renames leaves the old pair whole.
    data_name = f"{out.name}.{secrets.token_hex(4)}.data"
    old_data = _external_locations(out) if out.exists() else set()
    build = build_qdq_model(session, dm, quantize_outputs=quantize_outputs, float_tensors=float_tensors)
    model = build.model
    had_external = any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer)
    if had_external:
        from onnx.external_data_helper import load_external_data_for_model

        try:
            load_external_data_for_model(model, str(graph.base_dir))
        except Exception as e:
            raise ModelError(f"cannot read the input's external weights: {e}") from None
    external = had_external or _external_size(model) > EXTERNAL_THRESHOLD
    parent = out.parent if str(out.parent) else Path(".")
    with atomic_dir(parent) as tmp:
        tmp_model = tmp / out.name
        try:
            if external:
                onnx.save_model(model, str(tmp_model), save_as_external_data=True, all_tensors_to_one_file=True,
                                location=data_name, size_threshold=1024)
            else:
                onnx.save_model(model, str(tmp_model))
            if external and not (tmp / data_name).exists():
                external = False  # every tensor was under onnx's size threshold: one file after all
            if external:
                commit(tmp / data_name, parent / data_name)
            commit(tmp_model, out)
        except OSError as e:
            raise BadInputError(f"cannot write {out}: {e.strerror or e}") from None
    _remove_stale_data(parent, out, old_data - ({data_name} if external else set()),
                       keep=_input_data_files(graph))
    return ExportResult(out, (parent / data_name) if external else None, build)


def _external_locations(model_path: Path) -> set[str]:
    try:
        m = onnx.load(str(model_path), load_external_data=False)
    except Exception:
        return set()
    return {e.value for t in m.graph.initializer for e in t.external_data if e.key == "location"}


def _input_data_files(graph) -> set[Path]:
    return {(graph.base_dir / e.value).resolve() for t in graph.model.graph.initializer
            for e in t.external_data if e.key == "location"}


def _remove_stale_data(parent: Path, out: Path, names, keep) -> None:
    """Delete weight files the replaced export used (only ones named after it, never an input's)."""
    for name in names:
        if not (name.startswith(out.name + ".") and name.endswith(".data")) or "/" in name or "\\" in name:
            continue
        p = (parent / name)
        if p.resolve() in keep:
            continue
        try:
            p.unlink()
        except OSError:
            pass
