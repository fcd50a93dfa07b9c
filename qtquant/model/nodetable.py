"""A graph's node protos read once into plain Python lists, the names the graph gives them, and
its value types read in one parse.

Each read of a protobuf field from Python is a call into upb that makes a new Python object
(``list(node.input)``: about a microsecond a node).  Opening a model needs every node's name,
op type, inputs and outputs several times: the UTF-8 check, QDQ detection, the topological
order and the :class:`~qtquant.model.graph.Graph` itself.  :class:`NodeTable` reads them once and
those steps share it (a 10,000-node graph: tens of milliseconds fewer per open).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from operator import attrgetter, itemgetter, methodcaller
from typing import Any, TypeAlias

import onnx
from onnx import numpy_helper

__all__ = ["NodeTable", "node_names", "value_type_bytes", "graph_value_types", "value_type_keys", "value_types",
           "dims_of", "UNTYPED", "NOT_TENSOR", "attr_value", "int_attribute", "SUBGRAPH_ATTRS", "node_parts",
           "subgraphs", "all_graphs", "nested_nodes", "Shape", "TypedValue"]

Shape: TypeAlias = "tuple[int | None, ...]"
"""A value's dims as shape inference gives them (None: an unknown dim)."""
TypedValue: TypeAlias = "tuple[int, Shape | None, bool]"
"""(element type, shape, whether the shape is unknown in part or whole): see :func:`_typed`."""


_INPUT, _OUTPUT, _FULL = attrgetter("input"), attrgetter("output"), itemgetter(slice(None))


class NodeTable:
    """Names, op types, domains, inputs, outputs and attribute containers of ``graph_proto.node``,
    position by position.

    ``model_bytes``: the serialized model ``graph_proto`` was parsed from; when given (and the
    model is mostly structure, not weights), the names, op types, domains and attribute names
    come from one more parse of those bytes (:func:`_merged_nodes`) instead of node by node."""

    __slots__ = ("names", "ops", "domains", "inputs", "outputs", "attributes", "_attr_names")

    names: list[str]
    ops: list[str]
    domains: list[str]
    inputs: list[list[str]]
    outputs: list[list[str]]
    attributes: list[Any] | None  # each node's attribute container (a protobuf repeated field)

    def __init__(self, graph_proto: onnx.GraphProto | None = None, model_bytes: bytes | None = None):
        self._attr_names: list[str] | None = None
        if graph_proto is None:
            self.names, self.ops, self.domains, self.inputs, self.outputs, self.attributes = [], [], [], [], [], []
            return
        nodes = list(graph_proto.node)
        merged = _merged_nodes(model_bytes, len(nodes)) if model_bytes is not None else None
        holds_values = True
        if merged is None:
            self.names = [n.name for n in nodes]
            self.ops = [n.op_type for n in nodes]
            self.domains = [n.domain for n in nodes]
        else:
            names, ops, domains, self._attr_names, holds_values = merged
            self.names = names if names is not None else [n.name for n in nodes]
            self.ops = ops if ops is not None else [n.op_type for n in nodes]
            self.domains = domains if domains is not None else [n.domain for n in nodes]
        # A full slice is the cheapest way to a list under upb (a third of ``list(n.input)``), and
        # C-level maps take it with no bytecode step per node (10,000 nodes: 7.3 ms -> 6.7).
        self.inputs = list(map(_FULL, map(_INPUT, nodes)))
        self.outputs = list(map(_FULL, map(_OUTPUT, nodes)))
        # The containers (empty for most nodes); None: read from the bytes, and no attribute holds
        # a tensor or a graph, the only reason to walk them (modelcheck._all_tensors).
        if merged is None or holds_values:
            self.attributes = [n.attribute for n in nodes]
        else:
            self.attributes = None

    def __len__(self) -> int:
        return len(self.ops)

    def attribute_names(self) -> list[str]:
        """The name of every attribute of every node (in no particular order)."""
        if self._attr_names is not None:
            return self._attr_names
        return [a.name for attrs in self.attributes or () if attrs
                for a in attrs[:]]  # [:]: see modelcheck._all_tensors

    def read_attribute_names(self) -> list[str] | None:
        """:meth:`attribute_names` when the bytes parse read them already, else None (no walk)."""
        return self._attr_names

    def reordered(self, order: list[int]) -> NodeTable:
        """The table of the nodes in ``order`` (positions in this table)."""
        t = NodeTable()
        t.names = [self.names[i] for i in order]
        t.ops = [self.ops[i] for i in order]
        t.domains = [self.domains[i] for i in order]
        t.inputs = [self.inputs[i] for i in order]
        t.outputs = [self.outputs[i] for i in order]
        t.attributes = None if self.attributes is None else [self.attributes[i] for i in order]
        t._attr_names = self._attr_names
        return t


