"""Weights and biases of Conv/ConvTranspose/Gemm/MatMul: int8 symmetric weights per output
channel, int32 biases at input scale x weight scale, and the bias fit that raises a channel's
weight scale where its bias would not fit int32 (as onnxruntime does)."""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

import numpy as np
import onnx

from ..model.derived import Slot
from ..model.ops import handler_for
from .records import BiasAdjustment, ClipRecord, clip_record

__all__ = ["INT32_MIN", "INT32_MAX", "WEIGHT_QMAX", "quantize_weights"]

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

# Per graph: quantized weights, reused across builds (fidelity builds one model per domain map;
# the weights do not depend on the groups): (name, axis) -> the weight at its own scale,
# ("adjusted", name, axis) -> {scale bytes -> the weight at a raised scale}, "memo" -> memoized's.
WEIGHTS: Slot[dict[object, Any]] = Slot("quantized weights", dict)


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


def quantize_weight(graph, name: str, axis: int | None):
    """(int8 symmetric weights in [-127, 127], scales per channel along ``axis``, ClipRecord or None)."""
    cache = graph.derived.get(WEIGHTS)
    key = (name, axis)
    if key not in cache:
        w = np.asarray(graph.constant_value(name), dtype=np.float32)
        # max(max, -min) rather than abs().max(): no temporary the size of the weight
        if axis is None:
            absmax = np.maximum(w.max(initial=0.0), -w.min(initial=0.0)).astype(np.float32)
        else:
            red = tuple(i for i in range(w.ndim) if i != axis)
            absmax = np.maximum(w.max(axis=red, initial=0.0), -w.min(axis=red, initial=0.0)) if red else np.abs(w)
        scale = np.where(absmax > 0, absmax / 127.0, 1.0).astype(np.float32)
        cache[key] = _requantize_weight(w, scale, axis, name)
    return cache[key]


def _requantize_weight(w, scale, axis, name):
    s = scale.reshape(_channel_shape(w.ndim, axis))
    # One float temporary, worked in place: a 1 GiB weight took four (and clip_record two more
    # in float64), so `fix` on a 2 GB model peaked near 8 GB.  Same values, bit for bit.
    raw = np.divide(w, s, dtype=np.float32)
    np.rint(raw, out=raw)
    # Cannot happen at absmax / 127 bar a non-finite weight; checked so that it is never silent.
    rec = clip_record(w, raw, -WEIGHT_QMAX, WEIGHT_QMAX, s, 0, tensor=name, kind="weight")
    np.nan_to_num(raw, copy=False)
    np.clip(raw, -WEIGHT_QMAX, WEIGHT_QMAX, out=raw)
    return raw.astype(np.int8), scale, rec


def _adjusted_weight(graph, name: str, axis: int | None, scale: np.ndarray):
    """The weight requantized at a raised ``scale``.  The raise depends on the consumer's input
    scale, which changes with the domain map, so versions are cached by their exact scale, a few
    per weight (a shared weight can need more than one in a build)."""
    versions = graph.derived.get(WEIGHTS).setdefault(("adjusted", name, axis), {})
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


def _bias_of(graph, node, wscale, act_qp):
    """(input index, bias name, float values) when ``node``'s bias becomes int32 (its input is quantized)."""
    bidx = _BIAS_OPS.get(node.op_type)
    x = node.inputs[0] if node.inputs else ""
    if bidx is None or bidx >= len(node.inputs) or not node.inputs[bidx] or x not in act_qp:
        return None
    b = node.inputs[bidx]
    bt = graph.tensors.get(b)
    bv = graph.constant_value(b) if bt is not None and bt.kind == "weight" else None
    if bv is None or bt.elem_type != onnx.TensorProto.FLOAT or bv.ndim != 1 or \
            (wscale.ndim == 1 and wscale.size != bv.size):
        return None
    return bidx, b, bv


def scaled_uses(graph, weight_uses, per_channel: bool, act_qp) -> list[tuple]:
    """(node, input index, weight, axis, bias or None, the weight scale this use needs) per weight use.

    A weight shared by nodes that need different scales is quantized once per scale: taking the
    largest for all would zero the weights of a reader at an ordinary input scale and round its
    bias to a few steps (a shared Gemm weight read behind a dead ReLU and behind a live one), for
    the sake of one initializer.  The copies are int8 and only weights that need a raise get one.
    """
    uses = []
    for node, idx, w in weight_uses:
        arr_rank = len(graph.tensors[w].shape or ()) or np.ndim(graph.constant_value(w))
        axis = _weight_axis(node, idx, arr_rank) if per_channel and arr_rank else None
        _, base_scale, _ = quantize_weight(graph, w, axis)
        bias = _bias_of(graph, node, base_scale, act_qp)
        need = base_scale
        if bias is not None:
            qp = act_qp[node.inputs[0]]
            need = memoized(graph, ("fit", bias[1], w, axis, qp), lambda qp=qp, bias=bias, w=w, base_scale=base_scale:
                         _fit(graph, bias[2], w, base_scale, qp))
        uses.append((node, idx, w, axis, bias, need))
    return uses


