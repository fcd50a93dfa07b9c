"""Cutting a model at chosen tensors: the subgraph that ends there (``--cut``, the open dialog's cut field)."""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterable

import onnx

from ..base.errors import ModelError
from .nodetable import nested_nodes

__all__ = ["parse_cut", "cut_model", "check_cut"]


def parse_cut(cut: str | Iterable[str] | None) -> tuple[str, ...]:
    """``--cut`` text (``a,b``), or a list of names, as a tuple of tensor names (order kept, no repeats)."""
    if not cut:
        return ()
    parts = cut.split(",") if isinstance(cut, str) else [p for c in cut for p in str(c).split(",")]
    return tuple(dict.fromkeys(p.strip() for p in parts if p.strip()))


def _subgraph_names(node: onnx.NodeProto) -> set[str]:
    """Names a node's subgraphs (If/Loop/Scan bodies) read: outer-scope values it needs too."""
    return {i for n in nested_nodes([node]) for i in n.input if i}


def check_cut(model: onnx.ModelProto, cut: str | Iterable[str] | None, producer: Collection[str] | None = None) -> None:
    """A one-line :class:`ModelError` unless every name in ``cut`` is a tensor ``model`` computes
    or reads (not a weight), naming a close match if any: what :func:`cut_model` would refuse,
    asked without cutting (the open dialog checks its field so before anything is remembered)."""
    names = parse_cut(cut)
    if not names:
        return
    g = model.graph
    if producer is None:
        producer = {o for n in g.node for o in n.output if o}
    known = set(producer) | {i.name for i in g.input}
    weights = {t.name for t in g.initializer}
    for t in names:
        if t in known and t not in weights:
            continue
        if t in weights:
            raise ModelError(f"cannot cut at {t!r}: it is a weight of the model, not a tensor it computes")
        close = difflib.get_close_matches(t, sorted(known - weights), n=1, cutoff=0.6)
        raise ModelError(f"cannot cut at {t!r}: the model has no tensor of that name"
                         + (f" (did you mean {close[0]!r}?)" if close else ""))


def cut_model(model: onnx.ModelProto, cut: str | Iterable[str] | None) -> None:
    """Cut ``model`` in place to the subgraph that ends at the tensors ``cut``, as
    ``onnx.utils.extract_model`` does: the outputs become ``cut``, the inputs stay, nodes
    (and initializers) nothing in ``cut`` needs are dropped.  A name that is not a tensor the
    graph computes or reads is a one-line :class:`ModelError`, naming a close match if any."""
    names = parse_cut(cut)
    if not names:
        return
    g = model.graph
    producer = {o: n for n in g.node for o in n.output if o}
    check_cut(model, names, producer)
    needed = set(names)
    kept: set[int] = set()
    stack = list(names)
    while stack:
        n = producer.get(stack.pop())
        if n is None or id(n) in kept:
            continue
        kept.add(id(n))
        for i in [*n.input, *_subgraph_names(n)]:
            if i and i not in needed:
                needed.add(i)
                stack.append(i)
    vi = {v.name: v for v in [*g.value_info, *g.input, *g.output]}
    outs = []
    for t in names:
        o = onnx.ValueInfoProto()
        if t in vi:
            o.CopyFrom(vi[t])
        else:
            o.name = t  # typed by shape inference
        outs.append(o)
    nodes = [n for n in g.node if id(n) in kept]
    # Initializers listed as inputs (old-style models) stay: the inputs are unchanged.
    inputs = {i.name for i in g.input}
    inits = [t for t in g.initializer if t.name in needed or t.name in inputs]
    infos = [v for v in g.value_info if v.name in needed and v.name not in set(names)]
    del g.node[:], g.initializer[:], g.value_info[:], g.output[:]
    g.node.extend(nodes)
    g.initializer.extend(inits)
    g.value_info.extend(infos)
    g.output.extend(outs)
