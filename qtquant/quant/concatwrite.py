"""Which Concat inputs their producers write at the Concat's output scale
(:attr:`~qtquant.base.vocab.ConcatScaleRule.PRODUCERS_WRITE`, the RDK X5 compiler's rule).

The eight RDK X5 compile logs (docs/perf-model.md, "The Concat rule") show hb_mapper keeping each
Concat output's own calibrated threshold and requantizing an input only when it cannot be made
at that threshold.  An input can be made at it when

- its producer computes it (a Conv, a lookup-table activation, an element-wise Add...), so the
  producer's own requantization can target the Concat's threshold at no cost; an op that only
  moves values (Split, Slice, Resize, MaxPool, Reshape...; :func:`qtquant.model.ops.passes_through`)
  keeps its input's scale, a Concat keeps its own, and a graph input is the preprocessor's; and
- nothing else computes from it: its other readers, if any, only move values (they then carry
  the Concat's threshold on, as the YOLO heads' Resize and the SPPF MaxPools do).

:func:`written_inputs` is that test, the one place it is spelt; the domain map gives those
inputs the output's scale (:func:`qtquant.quant.domains.build_domains`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..model.ops import passes_through
from ..base.vocab import TensorKind

if TYPE_CHECKING:
    from ..model.graphitems import Node
    from ..model.graphmodel import Graph

__all__ = ["written_inputs"]


def written_inputs(graph: Graph, node: Node) -> list[str]:
    """The inputs of Concat ``node`` (each once, in input order) that their producers can write at
    the Concat's output scale: quantized activations made by a computing node whose other
    readers only move values."""
    found = []
    for t in dict.fromkeys(node.inputs):
        if not t or t not in graph.tensors or graph.tensors[t].kind == TensorKind.WEIGHT or not graph.is_quantized(t):
            continue
        p = graph.producer(t)
        if p is None or p.op_type == "Concat" or passes_through(p, graph):
            continue
        if all(c.name == node.name or passes_through(c, graph) for c in graph.consumers(t)):
            found.append(t)
    return found
