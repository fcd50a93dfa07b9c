"""Model outputs: which tensors feed them, how a Concat output splits into slices, and which
output Concats stay in float (DESIGN §3 "Fidelity", "Slices").

One owner for the rule "this tensor reaches a model output through pass-through ops": the
Concat analysis, auto-share, the exporter and the fidelity check all ask here.

A slice is one Concat input's part of a model output.  It is found by labelling each element
of the Concat's output with the input it came from and replaying the value-preserving ops
between the Concat and the output (Reshape, Transpose, ...) on those labels, so a Concat
followed by a Reshape or a Transpose still splits correctly.  Nothing here knows a model.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

import numpy as np
import numpy.typing as npt

from ..model.ops import passes_through
from ..model.scales import Scheme, bits_lost
from ..base.vocab import Precision

if TYPE_CHECKING:
    from ..model.graphitems import Node
    from ..model.graphmodel import Graph
    from ..model.qdq import QdqInfo

__all__ = ["OutputMode", "OutputSlice", "output_slices", "output_reached", "output_concat", "pass_through_walk",
           "float_output_tensors", "FloatOutput", "export_float_tensors",
           "export_float_of"]

# Ops that only move or select values, which the slice labels can follow: every output element
# comes from exactly one input element.
_RELABEL = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Identity", "Split", "Slice"}
_MAX_LABELS = 64 << 20  # elements: past this an output is reported whole, not per slice


class MemberRanges(Protocol):
    """What the output rule reads of a domain map (a :class:`~qtquant.quant.domains.DomainMap`,
    whose module imports this one)."""

    @property
    def of(self) -> Mapping[str, int]: ...

    @property
    def member_range(self) -> Mapping[str, tuple[float, float]]: ...

    @property
    def scheme(self) -> Scheme: ...


class OutputOptions(Protocol):
    """What the output rule reads of a session's options (:class:`~qtquant.quant.state.QuantOptions`)."""

    @property
    def float_output_max_bits_lost(self) -> float: ...

    @property
    def precision(self) -> Mapping[str, Precision]: ...

    @property
    def output_mode(self) -> OutputMode: ...


class OutputMode(Enum):
    """How the exporter treats model outputs."""

    AUTO = "auto"  # quantize, except output Concats whose members could not share one scale
    QUANTIZE = "quantize"  # --quantize-outputs: full int8, whatever it costs
    FLOAT = "float"  # --float-outputs: no Q/DQ on any model output


@dataclass(frozen=True)
class OutputSlice:
    output: str
    source: str  # the Concat input this part of the output comes from
    index: int  # the Concat input index
    label: str  # "output0[4:22]"
    box: tuple[slice, ...] | None  # numpy index (tuple of slices) when the part is a box of the output
    flat: npt.NDArray[np.intp] | None = None  # flat element indices otherwise

    def take(self, arr: npt.ArrayLike) -> npt.NDArray[Any]:
        a = np.asarray(arr)
        return a[self.box] if self.box is not None else a.reshape(-1)[self.flat]


def _relabels(node: Node, graph: Graph) -> bool:
    return node.op_type in _RELABEL and passes_through(node, graph)


def output_concat(graph: Graph, output: str) -> tuple[Node | None, list[tuple[Node, int]]]:
    """(Concat node, [(node, output index) from the Concat to the output]) or (None, [])."""
    chain: list[tuple[Node, int]] = []
    t = output
    seen = set()
    while t not in seen:
        seen.add(t)
        p = graph.producer(t)
        if p is None:
            return None, []
        if p.op_type == "Concat":
            return p, chain[::-1]
        if not _relabels(p, graph) or not p.inputs:
            return None, []
        chain.append((p, p.outputs.index(t)))
        t = p.inputs[0]
    return None, []


def pass_through_walk(graph: Graph, starts: Iterable[str], *, upstream: bool = False) -> list[str]:
    """``starts`` and every tensor they reach through pass-through ops, in the order a depth-first
    walk meets them.  Downstream: a consumer that passes its first input (``t``) through leads to
    its outputs; upstream: a pass-through producer leads back to its first input (the tensor whose
    scale it keeps).  The one walk behind output_reached, the float closure and Share's feeders."""
    stack, seen = list(starts)[::-1], dict[str, None]()
    while stack:
        t = stack.pop()
        if t in seen:
            continue
        seen[t] = None
        if upstream:
            p = graph.producer(t)
            if p is not None and passes_through(p, graph) and p.inputs and p.inputs[0] in graph.tensors:
                stack.append(p.inputs[0])
            continue
        for c in graph.consumers(t):
            if c.inputs and c.inputs[0] == t and passes_through(c, graph):
                stack.extend(o for o in c.outputs if o)
    return list(seen)