def node_names(names: Sequence[str], ops: Sequence[str]) -> list[str]:
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
# ``ValueInfoProto`` is ``{name = 1; type = 2; ...}``.  Parsing a serialized model with a schema
# that declares the graph's ``value_info`` (field 13 of GraphProto, field 7 of ModelProto) one
# message of a repeated string ``name`` and a repeated bytes ``type`` merges all the values into
# it (see _merged_nodes): every name and every serialized TypeProto, in value order, in one
# C-level pass, where reading ``v.name`` and ``v.type.SerializeToString()`` value by value from
# Python costs ~8,000 instructions a value (a 10,000-node graph: ~11,700 values).  (Declared a
# ``map<string, bytes>``, the same wire format as a map entry, the parse costs twice as much:
# 3.1 ms against 1.7 on that graph, the map's hashing and its dict.)  Everything else in the model
# is an unknown field to this schema and stays unread.
_LITE: dict[str, type] = {}  # message name -> class, made on first use
_MAX_BYTES_PER_VALUE = 4096  # about where the one parse stops paying (see value_type_bytes)


def _lite_class(name: str) -> Any:
    """``VtModel`` and ``CountModel`` (value types, above) or ``NodesModel`` (:func:`_merged_nodes`), from a schema
    that declares only what is read."""
    if not _LITE:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

        F = descriptor_pb2.FieldDescriptorProto
        fd = descriptor_pb2.FileDescriptorProto(name="qtquant_lite.proto", package="qtquant_lite", syntax="proto2")

        def message(name: str, fields: list[tuple[str, int, int, int, str]], parent: Any = None) -> Any:
            m = (parent.nested_type if parent is not None else fd.message_type).add(name=name)
            for fname, number, kind, label, type_name in fields:
                f = m.field.add(name=fname, number=number, type=kind, label=label)
                if type_name:
                    f.type_name = type_name
            return m

        one, many, string, raw, msg = F.LABEL_OPTIONAL, F.LABEL_REPEATED, F.TYPE_STRING, F.TYPE_BYTES, F.TYPE_MESSAGE
        message("AllValues", [("name", 1, string, many, ""), ("type", 2, raw, many, "")])
        message("VtGraph", [("input", 11, msg, one, ".qtquant_lite.AllValues"),
                            ("output", 12, msg, one, ".qtquant_lite.AllValues"),
                            ("value_info", 13, msg, one, ".qtquant_lite.AllValues")])
        message("VtModel", [("graph", 7, msg, one, ".qtquant_lite.VtGraph")])
        # The same entries, each kept whole and unread: their counts (no Python object each)
        message("CountGraph", [("input", 11, raw, many, ""), ("output", 12, raw, many, ""),
                               ("value_info", 13, raw, many, "")])
        message("CountModel", [("graph", 7, msg, one, ".qtquant_lite.CountGraph")])
        # AttributeProto's name and the fields that hold tensors or graphs (the rest stay unread)
        message("AllAttributes", [("name", 1, string, many, ""), ("t", 5, raw, many, ""), ("g", 6, raw, many, ""),
                                  ("tensors", 10, raw, many, ""), ("graphs", 11, raw, many, ""),
                                  ("sparse_tensor", 22, raw, many, ""), ("sparse_tensors", 23, raw, many, "")])
        message("AllNodes", [("name", 3, string, many, ""), ("op_type", 4, string, many, ""),
                             ("attribute", 5, msg, one, ".qtquant_lite.AllAttributes"),
                             ("domain", 7, string, many, "")])
        message("NodesGraph", [("node", 1, msg, one, ".qtquant_lite.AllNodes")])
        message("NodesModel", [("graph", 7, msg, one, ".qtquant_lite.NodesGraph")])
        pool = descriptor_pool.DescriptorPool()
        pool.Add(fd)
        for m in ("VtModel", "NodesModel", "CountModel"):
            _LITE[m] = message_factory.GetMessageClass(pool.FindMessageTypeByName(f"qtquant_lite.{m}"))
    return _LITE[name]


