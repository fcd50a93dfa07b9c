"""A graph's node protos read once into plain Python lists, the names the graph gives them, and
its value types read in one parse.

Each read of a protobuf field from Python is a call into upb that makes a new Python object
(``list(node.input)``: about a microsecond a node).  Opening a model needs every node's name,
op type, inputs and outputs several times: the UTF-8 check, QDQ detection, the topological
order and the :class:`~qtquant.graph.Graph` itself.  :class:`NodeTable` reads them once and
those steps share it (a 10,000-node graph: tens of milliseconds fewer per open).
"""

from __future__ import annotations

__all__ = ["NodeTable", "node_names", "value_type_bytes"]


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


# -- a graph's value types, read from the serialized model in one parse ---------------------
# ``ValueInfoProto`` is ``{name = 1; type = 2; ...}``: on the wire, the same as a map entry
# ``{key = 1; value = 2}``.  Parsing a serialized model with a schema that declares the graph's
# ``value_info`` (field 13 of GraphProto, field 7 of ModelProto) a ``map<string, bytes>`` gives
# name -> serialized TypeProto in one C-level pass, where reading ``v.name`` and
# ``v.type.SerializeToString()`` value by value from Python costs ~8,000 instructions a value
# (a 10,000-node graph: ~11,700 values, ~95M instructions against ~35M).  Everything else in the
# model is an unknown field to this schema and stays unread.
_LITE_MODEL = None
_MAX_BYTES_PER_VALUE = 4096  # about where the one parse stops paying (see value_type_bytes)


def _lite_model_class():
    global _LITE_MODEL
    if _LITE_MODEL is None:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

        fd = descriptor_pb2.FileDescriptorProto(name="qtquant_value_types.proto", package="qtquant_vt",
                                                syntax="proto2")
        graph = fd.message_type.add(name="Graph")
        entry = graph.nested_type.add(name="ValueInfoEntry")
        entry.options.map_entry = True
        entry.field.add(name="key", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                        label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
        entry.field.add(name="value", number=2, type=descriptor_pb2.FieldDescriptorProto.TYPE_BYTES,
                        label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
        graph.field.add(name="value_info", number=13, type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
                        label=descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED,
                        type_name=".qtquant_vt.Graph.ValueInfoEntry")
        model = fd.message_type.add(name="Model")
        model.field.add(name="graph", number=7, type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
                        label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL, type_name=".qtquant_vt.Graph")
        pool = descriptor_pool.DescriptorPool()
        pool.Add(fd)
        _LITE_MODEL = message_factory.GetMessageClass(pool.FindMessageTypeByName("qtquant_vt.Model"))
    return _LITE_MODEL


def value_type_bytes(model_bytes: bytes, n_values: int) -> dict[str, bytes] | None:
    """name -> serialized TypeProto of each ``value_info`` entry of the serialized model
    ``model_bytes``, whose graph has ``n_values`` of them; None when this fast reading cannot
    stand for reading them one by one: names repeated (a map keeps one; the caller's rule,
    later ones win, is not the map's) or an entry with more than a name and a type (a doc string:
    the parser drops such a map entry), both seen as fewer entries than ``n_values``; or a name
    that is not valid UTF-8 (the message parser hands those back as bytes).  Also None when the
    model holds much more than its types (inline weights): the parser copies every byte it does
    not read, which costs more than reading the few values one by one (yolov8n_320, 12 MB and 332
    values: 1.7 ms against 0.9 ms; the synthetic 10k graph, 0.9 MB and 11,661 values: 8 against 13)."""
    if len(model_bytes) > _MAX_BYTES_PER_VALUE * n_values:
        return None
    try:
        entries = _lite_model_class().FromString(model_bytes).graph.value_info
        if len(entries) != n_values:
            return None
        return dict(entries)
    except Exception:  # noqa: BLE001 - anything unexpected: the caller reads the values one by one
        return None
