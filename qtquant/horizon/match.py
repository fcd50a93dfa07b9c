"""Find a compile log's rows in a model's graph, and what the log then says about its tensors.

:func:`match_compile_log` maps every row of :class:`~qtquant.horizon.log.CompileLog` onto the graph:

- a name printed whole is looked up exactly (a node for a node row, a tensor for an
  ``HzRequantize`` row);
- a name the compiler cut (``...`` and its end) matches the one node / tensor whose name ends
  with that end; two or more such names are *ambiguous* and none is *missing*: both are listed in
  :attr:`LogMatch.unmatched`, never guessed;
- rows the compiler made itself (``HZ_PREPROCESS_FOR_<input>``, the input's preprocess) are
  :attr:`LogMatch.compiler_rows`, not misses.

A log of another model is refused (:class:`~qtquant.base.errors.CompileLogError`): other input names,
another input shape (unless ``any_shape``: the same graph at another size, whose thresholds still
apply by name), or most node names not in the graph.

The thresholds become per-tensor ranges (:attr:`LogMatch.thresholds`): a row's threshold is its
node's first input's (see :mod:`qtquant.horizon.log`), so each tensor takes the threshold its
consumers print; consumers that disagree are :attr:`LogMatch.conflicts` (the first in the log's
order stands).  A tensor's bits come from its producer's DataType (int16 rows).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping, cast

from qtquant.base.errors import CompileLogError, LogShapeMismatch
from qtquant.base.vocab import StrEnum, TensorKind  # (enum.StrEnum is Python 3.11's; 3.10 is supported)
from qtquant.horizon.log import CUT_MARK, CompileLog, LogNode, qmax

__all__ = ["Miss", "MissKind", "TensorThreshold", "ThresholdConflict", "LogMatch", "match_compile_log",
           "PREPROCESS_PREFIX", "MIN_MATCHED_FRACTION", "FEW_MISSES"]

PREPROCESS_PREFIX = "HZ_PREPROCESS_FOR_"
"""The compiler's own preprocess row for each model input."""
FEW_MISSES = 2
"""Up to this many rows not found are listed whatever the fraction (a small model's log)."""
MIN_MATCHED_FRACTION = 0.9
"""Fewer of the log's node rows found in the graph than this: a log of another model (a log of the
model itself misses none but rows the compiler made; YOLOv8n-seg's log on YOLOv8n finds 87%)."""


class MissKind(StrEnum):
    MISSING = "missing"  # no name in the graph ends so
    AMBIGUOUS = "ambiguous"  # several do


@dataclass(frozen=True)
class Miss:
    """A log row not placed in the graph."""

    printed: str
    what: str
    """``node`` or ``requantize``."""
    kind: MissKind
    candidates: tuple[str, ...]
    """The graph names it could be (ambiguous), else empty."""
    line: int

    def describe(self) -> str:
        if self.kind is MissKind.AMBIGUOUS:
            shown = ", ".join(self.candidates[:3]) + (", ..." if len(self.candidates) > 3 else "")
            return f"{self.what} {self.printed!r} (line {self.line}) is ambiguous: {shown}"
        return f"{self.what} {self.printed!r} (line {self.line}) is not in the model"


@dataclass(frozen=True)
class TensorThreshold:
    """The compiler's threshold for one tensor, and its range and scale."""

    tensor: str
    threshold: float
    bits: int
    """8 or 16: the DataType its producer's row prints."""
    node: str
    """The graph node whose row printed it (a consumer reading the tensor as its first input), or
    for an ``inferred`` one the Concat whose output threshold it takes."""
    inferred: bool = False
    """No row prints it: a Concat input the log does not requantize, so on the Concat output's
    threshold (:func:`match_compile_log`'s ``infer``)."""

    @property
    def scale(self) -> float:
        return self.threshold / cast(int, qmax("int16") if self.bits == 16 else qmax("int8"))  # (both have one)

    @property
    def range(self) -> tuple[float, float]:
        """The symmetric range whose scale this is (how a QDQ file's scales are applied)."""
        return -self.threshold, self.threshold


@dataclass(frozen=True)
class ThresholdConflict:
    tensor: str
    kept: TensorThreshold
    other: float
    other_node: str