# -- the graph's node names, op types, domains and attribute names, read in one parse ---------
# A message field that is not repeated but occurs many times on the wire is merged, and merging
# concatenates repeated fields: a schema that declares GraphProto's ``node`` (field 1) one message
# of repeated strings reads the names (field 3) of all nodes into one list, in node order, in one
# C-level pass (likewise op types, domains and, one level down, the attributes' names), where
# reading ``n.name`` node by node makes a wrapper and a call per node (a 10,000-node graph:
# ~25M instructions of names, op types and domains alone).  A field a node leaves out (no name,
# the default domain) is missing from its list: a list shorter than the node count is read node
# by node instead, but a domain list that is empty means every domain is the default "".  (A
# crafted file that repeats a node's name, of which a parse keeps the last, next to a node without
# one could shift the names by one node: it gets labels, no check is skipped, as the UTF-8 check
# reads every copy.)
_MAX_BYTES_PER_NODE = 4096  # a model of mostly weights: copying them costs more (see value_type_bytes)


def _merged_nodes(model_bytes: bytes, n_nodes: int) -> tuple[list[str] | None, list[str] | None,
                                                             list[str] | None, list[str], bool] | None:
    """(names, op types, domains, attribute names, whether any attribute holds a tensor or a graph)
    of the ``n_nodes`` nodes of the serialized model ``model_bytes``, each list None when it
    cannot stand for reading node by node; None when nothing can be read so."""
    if not n_nodes or len(model_bytes) > _MAX_BYTES_PER_NODE * n_nodes:
        return None
    try:
        nodes = _lite_class("NodesModel").FromString(model_bytes).graph.node
    except Exception:  # noqa: BLE001 - anything unexpected: the caller reads the nodes one by one
        return None
    names, ops, domains = nodes.name[:], nodes.op_type[:], nodes.domain[:]
    if not domains:
        domains = [""] * n_nodes
    a = nodes.attribute
    holds = bool(a.t or a.g or a.tensors or a.graphs or a.sparse_tensor or a.sparse_tensors)
    return (names if len(names) == n_nodes else None, ops if len(ops) == n_nodes else None,
            domains if len(domains) == n_nodes else None, a.name[:], holds)


def value_type_bytes(model_bytes: bytes, n_values: int) -> dict[str, bytes] | None:
    """name -> serialized TypeProto of each ``value_info`` entry of the serialized model
    ``model_bytes``, whose graph has ``n_values`` of them (later entries win, as where they are
    read one by one); None when this fast reading cannot stand for reading them one by one: an
    entry without a name or a type, seen as fewer names or types than ``n_values`` (the bytes are
    shape inference's output, whose serializer writes each entry's name and type at most once, so
    a count that matches means one of each); or a name that is not valid UTF-8 (the message parser
    hands those back as bytes).  Also None when the model holds much more than its types (inline
    weights): the parser copies every byte it does not read, which costs more than reading the
    few values one by one (yolov8n_320, 12 MB and 332 values: 1.7 ms against 0.9 ms)."""
    if len(model_bytes) > _MAX_BYTES_PER_VALUE * n_values:
        return None
    try:
        pairs = _lined_up(_lite_class("VtModel").FromString(model_bytes).graph.value_info, n_values)
        return dict(pairs) if pairs is not None else None
    except Exception:  # noqa: BLE001 - anything unexpected: the caller reads the values one by one
        return None


def _lined_up(values: Any, n: int) -> Iterator[tuple[str, bytes]] | None:
    """The (name, serialized type) pairs of ``values`` (an ``AllValues`` of ``n`` entries merged),
    or None where the names and types cannot be lined up: fewer of either than entries (one
    without a name or a type), or a name that is not valid UTF-8 (the parser hands it back as
    bytes: a TypeError from one C-level join, as modelcheck.check_text)."""
    names, types = values.name[:], values.type[:]
    if len(names) != n or len(types) != n:
        return None
    "".join(names)
    return zip(names, types)


