"""Editing the ONNX graph a QDQ export is built in: fresh names, rewired inputs, the nodes and
initializers the export adds, and the float originals it leaves unread."""

from __future__ import annotations

import onnx
from onnx import helper, numpy_helper

__all__ = ["Rewrite", "prune"]


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


def prune(model) -> None:
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


class Rewrite:
    """The model a build rewrites, and the nodes and initializers it adds."""

    def __init__(self, model: onnx.ModelProto):
        self.model = model
        self.names = _Names(model)
        self.nodes = {n.name: n for n in model.graph.node}
        self.inits: list[onnx.TensorProto] = []
        self.head: list[onnx.NodeProto] = []  # DQ of weights/constants and Q/DQ of model inputs
        self.after: dict[str, list[onnx.NodeProto]] = {}  # producer -> the Q/DQ that follow it

    def fresh(self, base: str) -> str:
        return self.names.fresh(base)

    def rewire(self, consumer: str, old: str, new: str, index: int | None = None) -> None:
        pn = self.nodes[consumer]
        for k, i in enumerate(pn.input):
            if i == old and (index is None or k == index):
                pn.input[k] = new

    def add_init(self, array, name: str) -> str:
        self.inits.append(numpy_helper.from_array(array, name))
        return name

    def dequantized(self, base: str, q, scale, zero_point, axis: int | None = None) -> str:
        """``q`` with a scale and zero point of its own behind a DequantizeLinear; the float name it makes."""
        qn, sn, zn = self.fresh(f"{base}_quantized"), self.fresh(f"{base}_scale"), self.fresh(f"{base}_zero_point")
        out = self.fresh(f"{base}_dequantized")
        for arr, name in ((q, qn), (scale, sn), (zero_point, zn)):
            self.add_init(arr, name)
        attrs = {"axis": axis} if axis is not None else {}
        self.head.append(helper.make_node("DequantizeLinear", [qn, sn, zn], [out],
                                          name=self.fresh(f"{base}_DequantizeLinear"), **attrs))
        return out

    def assemble(self) -> None:
        """New heads first, each Q/DQ right after its producer; then drop what nothing reads."""
        g = self.model.graph
        order = list(g.node)
        del g.node[:]
        g.node.extend(self.head)
        for n in order:
            g.node.append(n)
            g.node.extend(self.after.get(n.name, ()))
        g.initializer.extend(self.inits)
        prune(self.model)
