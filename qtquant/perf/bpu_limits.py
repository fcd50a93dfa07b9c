"""The limits within which a march's BPU runs the ops it supports.

A profile's ``cpu_ops`` names the op types its BPU never runs; beyond them, an operator list gives each
BPU op limits on its shapes and attributes, and hb_mapper runs a node outside them on the CPU.  A profile
names its set of limits (``bpu_limits``); :func:`off_bpu` says why a node breaks one ("" when it keeps
them all), and perf/placement.py places such a node on the CPU with that reason.

One set so far, ``rdk-x5``: D-Robotics' RDK X5 ONNX operator list (rdk_doc,
docs/07_Advanced_development/04_toolchain_development/intermediate/supported_op_list.md, section
"RDK X5支持的ONNX算子列表", column "X5 BPU支持约束").  Only limits the graph's static shapes and
attributes decide are checked; a node whose shapes are unknown is left on the BPU.  The limits on
broadcasting (which dimensions two inputs may broadcast together) are not checked.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from .context import is_activation
from .macs import conv_dims, numel, shape_of

__all__ = ["LIMIT_SETS", "off_bpu"]

Check = Callable[[object, object], str]  # (node, graph) -> why it breaks a limit, or ""
_X5: dict[str, Check] = {}


def _x5(*ops: str):
    def register(fn: Check) -> Check:
        for op in ops:
            _X5[op] = fn
        return fn
    return register


def _ints(node, name: str) -> list[int]:
    v = node.attrs.get(name)
    return [int(x) for x in v] if isinstance(v, (list, tuple, np.ndarray)) else []


def _axis(node, rank: int, default: int = 0) -> int:
    a = node.attrs.get("axis")
    a = int(a) if a is not None else default
    return a + rank if a < 0 else a


def _over(what: str, values, limit: int) -> str:
    big = [v for v in values if v > limit]
    return f"{what} at most {limit} on the BPU; this one has {max(big)}" if big else ""


@_x5("Conv")
def _conv(node, graph) -> str:
    d = conv_dims(node, graph)
    if d is None or len(d[4]) != 2:
        return ""
    _, cin, cout, group, (kh, kw), *_ = d
    if kh > 31 or kw > 31:
        return f"a Conv's kernel is at most 31×31 on the BPU; this one is {kh}×{kw}"
    per_group = cin // group if group else cin
    if per_group * kh * kw > 32767:
        return (f"a Conv's kernel holds at most 32767 values per output channel (C×H×W) on the BPU; this one "
                f"{per_group}×{kh}×{kw} = {per_group * kh * kw}")
    return (_over("a Conv's channels per group are", (per_group, cout // max(group, 1)), 8192)
            or _over("a Conv's stride is", _ints(node, "strides"), 256)
            or _over("a Conv's dilation is", _ints(node, "dilations"), 16)
            or _over("a Conv's padding is", _ints(node, "pads"), 256))


@_x5("AveragePool")
def _avgpool(node, graph) -> str:
    k = _ints(node, "kernel_shape")
    if len(k) != 2:
        return ""
    if max(k) > 256 or k[0] * k[1] > 8192:
        return f"an AveragePool's window is at most 256 a side and 8192 in all on the BPU; this one is {k[0]}×{k[1]}"
    if k[0] * k[1] == 1:
        return "an AveragePool's window on the BPU is larger than 1×1; this one is 1×1"
    return _over("an AveragePool's stride is", _ints(node, "strides"), 256) \
        or _over("an AveragePool's padding is", _ints(node, "pads"), 255)


@_x5("MaxPool")
def _maxpool(node, graph) -> str:
    if any(d != 1 for d in _ints(node, "dilations")):
        return "a MaxPool on the BPU has no dilation; this one has " + "×".join(map(str, _ints(node, "dilations")))
    return (_over("a MaxPool's window is", _ints(node, "kernel_shape"), 256)
            or _over("a MaxPool's stride is", _ints(node, "strides"), 256)
            or _over("a MaxPool's padding is", _ints(node, "pads"), 256))


@_x5("GlobalMaxPool")
def _gmaxpool(node, graph) -> str:
    x = shape_of(graph, node.inputs[0])
    return _over("a GlobalMaxPool's input is", x[2:], 256) if x is not None and len(x) == 4 else ""


def _reduce_axes(node, graph, rank: int) -> list[int] | None:
    """The axes a Reduce* reduces (attribute, or the second input from opset 18 / ReduceSum 13);
    None when they are given by a tensor the graph does not fix."""
    axes = _ints(node, "axes")
    if not axes and len(node.inputs) > 1 and node.inputs[1]:
        v = graph.constant_value(node.inputs[1])
        if v is None:
            return None
        axes = [int(a) for a in np.asarray(v).ravel()]
    return sorted(a + rank if a < 0 else a for a in axes)


@_x5("ReduceMax", "ReduceMean", "ReduceSum")
def _reduce(node, graph) -> str:
    x = shape_of(graph, node.inputs[0])
    if x is None:
        return ""
    op, rank = node.op_type, len(x)
    if not 2 <= rank <= 5:
        return f"a {op} on the BPU takes a 2-D to 5-D input; this one is {rank}-D"
    if int(node.attrs.get("keepdims", 1)) != 1:
        return f"a {op} on the BPU keeps the reduced axes (keepdims=1); this one drops them"
    axes = _reduce_axes(node, graph, rank)
    if axes is None:
        return ""
    if op == "ReduceMean" and rank == 4 and axes == [2, 3]:
        return ""  # the list: over H and W together
    if len(axes) != 1:
        what = "every axis" if not axes else f"axes {', '.join(map(str, axes))}"
        return f"a {op} on the BPU reduces one named axis (or a ReduceMean H and W together); this one reduces {what}"
    if op == "ReduceMax" and x[axes[0]] > 8192:
        return f"a ReduceMax on the BPU reduces an axis of at most 8192; this one {x[axes[0]]}"
    return ""


@_x5("Concat", "Split")
def _not_batch(node, graph) -> str:
    """The list's "not along N": a Concat that joins whole samples (each input one batch's worth along axis
    0) or a Split that cuts a batch into samples.  After a Transpose axis 0 may be another axis (EdgeNeXt's
    q, k, v split of a 3×1×8×... tensor is not along its batch, the 1)."""
    whole = node.inputs[:1] if node.op_type == "Split" else node.inputs
    shapes = [shape_of(graph, t) for t in whole if t]
    if not shapes or any(s is None or len(s) < 2 for s in shapes) or _axis(node, len(shapes[0])) != 0:
        return ""
    batch = _batch(graph)
    if batch is None or any(s[0] != batch for s in shapes):
        return ""
    what = "joins samples" if node.op_type == "Concat" else "cuts the batch"
    return f"a {node.op_type} on the BPU is along any axis but the batch; this one {what} (axis 0)"


def _batch(graph) -> int | None:
    """The model's batch: the first dimension of its first input with a static shape."""
    for t in graph.inputs:
        s = shape_of(graph, t)
        if s:
            return s[0]
    return None


