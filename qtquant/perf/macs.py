"""MAC and byte counting per op (the convention of torchvision, fvcore and thop).

Only multiply-accumulates of Conv, ConvTranspose, MatMul, Gemm (and Einsum, contracted
dimensions) count as MACs; bias adds, BatchNorm, activations and pooling count zero,
which is how the standard figures (ResNet-50 v1.5 = 4.09 GMACs) are quoted.
"""

from __future__ import annotations

import math

__all__ = ["macs_of", "model_macs", "conv_dims", "shape_of", "numel"]


def shape_of(graph, tensor: str):
    """The tensor's static shape tuple, or None when unknown or partly dynamic."""
    t = graph.tensors.get(tensor) if tensor else None
    if t is None:
        return None
    s = t.shape
    if s is None or None in s:
        return None
    return s


def numel(shape) -> int:
    return math.prod(shape) if shape is not None else 0


def _ints(v, n, default):
    if v is None or isinstance(v, str):
        return [default] * n
    v = list(v)
    return v if len(v) == n else [default] * n


def _conv_out_spatial(in_sp, kernel, attrs):
    """Output spatial dims from attributes, for when shape inference left them unknown."""
    n = len(in_sp)
    strides = _ints(attrs.get("strides"), n, 1)
    dil = _ints(attrs.get("dilations"), n, 1)
    pads = attrs.get("pads")
    pads = list(pads) if pads is not None and len(pads) == 2 * n else [0] * (2 * n)
    auto = attrs.get("auto_pad", "NOTSET")
    out = []
    for i in range(n):
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            out.append(-(-in_sp[i] // strides[i]))
        else:
            eff_k = dil[i] * (kernel[i] - 1) + 1
            out.append((in_sp[i] + pads[i] + pads[i + n] - eff_k) // strides[i] + 1)
    return out


def conv_dims(node, graph):
    """(N, Cin, Cout, group, kernel, out_spatial, in_spatial) of a Conv/ConvTranspose, or None."""
    x = shape_of(graph, node.inputs[0])
    w = shape_of(graph, node.inputs[1]) if len(node.inputs) > 1 else None
    if x is None or w is None or len(x) < 3:
        return None
    group = int(node.attrs.get("group", 1) or 1)
    kernel = list(w[2:])
    y = shape_of(graph, node.outputs[0])
    if node.op_type == "ConvTranspose":
        cin, cout = x[1], w[1] * group
    else:
        cin, cout = x[1], w[0]
    if y is not None and len(y) == len(x):
        out_sp = list(y[2:])
    elif node.op_type == "Conv":
        out_sp = _conv_out_spatial(list(x[2:]), kernel, node.attrs)
    else:
        out_sp = None
    return x[0], cin, cout, group, kernel, out_sp, list(x[2:])


def _conv_macs(node, graph) -> int:
    d = conv_dims(node, graph)
    if d is None:
        return 0
    n, cin, cout, group, kernel, out_sp, in_sp = d
    if node.op_type == "ConvTranspose":
        # Every input pixel is scattered through the kernel to Cout/group outputs.
        return n * cin * numel(in_sp) * (cout // group) * numel(kernel)
    if out_sp is None:
        return 0
    # Each output element reads Cin/group channels through the kernel; stride and dilation
    # only enter through the output size.
    return n * cout * numel(out_sp) * (cin // group) * numel(kernel)


def _matmul_macs(node, graph) -> int:
    a = shape_of(graph, node.inputs[0])
    y = shape_of(graph, node.outputs[0])
    if a is None or y is None or not a:
        return 0
    return numel(y) * a[-1]


def _gemm_macs(node, graph) -> int:
    a = shape_of(graph, node.inputs[0])
    y = shape_of(graph, node.outputs[0])
    if a is None or y is None or len(a) != 2:
        return 0
    k = a[0] if int(node.attrs.get("transA", 0) or 0) else a[1]
    return numel(y) * k


def _einsum_macs(node, graph) -> int:
    """Product of all distinct index sizes (output and contracted), for 2-operand einsums."""
    eq = node.attrs.get("equation", "")
    if not isinstance(eq, str) or "->" not in eq or "..." in eq:
        return 0
    lhs, _ = eq.replace(" ", "").split("->")
    terms = lhs.split(",")
    if len(terms) != 2:
        return 0
    sizes = {}
    for term, name in zip(terms, node.inputs):
        s = shape_of(graph, name)
        if s is None or len(s) != len(term):
            return 0
        for ch, dim in zip(term, s):
            sizes[ch] = max(sizes.get(ch, 1), dim)
    return math.prod(sizes.values())


_MACS = {
    "Conv": _conv_macs,
    "ConvTranspose": _conv_macs,
    "MatMul": _matmul_macs,
    "Gemm": _gemm_macs,
    "Einsum": _einsum_macs,
}


def macs_of(node, graph) -> int:
    """Multiply-accumulates of one node (0 for ops that do no matrix arithmetic)."""
    fn = _MACS.get(node.op_type)
    return int(fn(node, graph)) if fn is not None else 0


def model_macs(graph) -> int:
    return sum(macs_of(n, graph) for n in graph.nodes.values() if n.op_type in _MACS)