@dataclass(frozen=True)
class LogMatch:
    """A compile log placed on a graph."""

    log: CompileLog
    nodes: Mapping[str, LogNode]
    """Graph node name -> its row."""
    requantized: tuple[str, ...]
    """The graph tensors the compiler requantizes, in the log's order."""
    requantized_for: Mapping[str, tuple[str, ...]]
    """Graph node -> the tensors requantized in front of it (the rows printed right before its own)."""
    thresholds: Mapping[str, TensorThreshold]
    """Graph tensor -> the compiler's threshold, for every tensor some row gives one."""
    unmatched: tuple[Miss, ...]
    compiler_rows: tuple[str, ...]
    conflicts: tuple[ThresholdConflict, ...]
    shape_differs: bool
    """The log's input shape is not the graph's (accepted with ``any_shape``)."""
    reordered: tuple[str, ...] = ()
    """Graph nodes the log prints out of the graph's order (the compiler moved them): their
    thresholds are not used."""

    @property
    def inferred(self) -> tuple[str, ...]:
        """Tensors whose threshold is inferred, not printed (:class:`TensorThreshold`)."""
        return tuple(t for t, th in self.thresholds.items() if th.inferred)

    @property
    def int16_tensors(self) -> tuple[str, ...]:
        return tuple(t for t, th in self.thresholds.items() if th.bits == 16)

    def ranges(self) -> dict[str, tuple[float, float]]:
        """Tensor -> the compiler's range: what a QDQ file's scales give (``build_domains``' ``fixed``)."""
        return {t: th.range for t, th in self.thresholds.items()}

    def cosine_ranking(self) -> list[tuple[str, LogNode]]:
        """(graph node, row) of every matched row with a cosine, lowest first: where the compiler
        itself sees accuracy go."""
        rows = [(n, r) for n, r in self.nodes.items() if r.cosine is not None]
        return sorted(rows, key=lambda nr: (nr[1].cosine, nr[1].line))


class _Suffixes:
    """Names by their ends, for the cut names (a few dozen a log) to look up."""

    def __init__(self, names):
        self.names = list(names)
        self.exact = set(self.names)

    def find(self, printed: str, cut: bool, end: str) -> tuple[str | None, tuple[str, ...]]:
        if not cut:
            return (printed, ()) if printed in self.exact else (None, ())
        found = tuple(n for n in self.names if n.endswith(end))
        return (found[0], ()) if len(found) == 1 else (None, found)


def _shape_text(shape) -> str:
    return "x".join("?" if d is None else str(d) for d in shape)


def match_compile_log(graph, log: CompileLog, *, any_shape: bool = False, infer: bool = True) -> LogMatch:
    """``log`` placed on ``graph`` (a :class:`~qtquant.model.graphmodel.Graph`); :class:`CompileLogError`
    when it is a log of another model.  ``infer``: a Concat input no row gives a threshold for and
    the log does not requantize enters the Concat on its output's scale, so it takes the output's
    threshold (``inferred``); off, only printed thresholds count (what a reproduction of the
    requantize list from the thresholds alone must use)."""
    label = log.path.rsplit("/", 1)[-1]
    deps = log.deps
    inputs = list(graph.inputs)
    if sorted(deps.input_names) != sorted(inputs):
        raise CompileLogError(f"{label} is a log of a model with inputs {', '.join(deps.input_names)}; "
                              f"this model's are {', '.join(inputs) or 'none'}")
    shape_differs = False
    for name, shape in zip(deps.input_names, deps.input_shapes):
        mine = graph.tensors[name].shape
        if mine is None or tuple(mine) != tuple(shape):
            if not any_shape:
                raise LogShapeMismatch(
                    f"{label}: input {name} is {_shape_text(shape)} in the log but "
                    f"{_shape_text(mine) if mine else 'unknown'} here; open the model at the log's shape "
                    f"(--input-shape {name}={_shape_text(shape)}) or accept thresholds from another shape "
                    "(--compiler-log-any-shape)")
            shape_differs = True
    node_names = _Suffixes(graph.nodes)
    tensor_names = _Suffixes(t for t, v in graph.tensors.items() if v.producer or t in graph.inputs)
    nodes: dict[str, LogNode] = {}
    misses: list[Miss] = []
    compiler_rows: list[str] = []
    preprocess = {PREPROCESS_PREFIX + i for i in inputs}
    for row in log.nodes:
        if row.name in preprocess:
            compiler_rows.append(row.name)
            continue
        found, cands = node_names.find(row.name, row.cut, row.suffix)
        if found is None or found in nodes:
            misses.append(Miss(row.name, "node", MissKind.AMBIGUOUS if cands else MissKind.MISSING, cands, row.line))
        else:
            nodes[found] = row
    made = _compiler_made(graph, nodes, misses)
    compiler_rows += [u.printed for u in misses if u in made]
    misses = [u for u in misses if u not in made]
    placeable = len(log.nodes) - len(compiler_rows)
    if placeable - len(nodes) > FEW_MISSES and len(nodes) < MIN_MATCHED_FRACTION * placeable:
        raise CompileLogError(f"{label}: only {len(nodes)} of the log's {placeable} node names are in this "
                              "model; a log of another model?")
    requantized: list[str] = []
    row_node = {row.line: n for n, row in nodes.items()}
    requantized_for: dict[str, tuple[str, ...]] = {}
    for r in log.requantized:
        found, cands = tensor_names.find(r.tensor, r.cut, r.tensor)
        consumer = row_node.get(r.consumer_line) if r.consumer_line is not None else None
        if found is None and cands and consumer is not None:
            # A cut name several tensors end with: the one its consumer (the row printed after it)
            # reads is the tensor meant -- the log's own structure, not a guess.
            read = [t for t in cands if t in graph.nodes[consumer].inputs]
            found = read[0] if len(read) == 1 else None
        if found is None:
            misses.append(Miss((CUT_MARK if r.cut else "") + r.tensor, "requantize",
                               MissKind.AMBIGUOUS if cands else MissKind.MISSING, cands, r.line))
            continue
        if found not in requantized:
            requantized.append(found)
        if consumer is not None and found in graph.nodes[consumer].inputs:
            requantized_for[consumer] = requantized_for.get(consumer, ()) + (found,)
    reordered = _reordered(graph, nodes)
    thresholds, conflicts = _thresholds(graph, {n: r for n, r in nodes.items() if n not in reordered})
    if infer:
        _infer_concat_inputs(graph, nodes, thresholds, requantized_for, conflicts)
    return LogMatch(log, MappingProxyType(nodes), tuple(requantized), MappingProxyType(requantized_for),
                    MappingProxyType(thresholds), tuple(misses), tuple(compiler_rows), tuple(conflicts),
                    shape_differs, tuple(sorted(reordered, key=lambda n: nodes[n].line)))


