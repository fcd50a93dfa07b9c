"""A graph's node protos read once into plain Python lists, and the names the graph gives them.

Each read of a protobuf field from Python is a call into upb that makes a new Python object
(``list(node.input)``: about a microsecond a node).  Opening a model needs every node's name,
op type, inputs and outputs several times: the UTF-8 check, QDQ detection, the topological
order and the :class:`~qtquant.graph.Graph` itself.  :class:`NodeTable` reads them once and
those steps share it (a 10,000-node graph: tens of milliseconds fewer per open).
"""

from __future__ import annotations

__all__ = ["NodeTable", "node_names"]


class NodeTable:
    """Names, op types, domains, inputs, outputs and attribute containers of ``graph_proto.node``,
    position by position."""

    __slots__ = ("names", "ops", "domains", "inputs", "outputs", "attributes")

    def __init__(self, graph_proto=None):
        if graph_proto is None:
            self.names, self.ops, self.domains, self.inputs, self.outputs, self.attributes = [], [], [], [], [], []
            return
        nodes = list(graph_proto.node)
        self.names = [n.name for n in nodes]
        self.ops = [n.op_type for n in nodes]
        self.domains = [n.domain for n in nodes]
        # A full slice is the cheapest way to a list under upb (a third of ``list(n.input)``).
        self.inputs = [n.input[:] for n in nodes]
        self.outputs = [n.output[:] for n in nodes]
        self.attributes = [n.attribute for n in nodes]  # the containers (empty for most nodes)

    def __len__(self) -> int:
        return len(self.ops)

    def reordered(self, order: list[int]) -> NodeTable:
        """The table of the nodes in ``order`` (positions in this table)."""
        t = NodeTable()
        t.names = [self.names[i] for i in order]
        t.ops = [self.ops[i] for i in order]
        t.domains = [self.domains[i] for i in order]
        t.inputs = [self.inputs[i] for i in order]
        t.outputs = [self.outputs[i] for i in order]
        t.attributes = [self.attributes[i] for i in order]
        return t


def node_names(names, ops) -> list[str]:
    """The names the graph uses for nodes in topological order: the file's name, or
    ``<op>_<position>`` (with ``_`` appended until unique) when it is empty or taken already.
    The one rule, shared by the loaded graph and the early structure drawn from the file."""
    out = list(names)
    if "" not in names and len(set(names)) == len(names):
        return out  # the common case: every node named, no repeats
    seen: set[str] = set()
    for idx, name in enumerate(names):
        if not name or name in seen:
            name = f"{ops[idx]}_{idx}"
            while name in seen:
                name += "_"
            out[idx] = name
        seen.add(name)
    return out