def graph_value_types(model_bytes: bytes, n_nodes: int) -> dict[str, bytes] | None:
    """What :func:`value_type_keys` reads from the graph of the serialized inferred model
    ``model_bytes`` (of ``n_nodes`` nodes) as name -> serialized type: its ``value_info``, then its
    outputs, then its inputs (later entries win), from the bytes alone, so the model need not be
    parsed for its types (a 10,000-node graph: 0.5 ms against 2 for the whole model).  None where
    this cannot stand for reading them value by value (see :func:`value_type_bytes`: the counts of
    names and types must match the entries'), and for a model of more than
    :data:`_MAX_BYTES_PER_NODE` bytes a node (weights, which the parser would copy)."""
    if not n_nodes or len(model_bytes) > _MAX_BYTES_PER_NODE * n_nodes:
        return None
    try:
        counts = _lite_class("CountModel").FromString(model_bytes).graph
        g = _lite_class("VtModel").FromString(model_bytes).graph
        found: dict[str, bytes] = {}
        for part, n in ((g.value_info, len(counts.value_info)), (g.output, len(counts.output)),
                        (g.input, len(counts.input))):
            pairs = _lined_up(part, n)
            if pairs is None:
                return None
            found.update(pairs)
        return found
    except Exception:  # noqa: BLE001 - anything unexpected: the caller parses the model
        return None


# -- attribute values -------------------------------------------------------------------------
_INT, _INTS = onnx.AttributeProto.INT, onnx.AttributeProto.INTS
SUBGRAPH_ATTRS = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)  # the kinds that hold a subgraph


def subgraphs(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    """The graphs ``node``'s attributes hold (If branches, Loop and Scan bodies), one level down."""
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            yield a.g
        elif a.type == onnx.AttributeProto.GRAPHS:
            yield from a.graphs


def all_graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """``graph`` and every graph nested in it, at any depth, outer first."""
    yield graph
    for n in graph.node:
        for sub in subgraphs(n):
            yield from all_graphs(sub)


def nested_nodes(nodes: Iterable[onnx.NodeProto]) -> Iterator[onnx.NodeProto]:
    """The nodes inside the subgraphs of ``nodes``, at any depth (not ``nodes`` themselves):
    they read outer values by name, which cutting, rewriting or stripping ``nodes`` must keep."""
    for n in nodes:
        for sub in subgraphs(n):
            for g in all_graphs(sub):
                yield from g.node


def node_parts(n: onnx.NodeProto) -> tuple[str, str, list[bytes] | tuple[()], bool]:
    """(domain, op type, each attribute serialized (``()`` for none), whether one holds a subgraph)
    of node proto ``n``: what identifies a node of a program apart from its wiring."""
    attrs = n.attribute
    if len(attrs):
        return (n.domain, n.op_type, [a.SerializeToString() for a in attrs],
                any(a.type in SUBGRAPH_ATTRS for a in attrs))
    return (n.domain, n.op_type, (), False)


def attr_value(a: onnx.AttributeProto) -> Any:
    """The value :attr:`~qtquant.model.graph.Node.attrs` gives attribute ``a``."""
    kind = a.type
    if (kind == _INT or kind == _INTS) and not a.ref_attr_name:
        # The common cases (axis, group; kernel_shape, pads), as get_attribute_value reads them,
        # but a full slice for list(): see modelcheck._all_tensors.
        return a.i if kind == _INT else a.ints[:]
    if a.type == onnx.AttributeProto.GRAPH:
        return "<graph>"
    if a.type == onnx.AttributeProto.GRAPHS:
        return "<graphs>"
    if a.type == onnx.AttributeProto.TENSOR:
        return numpy_helper.to_array(a.t) if a.t.data_location != onnx.TensorProto.EXTERNAL else "<tensor>"
    v = onnx.helper.get_attribute_value(a)
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, list):
        return [x.decode("utf-8", "replace") if isinstance(x, bytes) else x for x in v]
    return v