def _infer_concat_inputs(graph, nodes, thresholds, requantized_for, conflicts) -> None:
    for c in graph.concat_nodes():
        out = thresholds.get(c.outputs[0]) if c.name in nodes else None
        if out is None or out.inferred:
            continue
        listed = requantized_for.get(c.name, ())
        for t in c.inputs:
            if not t or t in listed or not graph.is_quantized(t) or graph.tensors[t].kind == TensorKind.WEIGHT:
                continue
            kept = thresholds.get(t)
            if kept is None:
                thresholds[t] = TensorThreshold(t, out.threshold, out.bits, c.name, inferred=True)
            elif kept.inferred and abs(kept.threshold - out.threshold) > 1e-6 * max(kept.threshold, out.threshold):
                conflicts.append(ThresholdConflict(t, kept, out.threshold, c.name))


def _scope(name: str) -> str:
    return name.rsplit("/", 1)[0] if "/" in name else ""


def _compiler_made(graph, nodes: dict[str, LogNode], misses: list[Miss]) -> list[Miss]:
    """Missing rows the compiler made itself from a node of the graph, not a sign of another model:

    - ``<node>_<suffix>`` for a node of the graph (``/model.9/linear/Gemm_transpose_output_reshape``,
      the CPU reshape after YOLOv8n-cls's Gemm);
    - rows in the scope of a graph node that no row names: the compiler rewrote that node into
      others (a Softmax into ``ReduceMax``, ``Sub``, ``Exp``, ``ReduceSum``, ``Div_reciprocal``,
      ``Div_mul`` in YOLO11n's, YOLOv10n's and YOLO12n's attention)."""
    unnamed_scopes = {_scope(n) for n in graph.nodes if n not in nodes and "/" in n}
    made = []
    for u in misses:
        if u.kind is not MissKind.MISSING or u.printed.startswith(CUT_MARK):
            continue
        if _scope(u.printed) in unnamed_scopes or any(u.printed.startswith(n + "_") for n in graph.nodes):
            made.append(u)
    return made


def _reordered(graph, nodes: dict[str, LogNode]) -> set[str]:
    """Nodes whose rows the log prints before a row of a node they read from: the compiler moved
    them (YOLO11n's attention scale ``Mul`` comes after the ``MatMul`` it feeds in the ONNX graph,
    and prints the MatMul output's threshold).  Their rows' thresholds describe another tensor than
    their first input in the graph: they are not used."""
    out: set[str] = set()
    for name, row in nodes.items():
        for t in graph.nodes[name].inputs:
            p = graph.producer(t) if t else None
            prow = nodes.get(p.name) if p is not None else None
            if p is not None and prow is not None and prow.line > row.line:
                out.update((name, p.name))
    return out


def _first_input(graph, node) -> str | None:
    """The input a row's threshold describes: the node's first input that is not a constant."""
    for t in node.inputs:
        if t and (t in graph.inputs or graph.tensors.get(t) is not None and graph.tensors[t].producer
                  and graph.is_quantized(t)):
            return t
    return None


def _thresholds(graph, nodes: dict[str, LogNode]) -> tuple[dict[str, TensorThreshold], list[ThresholdConflict]]:
    out: dict[str, TensorThreshold] = {}
    conflicts: list[ThresholdConflict] = []
    for name, row in sorted(nodes.items(), key=lambda nr: nr[1].line):
        if row.threshold is None:
            continue
        t = _first_input(graph, graph.nodes[name])
        if t is None or not graph.is_quantized(t):
            continue
        producer = graph.producer(t)
        prow = nodes.get(producer.name) if producer is not None else None
        bits = 16 if prow is not None and prow.data_type == "int16" else 8
        th = TensorThreshold(t, row.threshold, bits, name)
        kept = out.get(t)
        if kept is None:
            out[t] = th
        elif abs(kept.threshold - row.threshold) > 1e-6 * max(kept.threshold, row.threshold):
            conflicts.append(ThresholdConflict(t, kept, row.threshold, name))
    return out, conflicts