@_x5("Resize", "Upsample")
def _resize(node, graph) -> str:
    x, y = shape_of(graph, node.inputs[0]), shape_of(graph, node.outputs[0])
    if x is None or y is None:
        return ""
    if len(x) != 4 or tuple(x[:2]) != tuple(y[:2]):
        return f"a {node.op_type} on the BPU scales the H and W of a 4-D input only"
    mode = node.attrs.get("mode", "nearest")
    if mode not in ("nearest", "linear", "bilinear"):
        return f"a {node.op_type} on the BPU is nearest or linear; this one is {mode}"
    if mode == "nearest" and y[2] >= x[2] and y[3] >= x[3]:
        fh, fw = y[2] / x[2], y[3] / x[3]
        if any(f != int(f) or int(f) & (int(f) - 1) for f in (fh, fw)) or fh > fw:
            return (f"a nearest {node.op_type} on the BPU enlarges by powers of 2, H's factor at most W's; this "
                    f"one by {fh:g}×{fw:g}")
    return ""


@_x5("Expand", "Tile")
def _one_axis(node, graph) -> str:
    x, y = shape_of(graph, node.inputs[0]), shape_of(graph, node.outputs[0])
    if x is None or y is None or len(x) != len(y):
        return ""
    differ = sum(a != b for a, b in zip(x, y))
    return f"a {node.op_type} on the BPU changes one axis; this one changes {differ}" if differ > 1 else ""


@_x5("Pow")
def _pow(node, graph) -> str:
    e = shape_of(graph, node.inputs[1]) if len(node.inputs) > 1 else None
    return "a Pow on the BPU raises to a scalar; this one to a tensor" if e is not None and numel(e) > 1 else ""


@_x5("Gather")
def _gather(node, graph) -> str:
    ranks = [len(s) for s in (shape_of(graph, t) for t in (*node.inputs[:2], node.outputs[0])) if s is not None]
    return _over("a Gather's tensors have rank", ranks, 4)


@_x5("DepthToSpace", "SpaceToDepth")
def _blocks(node, graph) -> str:
    b = int(node.attrs.get("blocksize", 2))
    return f"a {node.op_type} on the BPU moves 2×2 blocks; this one {b}×{b}" if b != 2 else ""


@_x5("PRelu")
def _prelu(node, graph) -> str:
    x = shape_of(graph, node.inputs[0])
    return f"a PRelu on the BPU takes a 4-D input; this one is {len(x)}-D" if x is not None and len(x) != 4 else ""


@_x5("Pad")
def _pad(node, graph) -> str:
    mode = node.attrs.get("mode", "constant")
    return f"a Pad on the BPU pads with a constant; this one is {mode}" if mode != "constant" else ""


@_x5("TopK")
def _topk(node, graph) -> str:
    return "a TopK on the BPU is sorted; this one is not" if int(node.attrs.get("sorted", 1)) != 1 else ""


@_x5("MatMul")
def _matmul(node, graph) -> str:
    a, b = (shape_of(graph, t) for t in node.inputs[:2])
    if a is None or b is None or not is_activation(graph, node.inputs[1]):
        return ""  # by constant weights: the compiler makes it a convolution
    if len(a) != len(b):
        return f"a MatMul of two activations on the BPU takes inputs of one rank; these are {len(a)}-D and {len(b)}-D"
    return _over("a MatMul's last two dimensions are", (*a[-2:], *b[-2:]), 8192) \
        or _over("a MatMul's leading dimensions are", (*a[:-2], *b[:-2]), 4096)


LIMIT_SETS: dict[str, dict[str, Check]] = {"rdk-x5": _X5}


def off_bpu(node, graph, limits: str) -> str:
    """Why ``node`` is outside the BPU limits of the set ``limits`` ("" when it is inside, or the set
    says nothing of its op)."""
    check = LIMIT_SETS.get(limits, {}).get(node.op_type)
    return check(node, graph) if check is not None else ""