def int_attribute(protos: Sequence[onnx.AttributeProto], name: str, default: int) -> int | None:
    """What ``{a.name: attr_value(a) for a in protos}.get(name, default)`` gives when that is
    ``default`` or a plain INT; None for any other kind of value (the caller decodes it then).
    Decoding every attribute into a dict costs ~11,000 instructions a Concat for its axis."""
    found = None
    for a in protos[:]:  # [:]: see modelcheck._all_tensors
        if a.name == name:
            found = a  # the dict keeps the last of repeated names
    if found is None:
        return default
    return int(found.i) if found.type == _INT and not found.ref_attr_name else None


# -- value types decoded: (element type, shape, shape unknown in part or whole) ------------------
def _dim(d: onnx.TensorShapeProto.Dimension) -> int | None:
    v = int(d.dim_value)
    if v:
        return v
    return 0 if d.HasField("dim_value") else None  # a literal zero-sized dim vs an unknown one


def dims_of(type_proto: onnx.TypeProto) -> Shape | None:
    tt = type_proto.tensor_type
    if not tt.HasField("shape"):
        return None
    return tuple(map(_dim, tt.shape.dim))


def _typed(elem_type: int, shape: Shape | None) -> TypedValue:
    """(element type, shape, whether the shape is unknown or has unknown dims): the last is
    worked out once per distinct type, not once per value."""
    return elem_type, shape, shape is None or None in shape


UNTYPED = _typed(0, None)  # a value shape inference gave no type: element type unknown, no shape
# The element type given a value that is not a tensor: a sequence, map or optional (SplitToSequence's
# output).  No TensorProto type is negative; it is not a float type, so the value is never
# quantized, observed or fed as a tensor.
NOT_TENSOR = -1
_NOT_TENSOR_TYPED: TypedValue = (NOT_TENSOR, None, False)


def _type_of(tp: onnx.TypeProto) -> TypedValue:
    """:func:`_typed` of a TypeProto."""
    kind = tp.WhichOneof("value")
    if kind is not None and kind != "tensor_type":
        return _NOT_TENSOR_TYPED
    return _typed(int(tp.tensor_type.elem_type), dims_of(tp))


def value_types(g: onnx.GraphProto, given: dict[str, bytes] | None = None) -> dict[str, TypedValue]:
    """Each typed value of graph ``g`` (value_info, then outputs, then inputs: later ones win)
    as (element type, shape, shape unknown in part or whole: :func:`_typed`); see
    :func:`value_type_keys`, which the graph reads them through."""
    keys, decoded = value_type_keys(g, given)
    return dict(zip(keys, map(decoded.__getitem__, keys.values())))


def value_type_keys(g: onnx.GraphProto, given: dict[str, bytes] | None = None,
                    ends: bool = True) -> tuple[dict[str, bytes], dict[bytes, TypedValue]]:
    """(value name -> its serialized type, serialized type -> :func:`_typed`) for the typed values
    of graph ``g``.  A graph's values share few distinct types, so each is decoded once, keyed by
    its serialized bytes: walking every dim of every value from Python is most of the cost of
    building a big graph otherwise; and the two tables are looked up one after the other rather
    than joined into one per value (10,000s of entries).
    ``given``: name -> serialized type of ``g.value_info``, read already from the serialized
    model (:func:`~qtquant.model.nodetable.value_type_bytes`); else they are read here, value by value,
    as C-level maps (no Python step per value).  ``ends``: the graph's outputs and inputs are
    read from ``g`` after ``given``; False where ``given`` holds them already
    (:func:`graph_value_types`, read from bytes ``g`` is not the graph of)."""
    if given is None:
        values = [*g.value_info, *g.output, *g.input]
        types = list(map(_TYPE, values))
        keys = list(map(_SERIALIZE, types))
        decoded = {key: _type_of(tp) for key, tp in dict(zip(keys, types)).items()}
        return dict(zip(map(_NAME, values), keys)), decoded
    if ends:
        outer = [*g.output, *g.input]  # a few: read one by one
        given.update(zip(map(_NAME, outer), map(_SERIALIZE, map(_TYPE, outer))))
    return given, {key: _decoded_type(key) for key in set(given.values())}


def _decoded_type(type_bytes: bytes) -> TypedValue:
    return _type_of(onnx.TypeProto.FromString(type_bytes))


_TYPE, _NAME = attrgetter("type"), attrgetter("name")
_SERIALIZE = methodcaller("SerializeToString")