def _fit(graph, bv, w, base_scale, qp):
    x_span = max(abs(qp.qmin - qp.zero_point), abs(qp.qmax - qp.zero_point))
    n_out = base_scale.size if base_scale.ndim else bv.size
    fan_in = max(1, int(np.size(graph.constant_value(w))) // max(1, n_out))
    return _bias_fit_scale(bv, qp.scale, base_scale, fan_in * x_span * WEIGHT_QMAX)


_MEMO_ENTRIES = 4096  # per graph: bias fits and int32 biases of recent builds


def memoized(graph, key, make):
    """``make()`` once per ``key`` (what a weight use's numbers depend on, all of it in the key):
    a build after an edit changes few input scales, and these were a fifth of each build
    (yolov8n_320).  The oldest go first past :data:`_MEMO_ENTRIES`."""
    memo = graph.derived.get(WEIGHTS).setdefault("memo", {})
    got = memo.get(key)
    if got is None:
        got = memo[key] = make()
        if len(memo) > _MEMO_ENTRIES:
            memo.pop(next(iter(memo)))
    return got


def int32_bias(bv, bscale, b, node_name):
    """(int32 bias at ``bscale``, ClipRecord or None)."""
    raw = np.rint(bv.astype(np.float64) / bscale.astype(np.float64))
    rec = clip_record(bv, raw, INT32_MIN, INT32_MAX, bscale, 0, tensor=b, kind="bias", node=node_name)
    return np.clip(np.nan_to_num(raw), INT32_MIN, INT32_MAX).astype(np.int32), rec


def quantize_weights(rw, build, graph, weight_uses, per_channel: bool, act_qp, biases: list | None = None) -> None:
    """Make every weight use read an int8 weight behind a DequantizeLinear, and its bias an int32 one;
    ``act_qp`` holds the quantization of every activation that got a Q/DQ pair.  ``biases``: gets
    (the use's index, its int32 and scale initializer names) per int32 bias (see :mod:`.rescale`)."""
    uses = scaled_uses(graph, weight_uses, per_channel, act_qp)
    readers: dict[tuple, list[str]] = {}  # (w, axis, scale) -> nodes
    versions: dict[tuple, set] = {}  # (w, axis) -> the scales it is quantized with
    for node, _, w, axis, _, need in uses:
        readers.setdefault((w, axis, need.tobytes()), []).append(node.name)
        versions.setdefault((w, axis), set()).add(need.tobytes())

    done: dict[tuple, tuple[str, np.ndarray]] = {}
    for i, (node, idx, w, axis, bias, scale) in enumerate(uses):
        base_q, base_scale, base_clip = quantize_weight(graph, w, axis)
        raised = scale > base_scale
        key = (w, axis, scale.tobytes())
        if key not in done:
            q, _, clip_rec = _adjusted_weight(graph, w, axis, scale) if raised.any() else \
                (base_q, base_scale, base_clip)
            if clip_rec is not None:
                build.clipped.append(ClipRecord(**{**asdict(clip_rec), "node": node.name}))
            done[key] = (rw.dequantized(w, q, scale, np.zeros(scale.shape, np.int8), axis), q)
            build.weights += 1
            rw.rewire(node.name, w, done[key][0], idx)
        else:  # another reader of the same int8 weight: a DQ of its own (Rewrite.dq_copy)
            rw.rewire(node.name, w, rw.dq_copy(done[key][0]), idx)
        if bias is None:
            continue
        bidx, b, bv = bias
        x = node.inputs[0]
        if raised.any():
            red = None if axis is None else tuple(i for i in range(base_q.ndim) if i != axis)
            zero_now = ~np.any(done[key][1] != 0, axis=red)
            zero_before = ~np.any(base_q != 0, axis=red)
            worst = float((scale.astype(np.float64) / base_scale.astype(np.float64)).max())
            build.bias_adjusted.append(BiasAdjustment(
                node=node.name, op_type=node.op_type, weight=w, bias=b, input=x,
                input_scale=float(act_qp[x].scale), channels=int(np.count_nonzero(raised)),
                of_channels=int(scale.size), max_ratio=worst, bits_lost=math.log2(worst),
                zeroed=int(np.count_nonzero(zero_now & ~zero_before & raised)), per_tensor=scale.ndim == 0,
                shared_with=tuple(n for n in dict.fromkeys(readers[key]) if n != node.name),
                copied=len(versions[(w, axis)]) > 1))
        bscale = (np.float32(act_qp[x].scale) * scale).astype(np.float32)
        bq, rec = memoized(graph, ("bias", b, node.name, bscale.tobytes(), bscale.shape),
                        lambda bv=bv, bscale=bscale, b=b, node=node: int32_bias(bv, bscale, b, node.name))
        if rec is not None:
            build.clipped.append(rec)
        out = rw.dequantized(b, bq, bscale, np.zeros(bscale.shape, np.int32),
                             0 if bscale.ndim == 1 and per_channel else None)
        rw.rewire(node.name, b, out, bidx)
        build.biases += 1
        if biases is not None:
            biases.append((i, *rw.read_by(out)[:2]))