def output_reached(graph: Graph, tensor: str) -> str | None:
    """The model output ``tensor`` is, or reaches through pass-through ops only; else None."""
    outputs = set(graph.outputs)
    return next((t for t in pass_through_walk(graph, [tensor]) if t in outputs), None)


def _shape(graph: Graph, t: str) -> tuple[int, ...] | None:
    s = graph.tensors[t].shape if t in graph.tensors else None
    if not s or any(not isinstance(d, int) or d <= 0 for d in s):
        return None
    return tuple(int(d) for d in s if d is not None)  # (none is None here)


def _ints(graph: Graph, node: Node, idx: int, attr: str) -> list[int] | None:
    if len(node.inputs) > idx and node.inputs[idx]:
        v = graph.constant_value(node.inputs[idx])
        return None if v is None else [int(x) for x in np.asarray(v).ravel()]
    a = node.attrs.get(attr)
    return None if a is None else [int(x) for x in a]


Labels: TypeAlias = "npt.NDArray[np.int32]"


def _replay(labels: Labels, node: Node, k: int, graph: Graph) -> Labels | None:
    out = _shape(graph, node.outputs[k])
    if node.op_type == "Split":
        axis = int(node.attrs.get("axis", 0)) % labels.ndim
        sizes = _ints(graph, node, 1, "split")
        if sizes is None:
            n = len(node.outputs)
            sizes = [labels.shape[axis] // n] * n
        if sum(sizes) != labels.shape[axis]:
            return None
        part: Labels = np.split(labels, np.cumsum(sizes)[:-1], axis=axis)[k]
        return part
    if node.op_type == "Slice":
        starts, ends = _ints(graph, node, 1, "starts"), _ints(graph, node, 2, "ends")
        if starts is None or ends is None:
            return None
        axes = _ints(graph, node, 3, "axes") or list(range(len(starts)))
        steps = _ints(graph, node, 4, "steps") or [1] * len(starts)
        index = [slice(None)] * labels.ndim
        for a, b, e, st in zip(axes, starts, ends, steps):
            index[a % labels.ndim] = slice(b, e, st)
        res = labels[tuple(index)]
        return res if out is None or res.shape == out else None
    if node.op_type == "Transpose":
        perm = node.attrs.get("perm")
        res = np.transpose(labels, perm if perm else None)
        return res if out is None or res.shape == out else None
    if out is None or math.prod(out) != labels.size:
        return None
    return labels.reshape(out)


def _label(output: str, idx: npt.NDArray[np.intp], shape: tuple[int, ...]) -> tuple[str, tuple[slice, ...] | None]:
    """The slice's name and numpy index when the elements form a box, else (name, None)."""
    lo, hi = idx.min(axis=1), idx.max(axis=1) + 1
    if int(np.prod(hi - lo)) != idx.shape[1]:
        return "", None
    box = tuple(slice(int(a), int(b)) for a, b in zip(lo, hi))
    parts = [":" if (s.start == 0 and s.stop == n) else f"{s.start}:{s.stop}" for s, n in zip(box, shape)]
    while parts and shape[len(shape) - len(parts)] == 1 and parts[0] == ":":  # leading batch dims
        parts.pop(0)
    while parts and parts[-1] == ":":
        parts.pop()
    return f"{output}[{', '.join(parts)}]", box


def output_slices(graph: Graph) -> dict[str, list[OutputSlice]]:
    """Per model output that is a Concat (directly or through relabelling ops): its slices."""
    res: dict[str, list[OutputSlice]] = {}
    for o in graph.outputs:
        cat, chain = output_concat(graph, o)
        if cat is None:
            continue
        cshape = _shape(graph, cat.outputs[0])
        ins = [(i, t) for i, t in enumerate(cat.inputs) if t]
        if cshape is None or len(ins) < 2 or math.prod(cshape) > _MAX_LABELS:
            continue
        axis = int(cat.attrs.get("axis", 0)) % len(cshape)
        shapes = [_shape(graph, t) for _, t in ins]
        sizes = [s[axis] for s in shapes if s is not None]
        if len(sizes) < len(shapes) or sum(sizes) != cshape[axis]:
            continue
        view = [1] * len(cshape)
        view[axis] = -1
        replayed: Labels | None = np.broadcast_to(
            np.repeat(np.arange(len(ins), dtype=np.int32), sizes).reshape(view), cshape).copy()
        for node, k in chain:
            if replayed is None:
                break
            replayed = _replay(replayed, node, k, graph)
        if replayed is None:
            continue
        labels = replayed
        if len(np.unique(labels)) < 2:
            continue  # the output is one Concat input's part: it is its own single slice
        slices = []
        for k, (i, t) in enumerate(ins):
            idx = np.array(np.nonzero(labels == k))
            if idx.size == 0:
                continue
            name, box = _label(o, idx, labels.shape)
            if box is None:
                slices.append(OutputSlice(o, t, i, f"{o}{{input {i}: {t}}}", None,
                                          np.flatnonzero(labels == k)))
            else:
                slices.append(OutputSlice(o, t, i, name, box))
        res[o] = slices
    return res


@dataclass(frozen=True)
class FloatOutput:
    """An output Concat the export leaves in float, and why."""

    concat: str
    output: str
    tensors: tuple[str, ...]  # the Concat output and the relabelled tensors up to the model output
    worst_member: str
    worst_bits: float

    def text(self) -> str:
        return (f"{self.concat} feeds model output {self.output!r}: one int8 scale would cost "
                f"{self.worst_member!r} {self.worst_bits:.1f} bits, so the output stays in float and its "
                f"inputs keep their own scales (--quantize-outputs forces int8)")


def _float_closure(graph: Graph, tensor: str) -> set[str] | None:
    """``tensor`` and what it passes through to, when every path ends at a model output
    (else None: a quantized op still reads it, and leaving it float would move that op off int8)."""
    outputs = set(graph.outputs)
    res = pass_through_walk(graph, [tensor])
    for t in res:
        cons = graph.consumers(t)
        if not cons and t not in outputs:
            return None
        if not all(c.inputs and c.inputs[0] == t and passes_through(c, graph) for c in cons):
            return None
    return set(res)


def float_output_tensors(graph: Graph, dm: MemberRanges, mode: OutputMode, max_bits_lost: float
                         ) -> tuple[frozenset[str], list[FloatOutput]]:
    """The activations the export leaves in float under ``mode``, with the reasons.

    Under AUTO a model-output Concat whose members would lose more than ``max_bits_lost`` bits
    on one shared scale keeps its inputs' own scales; its output (the model output) stays float.
    """
    if mode is OutputMode.FLOAT:
        return frozenset(o for o in graph.outputs if o in dm.of), []
    if mode is OutputMode.QUANTIZE:
        return frozenset(), []
    keep: set[str] = set()
    why: list[FloatOutput] = []
    done: set[str] = set()
    mr = dm.member_range
    for o in graph.outputs:
        cat, chain = output_concat(graph, o)
        if cat is None:
            continue
        members = [t for t in cat.inputs if t and t in mr] + [cat.outputs[0]]
        rs = [mr[t] for t in members if t in mr]
        if len(rs) < 2:
            continue
        merged = (min(r[0] for r in rs), max(r[1] for r in rs))
        worst, who = max(((bits_lost(mr[t], merged, dm.scheme), t) for t in members if t in mr),
                         default=(0.0, None))
        if who is None or worst <= max_bits_lost:
            continue
        tensors = _float_closure(graph, cat.outputs[0])
        if tensors is None or cat.name in done:
            continue
        done.add(cat.name)
        keep.update(tensors)
        why.append(FloatOutput(cat.name, o, tuple(sorted(tensors)), who, worst))
    return frozenset(keep), why


def export_float_tensors(graph: Graph, dm: MemberRanges, max_bits_lost: float,
                         precision: Mapping[str, Precision] | None = None,
                         mode: OutputMode = OutputMode.AUTO) -> frozenset[str]:
    """Every activation the export leaves in float: the model-output tensors
    :func:`float_output_tensors` keeps under ``mode`` and the tensors ``precision`` sets to float.

    The one rule the Concat analysis (a Concat whose output is one rescales nothing: its inputs
    keep their own scales), the simulator (it prices them in float on the CPU) and the export
    (no Q/DQ on them) follow."""
    keep, _ = float_output_tensors(graph, dm, mode, max_bits_lost)
    if precision:
        keep = keep | {t for t, p in precision.items() if p == Precision.FLOAT}
    return frozenset(keep)


def export_float_of(graph: Graph, options: OutputOptions, qdq: QdqInfo | None, dm: MemberRanges,
                    mode: OutputMode | None = None) -> frozenset[str]:
    """:func:`export_float_tensors` for a session's (or snapshot's) graph, options and QDQ file
    over any of its domain maps ``dm`` (groups do not change a tensor's own range), under ``mode``
    or else the options' own output mode.  A QDQ file's scales are analysed as the file has
    them: nothing."""
    if qdq is not None:
        return frozenset()
    mode = options.output_mode if mode is None else mode
    return export_float_tensors(graph, dm, options.float_output_max_bits_lost, options.precision, mode)
