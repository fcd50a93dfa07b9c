"""Which nodes a march's compiler runs on the board's CPU instead of the BPU: its operator list.

hb_mapper places a node whose op its BPU does not run on the CPU by itself, in float, with a hand-off
on each side (D-Robotics' X5 operator list marks such ops "CPU计算").  qtquant prices such a node as it
prices a node the user keeps in float (perf/precision.py) and says why, so the estimate is the one of
the model the compiler will build.  A profile states the rule: ``cpu_ops``, the op types its BPU does
not run; ``softmax_bpu_rank``, the one input rank at which it runs a Softmax on the BPU (the X5
list: "for onnx::softmax, when its input is 4-D and axis=3; for pytorch::softmax, axis=1, 2 or 3");
and ``bpu_limits``, the set of shape and attribute limits of the ops it does run (perf/bpu_limits.py:
a Conv's kernel at most 31×31, a ReduceMean over one axis or H and W, a nearest Resize by powers of 2, ...).

A placed node is no choice of the user's: the precision map (quant/precision.py) and the export are not
changed by it; only the price is.
"""

from __future__ import annotations

from ..base.errors import BadInputError
from ..base.vocab import Precision
from ..model.derived import Slot
from .bpu_limits import off_bpu
from .macs import shape_of

__all__ = ["cpu_placed", "placement_map"]


def _softmax_off_bpu(node, graph, rank: int) -> str:
    """Why the BPU does not run this Softmax ("" when it does).  The X5 list: "for onnx::softmax, a 4-D
    input and axis=3; for pytorch::softmax, a 4-D input and axis=1, 2 or 3": before opset 13 an ONNX
    Softmax flattens every axis from ``axis`` on, so only the last one is a per-axis Softmax; from 13 on
    it is PyTorch's, over one axis."""
    x = shape_of(graph, node.inputs[0]) if node.inputs else None
    if x is None:
        return ""  # shape unknown: left where it is priced
    opset = getattr(graph, "opset", 13) or 13
    axis = node.attrs.get("axis")
    axis = int(axis) if axis is not None else (-1 if opset >= 13 else 1)
    if axis < 0:
        axis += len(x)
    axes = range(1, rank) if opset >= 13 else (rank - 1,)
    if len(x) == rank and axis in axes:
        return ""
    over = "over its last axis" if opset < 13 else "over one axis but the batch"
    return f"a Softmax runs on the BPU only on a {rank}-D input {over} (opset {opset}); this one is " \
           f"{len(x)}-D over axis {axis}"


# Per graph, by (cpu_ops, softmax_bpu_rank, bpu_limits, march name): the GUI re-prices after every edit.
_PLACED: Slot[dict] = Slot("perf placement", dict)


def _placement(graph, march) -> tuple[dict[str, str], dict[str, Precision]]:
    """(node -> why, its quantized outputs -> float), computed once per graph and rule."""
    ops, rank, limits = march.cpu_ops, march.softmax_bpu_rank, march.bpu_limits
    if not ops and not rank and not limits:
        return {}, {}
    cache = graph.derived.get(_PLACED) if hasattr(graph, "derived") else {}
    key = (ops, rank, limits, march.name)
    got = cache.get(key)
    if got is None:
        nodes = _placed(graph, ops, rank, limits, march.name)
        got = cache[key] = (nodes, _as_float(graph, nodes))
    return got


def cpu_placed(graph, march) -> dict[str, str]:
    """node -> why, for every node of ``graph`` that ``march``'s compiler runs on its CPU (nodes that
    only compute shapes or fold to constants are not run at all, so they are not listed)."""
    return _placement(graph, march)[0]


def placement_map(graph, march) -> dict[str, Precision]:
    """The outputs of :func:`cpu_placed`'s nodes as float: the precision map that prices them."""
    return _placement(graph, march)[1]


def _placed(graph, ops, rank, limits, march_name) -> dict[str, str]:
    out: dict[str, str] = {}
    for node in graph.nodes.values():
        if node.op_type in ops:
            why = f"{node.op_type} is not a BPU op on {march_name}"
        elif node.op_type == "Softmax" and rank:
            why = _softmax_off_bpu(node, graph, rank)
        elif limits:
            why = off_bpu(node, graph, limits)
        else:
            continue
        if why and any(graph.is_quantized(o) for o in node.outputs if o):
            out[node.name] = why
    return out


def _as_float(graph, nodes) -> dict[str, Precision]:
    from ..quant.precision import resolve_name

    tensors: dict[str, Precision] = {}
    for name in nodes:
        try:
            tensors.update((t, Precision.FLOAT) for t in resolve_name(graph, name))
        except BadInputError:
            continue  # nothing quantized to price
    return tensors
